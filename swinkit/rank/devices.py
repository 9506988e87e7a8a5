"""Whether this machine has the devices, and this torch the parts, that an engine's ranks need:
asked by the run's spec before any process starts and by the rank itself (a direct call gets
the same clear error). Imports no torch until asked."""
from __future__ import annotations

from swinkit.input_checks import check_int


class EngineUnavailable(ValueError):
    """The engine cannot run on this machine (the message says why); asv skips it."""


def rank_device(backend: str, local_rank: int):
    """The device a rank works on, which its backend decides: NCCL ranks on their own GPU
    (cuda:local_rank), gloo ranks on CPU whatever the preset says (as swinkit.runs.ddp_run
    builds the model), so what a rank times is where the model's tensors live."""
    import torch
    return torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")


def gpu_count() -> int:
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_dp_devices(n_devices: int, gpus: int | None = None) -> None:
    """DataParallel drives ``n_devices`` GPUs from one process; EngineUnavailable otherwise."""
    check_int("n_devices", n_devices)
    gpus = gpu_count() if gpus is None else gpus
    if gpus == 0:
        raise EngineUnavailable("DataParallel needs CUDA GPUs (one process drives N of them; at "
                                "least 2 to communicate); this machine has none")
    if n_devices > gpus:
        raise EngineUnavailable(f"DataParallel at world size {n_devices} needs {n_devices} "
                                f"GPUs; this machine has {gpus}")


# where torch keeps FSDP2's fully_shard: public from torch 2.6, under _composable in 2.5
FULLY_SHARD_MODULES = ("torch.distributed.fsdp", "torch.distributed._composable.fsdp")


def find_fully_shard():
    """torch's FSDP2 ``fully_shard`` where this torch has it; EngineUnavailable otherwise."""
    import importlib

    import torch
    for name in FULLY_SHARD_MODULES:
        try:
            found = getattr(importlib.import_module(name), "fully_shard", None)
        except ImportError:
            continue
        if callable(found):
            return found
    where = " or ".join(f"{m}.fully_shard" for m in FULLY_SHARD_MODULES)
    raise EngineUnavailable(f"engine fsdp2 needs torch's fully_shard ({where}: torch 2.5 and "
                            f"newer); torch {torch.__version__} has neither")
