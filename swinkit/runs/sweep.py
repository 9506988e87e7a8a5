"""Sweeps over world sizes (and other parameters): which can run here, and what each gave.

A benchmark declares world sizes 1, 2, 4, 8 everywhere; :func:`plan_world_sizes` says which this
machine can run and why the others are skipped (more GPUs than present; more CPU ranks than
cores unless ``$SWINKIT_OVERSUBSCRIBE=1``). A :class:`Sweep` keeps results, skip reasons and
failures by key, so one expensive run can feed many asv metrics.

Keep this module free of torch (and of anything that imports it) at import time: asv runs
every parameter combination of a ``track_*`` benchmark in its own process, which only
unpickles the setup_cache's :class:`Sweep` (pickled as ``swinkit.runs.sweep.Sweep``) and
returns a number; importing torch there cost about 1.5 s a process, hundreds of times per run.
tests/test_benchmark_imports.py checks it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable

from swinkit.launch import LaunchConfig, LaunchError  # torch-free (supervisor and diagnosis)

WORLD_SIZES = (1, 2, 4, 8)
OVERSUBSCRIBE_ENV = "SWINKIT_OVERSUBSCRIBE"


PRESET_ENV = "SWINKIT_PRESET"


def default_preset() -> str:
    """$SWINKIT_PRESET, else thesis with CUDA and cpu without."""
    return os.environ.get(PRESET_ENV) or ("thesis" if _cuda_available() else "cpu")


def default_backend() -> str:
    return "nccl" if _cuda_available() else "gloo"


def _cuda_available() -> bool:
    import torch  # here, not at the top: see the module docstring
    return torch.cuda.is_available()


def oversubscribe_allowed() -> bool:
    return os.environ.get(OVERSUBSCRIBE_ENV, "") not in ("", "0")


def plan_world_sizes(world_sizes: Iterable[int], backend: str | None = None,
                     threads_per_rank: int = 1) -> dict[int, str | None]:
    """world size -> None (runnable) or the reason it is skipped on this machine."""
    backend = backend or default_backend()
    plan = {}
    for ws in world_sizes:
        if backend == "nccl":
            import torch  # here, not at the top: see the module docstring
            gpus = torch.cuda.device_count()
            plan[ws] = None if ws <= gpus else f"needs {ws} GPUs; this machine has {gpus}"
        else:
            cores = os.cpu_count() or 1
            need = ws * threads_per_rank
            plan[ws] = None if need <= cores or oversubscribe_allowed() else (
                f"needs {need} CPU cores for {ws} ranks; this machine has {cores} "
                f"(set {OVERSUBSCRIBE_ENV}=1 to run oversubscribed)")
    return plan


def sweep_launch(world_size: int, wall_timeout_s: float) -> LaunchConfig:
    """The launch of one world size of a sweep: oversubscribed only where the user said so
    (plan_world_sizes has already skipped what this machine cannot hold otherwise)."""
    return LaunchConfig(nproc_per_node=world_size, allow_oversubscribe=oversubscribe_allowed(),
                        wall_timeout_s=wall_timeout_s)


@dataclass
class Sweep:
    """Results by key; keys that were skipped or failed carry the reason instead."""
    results: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    failed: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def get(self, *key: Hashable) -> Any:
        """The result for ``key``; NotImplementedError (asv: skipped) or RuntimeError (asv:
        failed) with the reason otherwise."""
        key = key if len(key) > 1 else key[0]
        if key in self.results:
            return self.results[key]
        if key in self.failed:
            raise RuntimeError(f"{key}: {self.failed[key]}")
        raise NotImplementedError(f"{key}: {self.skipped.get(key, 'not measured')}")

    def runnable(self, world_sizes: Iterable[int], key: Callable[[int], Hashable] = lambda ws: ws,
                 threads_per_rank: int = 1) -> list[int]:
        """The world sizes of ``world_sizes`` this machine can run (:func:`plan_world_sizes`);
        each other one is recorded as skipped under ``key(ws)``, with the reason."""
        out = []
        for ws, reason in plan_world_sizes(world_sizes, threads_per_rank=threads_per_rank).items():
            if reason:
                self.skipped[key(ws)] = reason
            else:
                out.append(ws)
        return out

    def run(self, key: Hashable, fn: Callable[[], Any], progress=print) -> None:
        """Store ``fn()`` under ``key``; a failed launch is recorded, not raised, so the rest
        of the sweep (and the next benchmark) still runs."""
        try:
            self.results[key] = fn()
        except LaunchError as exc:
            self.failed[key] = exc.diagnosis.summary
            progress(f"  {key}: FAILED: {exc.diagnosis.summary}")
        except Exception as exc:  # recorded for asv to show as failed; the sweep goes on
            self.failed[key] = f"{type(exc).__name__}: {exc}"
            progress(f"  {key}: FAILED: {self.failed[key]}")

    def __getstate__(self) -> dict:
        """Pickled as plain data, so unpickling imports nothing but this module: asv's track
        processes unpickle the setup_cache's Sweep, and one ``torch.__version__`` in it (a
        ``TorchVersion``, as in the runs' environment record) would import torch in each."""
        return {name: _plain(value) for name, value in self.__dict__.items()}


def _plain(value: Any) -> Any:
    """``value`` with subclasses of str, int and float (``TorchVersion``, ``numpy.float64``)
    and numpy scalars turned into the builtin types, inside dicts, lists and tuples; anything
    else unchanged (it pickles as it would have)."""
    kind = type(value)
    if kind is dict:
        return {_plain(k): _plain(v) for k, v in value.items()}
    if kind in (list, tuple):
        return kind(_plain(v) for v in value)
    if kind in (str, int, float, bool) or value is None:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    if kind.__module__ == "numpy" and hasattr(value, "item"):  # numpy scalars (not arrays)
        return value.item() if getattr(value, "ndim", None) == 0 else value
    return value
