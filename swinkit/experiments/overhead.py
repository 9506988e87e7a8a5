"""What the instrumentation costs: instrumented vs bare DDP loop, interleaved in one run.

Launches alternate (bare, instrumented, bare, instrumented, ...) so slow drifts of a shared
machine hit both variants alike; the figure is the ratio of the medians of per-launch median
iteration times, reported with every launch's value and the range of the per-pair ratios.
DDP's runtime-stats sampling (the reducer-timer cross-check) is off in both variants: it is
not part of swinkit's timeline, and on GPU it synchronises inside the step.

Both variants are read on the same clock: ``loop_iteration``, the host clock read once at the
top of every iteration, which the bare loop and the instrumented one both keep. The run's own
``iter_s`` would not do: the instrumented loop reports it from the timeline (CUDA events on a
GPU), the bare loop from the host clock, so their ratio would mix two clocks.
"""
from __future__ import annotations

import statistics
from dataclasses import replace

from swinkit.runs.ddp_run import DDPRunSpec, run_ddp


def loop_iter_s(result: dict) -> float:
    """A run's iteration time on the loop clock: the median over ranks of each rank's median
    ``loop_iteration`` (seconds), whether the run was bare or instrumented."""
    ranks = result["ranks"]
    if not ranks:
        raise ValueError("result has no ranks to read loop_iteration from")
    return statistics.median(statistics.median(r["loop_iteration"]) for r in ranks)


def instrumentation_overhead(spec: DDPRunSpec, repeats: int = 3, progress=print) -> dict:
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    times = {"bare": [], "instrumented": []}
    for i in range(repeats):
        for variant in ("bare", "instrumented"):
            r = run_ddp(replace(spec, bare=variant == "bare", ddp_timers=False),
                        progress=progress)
            times[variant].append(loop_iter_s(r))
            progress(f"  repeat {i + 1}/{repeats} {variant:>12}: {times[variant][-1]:.4f} "
                     "s/iteration")
    bare, inst = statistics.median(times["bare"]), statistics.median(times["instrumented"])
    ratios = [i / b for b, i in zip(times["bare"], times["instrumented"])]
    return {"preset": spec.preset, "world_size": spec.world_size, "iters": spec.iters,
            "repeats": repeats, "iter_s": times, "clock": "loop_iteration",
            "bare_median_s": bare, "instrumented_median_s": inst, "overhead": inst / bare - 1,
            "overhead_interval": [min(ratios) - 1, max(ratios) - 1]}
