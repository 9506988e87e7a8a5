"""A paired launch's local steps read as a run of their own (the paired oracle's components at
N), and the step times every run reports. The kinds and their order:
:class:`swinkit.rank.plan.StepPlan`."""
from __future__ import annotations

import statistics


def local_run(out: dict, ranks: list[dict], grad_accum: int) -> dict:
    """A paired run's local iterations in the shape of a ``local`` run's result (what
    :func:`swinkit.runs.component_costs.costs` reads): no warm-up, the DDP ones warmed up."""
    local_ranks = [{**{k: r[k] for k in ("rank", "comm", "contention") if k in r},
                    **r["local"]} for r in ranks]
    return {"world_size": out["world_size"], "warmup": 0, "grad_accum": grad_accum,
            "ranks": local_ranks, "bucket_sizes_bytes": out["bucket_sizes_bytes"],
            "loader_workers": out["loader_workers"], "images_per_rank": out["images_per_rank"],
            "precision": out.get("precision"), **step_times(local_ranks, grad_accum)}


def step_times(ranks: list[dict], grad_accum: int) -> dict:
    """``step_s``: the median optimizer step (``grad_accum`` consecutive iterations summed,
    median per rank, median across ranks); ``per_batch_s`` = step_s / grad_accum, comparable
    with a run without accumulation (a median over iterations would pick the cheap no_sync
    micro-batches and miss the all-reduce)."""
    step = statistics.median(median_step(r["iteration"], grad_accum) for r in ranks)
    return {"grad_accum": grad_accum, "step_s": step, "per_batch_s": step / grad_accum}


def median_step(iterations: list[float], grad_accum: int) -> float:
    """The median of ``grad_accum`` consecutive ``iterations`` summed (whole optimizer steps).

    >>> median_step([1, 3, 1, 3, 2, 5], 2)
    4
    """
    k = grad_accum
    return statistics.median(sum(iterations[i:i + k])
                             for i in range(0, len(iterations) - k + 1, k))
