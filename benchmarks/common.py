"""What every benchmark file shares: the preset, world sizes, and asv-shaped return values.

Environment variables (asv passes the environment through to benchmarks):
    SWINKIT_PRESET         workload preset (default: thesis with CUDA, cpu without)
    SWINKIT_OVERSUBSCRIBE  1 = run more CPU ranks than cores instead of skipping them
    SWINKIT_DATA_ROOT      ADE20K root (default: the synthetic set)

asv runs each parameter combination of a track_* benchmark in a process of its own that only
unpickles the setup_cache's Sweep and returns a number, hundreds of processes per run. So the
benchmark files import nothing heavy (torch, mmseg, swinkit.workloads.* with a model) at module
level: the workload functions are :func:`lazy` stand-ins, imported when setup_cache calls them,
and the param values those modules define are written out (tests/test_benchmark_imports.py
keeps them equal and checks that a track process imports no torch).
"""
import importlib
import inspect
import math
import os

# torch-free since swinkit.workloads.sweep lazily imports torch (it also holds Sweep, which the
# track processes unpickle); older commits' sweep.py imports torch here, which only costs time.
from swinkit.workloads.sweep import WORLD_SIZES  # noqa: F401  re-exported for the benchmarks


def preset() -> str:
    """$SWINKIT_PRESET, else thesis with CUDA and cpu without.

    Kept here, not imported: asv runs these benchmark files (from the working tree) against
    every commit's swinkit when it builds history, so they lean on as little of it as they can.
    """
    if os.environ.get("SWINKIT_PRESET"):
        return os.environ["SWINKIT_PRESET"]
    import torch  # only here: a track process never calls preset()
    return "thesis" if torch.cuda.is_available() else "cpu"


def lazy(target: str):
    """A stand-in for the function ``"module:name"`` that imports it when first called.

    The benchmark methods call these by the name the function had when it was imported at the
    top, so their source (which asv hashes into each benchmark's version) is unchanged.
    """
    module, name = target.split(":")

    def call(*args, **kwargs):
        return getattr(importlib.import_module(module), name)(*args, **kwargs)
    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"{target}, imported on the first call."
    call.target = target
    return call


def accepts(function, keyword: str) -> bool:
    """Whether a :func:`lazy` stand-in's function takes ``keyword``: asv runs these files
    against older commits' swinkit too, whose functions may lack a newer option."""
    module, name = function.target.split(":")
    target = getattr(importlib.import_module(module), name)
    return keyword in inspect.signature(target).parameters


def samples(values):
    """A track_* return value asv treats as timing samples (median, IQR and CI are kept, and
    asv compare's significance test can use them); NaN when there are none."""
    values = [v for v in values if v is not None and not math.isnan(v)]
    return {"samples": values, "number": 1} if values else math.nan
