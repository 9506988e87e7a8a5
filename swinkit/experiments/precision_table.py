"""The precision measurement table of a device: the preset's forward+backward per precision
and heads layout, the optimizer step grouped three ways (one process,
:mod:`swinkit.components.precision_variants`), and one instrumented DDP iteration at one
rank per precision (a launch each), so that what a precision changes in the step's parts and
in the whole iteration are read in one place (``tools/gpu_check.py --parts precision`` writes
it as markdown; docs/precision.md, "Measured on a GPU").
"""
from __future__ import annotations

import torch

from swinkit.components.forward_backward import precision_skip_reason
from swinkit.components.precision_variants import (TABLE_PRECISIONS, empty_result,
                                                   measure_variants_isolated)
from swinkit.launch import LaunchError
from swinkit.model.precision import cuda_capability
from swinkit.runs.ddp_run import DDPRunSpec, run_ddp


def ddp_iteration(preset: str, precision: str, iters: int, progress=print) -> dict:
    """One rank's instrumented DDP iteration in ``precision``, as the preset trains (its
    images per rank, heads and optimizer): median phases and iteration, and their means,
    which add up to the mean iteration exactly (what a share of the iteration is read from)."""
    run = run_ddp(DDPRunSpec(preset=preset, nproc_per_node=1, iters=iters, warmup=2,
                             precision=precision), progress=progress)
    return {"iter_s": run["iter_s"], "phases_s": run["phases_s"],
            "iter_mean_s": run["iter_mean_s"], "phases_mean_s": run["phases_mean_s"],
            "images_per_rank": run["images_per_rank"], "device": run["device"],
            "precision": run["precision"], "remedies": run["ranks"][0].get("remedies"),
            "iterations": iters}


def precision_table(preset: str, batch: int, iters: int = 10, samples: int = 5,
                    precisions=TABLE_PRECISIONS, timeout_s: float = 1800,
                    progress=print, keep_variants_at=None) -> dict:
    """The table's numbers (plain data; :func:`swinkit.report.precision_table.markdown`
    renders them). A precision this device cannot measure as itself is skipped with the
    reason in the variants' ``skipped`` and in ``ddp``; a DDP launch that fails is kept as
    ``{"failed": why}`` and the other precisions still run, and so do the launches when the
    variants' process fails (its ``failed["process"]``, beside the variants it finished).
    ``timeout_s`` bounds the variants' process; each launch has the run's own limits.
    ``keep_variants_at``: a path where the variants' results are written as they come and
    left (:func:`measure_variants_isolated`'s ``keep_at``)."""
    progress(f"[precision table] preset {preset}: forward+backward at {batch} images, "
             f"{', '.join(precisions)}, heads NCHW and channels_last; optimizer grouped three ways")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        variants = measure_variants_isolated(preset, batch, samples, precisions, timeout_s,
                                             keep_at=keep_variants_at)
    except (RuntimeError, OSError, ValueError) as exc:   # none finished: the launches still run
        variants = empty_result(preset, batch, samples, device)
        variants["failed"]["process"] = f"{type(exc).__name__}: {exc}"[:2000]
    out = {"variants": variants, "ddp": {}}
    for precision in precisions:
        if reason := precision_skip_reason(precision, device.type,
                                           cuda_capability=cuda_capability(device)):
            out["ddp"][precision] = {"skipped": reason}
            continue
        progress(f"[precision table] one rank's DDP iteration in {precision}, {iters} iterations")
        try:
            out["ddp"][precision] = ddp_iteration(preset, precision, iters, progress)
        except (LaunchError, RuntimeError, OSError, ValueError) as exc:
            out["ddp"][precision] = {"failed": f"{type(exc).__name__}: {exc}"[:500]}
    return out
