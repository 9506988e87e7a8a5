"""Whether this machine has the devices an engine's ranks need: asked by the run's spec before
any process starts and by the rank itself (a direct call gets the same clear error).
Imports no torch until asked."""
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
