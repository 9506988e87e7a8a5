"""What every benchmark file shares: the preset, world sizes, and asv-shaped return values.

Environment variables (asv passes the environment through to benchmarks):
    SWINKIT_PRESET         workload preset (default: thesis with CUDA, cpu without)
    SWINKIT_OVERSUBSCRIBE  1 = run more CPU ranks than cores instead of skipping them
    SWINKIT_DATA_ROOT      ADE20K root (default: the synthetic set)
"""
import math
import os

from swinkit.workloads.sweep import WORLD_SIZES  # noqa: F401  re-exported for the benchmarks


def preset() -> str:
    """$SWINKIT_PRESET, else thesis with CUDA and cpu without.

    Kept here, not imported: asv runs these benchmark files (from the working tree) against
    every commit's swinkit when it builds history, so they lean on as little of it as they can.
    """
    import torch
    return os.environ.get("SWINKIT_PRESET") or ("thesis" if torch.cuda.is_available() else "cpu")


def samples(values):
    """A track_* return value asv treats as timing samples (median, IQR and CI are kept, and
    asv compare's significance test can use them); NaN when there are none."""
    values = [v for v in values if v is not None and not math.isnan(v)]
    return {"samples": values, "number": 1} if values else math.nan
