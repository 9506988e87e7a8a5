"""What every benchmark file shares: the preset, world sizes, and asv-shaped return values.

Environment variables (asv passes the environment through to benchmarks):
    SWINKIT_PRESET         workload preset (default: thesis with CUDA, cpu without)
    SWINKIT_OVERSUBSCRIBE  1 = run more CPU ranks than cores instead of skipping them
    SWINKIT_DATA_ROOT      ADE20K root (default: the synthetic set)

asv runs each parameter combination of a track_* benchmark in a process of its own that only
unpickles the setup_cache's Sweep and returns a number, hundreds of processes per run. So the
benchmark files import nothing heavy (torch, mmseg, swinkit modules with a model) at module
level: the workload functions are :func:`lazy` stand-ins, imported when setup_cache calls them,
and the param values those modules define are written out (tests/test_benchmark_imports.py
keeps them equal and checks that a track process imports no torch).
"""
import importlib
import inspect
import math
import os

# Where a module lived before swinkit's layout followed the process boundary: asv runs these
# files (from the working tree) against older commits too, whose swinkit has only the old path.
# Kept here rather than as re-exports in swinkit, so the package itself holds one path per module.
FORMERLY = {
    "swinkit.attribution.scaling": "swinkit.scaling",
    "swinkit.runs.sweep": "swinkit.workloads.sweep",
    "swinkit.runs.ddp_sweep": "swinkit.workloads.ddp_sweep",
    "swinkit.runs.engine_run": "swinkit.workloads.engine_run",
    "swinkit.components.allreduce": "swinkit.workloads.allreduce",
    "swinkit.components.forward_backward": "swinkit.workloads.forward_backward",
    "swinkit.components.loader_throughput": "swinkit.workloads.loader_throughput",
    "swinkit.experiments.remedies": "swinkit.workloads.remedies",
    "swinkit.experiments.whatif_run": "swinkit.workloads.whatif_run",
    # the predictor, fenced into one subpackage (swinkit/predict/)
    "swinkit.predict.supervisor.held_out": "swinkit.experiments.predict_run",
}


def module(name: str):
    """``name`` imported, or its former path (:data:`FORMERLY`) in an older commit's swinkit."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if name not in FORMERLY or not (e.name and name.startswith(e.name)):
            raise  # a missing dependency inside the module, not the module itself
        return importlib.import_module(FORMERLY[name])


# torch-free since swinkit.runs.sweep lazily imports torch (it also holds Sweep, which the
# track processes unpickle); older commits' sweep.py imports torch here, which only costs time.
WORLD_SIZES = module("swinkit.runs.sweep").WORLD_SIZES


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
    path, name = target.split(":")

    def call(*args, **kwargs):
        return getattr(module(path), name)(*args, **kwargs)
    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"{target}, imported on the first call."
    call.target = target
    return call


def accepts(function, keyword: str) -> bool:
    """Whether a :func:`lazy` stand-in's function takes ``keyword``: asv runs these files
    against older commits' swinkit too, whose functions may lack a newer option."""
    path, name = function.target.split(":")
    target = getattr(module(path), name)
    return keyword in inspect.signature(target).parameters


def samples(values):
    """A track_* return value asv treats as timing samples (median, IQR and CI are kept, and
    asv compare's significance test can use them); NaN when there are none."""
    values = [v for v in values if v is not None and not math.isnan(v)]
    return {"samples": values, "number": 1} if values else math.nan
