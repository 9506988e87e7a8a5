"""Measure now what the attribution report needs: the DDP iteration per world size, and each
component in isolation under the same launch (what ``tools/attribute.py --run`` does).

Returns the same :class:`~swinkit.attribution.inputs.Inputs` as reading stored asv results.
"""
from __future__ import annotations

import statistics

from swinkit.attribution.blame import straggler
from swinkit.attribution.inputs import Inputs
from swinkit.attribution.loss_split import COMPONENTS, Measured
from swinkit.attribution.prediction import Isolated
from swinkit.checks import check_int
from swinkit.dist import LaunchConfig, launch
from swinkit.workloads.ddp_run import DDPRunSpec, run_ddp
from swinkit.workloads.forward_backward import measure_isolated
from swinkit.workloads.inject import Injection
from swinkit.workloads.sweep import oversubscribe_allowed


def from_run(preset: str, world_sizes, injection=None, iters: int = 10, warmup: int = 3,
             repeats: int = 3, progress=print) -> Inputs:
    """Measure now: the DDP iteration per world size, ``repeats`` times with the world sizes
    interleaved (1, 2, 1, 2, ...) so that a slow drift of a shared machine hits each alike and
    the lost time carries its launch-to-launch spread; then each component in isolation."""
    check_int("repeats", repeats, 1)
    injection = injection or Injection()
    notes = [f"injection {injection.describe()} is not applied at world size {ws}: "
             f"rank(s) {list(injection.ranks)} do not exist there"
             for ws in world_sizes if injection.active and not injection.for_world_size(ws).active]
    runs: dict[int, list[dict]] = {ws: [] for ws in world_sizes}
    for k in range(repeats):
        for ws in world_sizes:
            lc = LaunchConfig(world_size=ws, allow_oversubscribe=oversubscribe_allowed())
            progress(f"[launch {k + 1}/{repeats}, world size {ws}] DDP iteration "
                     f"({warmup} + {iters} iterations)")
            runs[ws].append(run_ddp(DDPRunSpec(preset=preset, world_size=ws, iters=iters,
                                               warmup=warmup, launch=lc,
                                               injection=injection.for_world_size(ws)),
                                    progress=progress))
    measured = {ws: _measured(ws, rs) for ws, rs in runs.items()}
    extra = {ws: {"backend": rs[0]["backend"], "device": rs[0]["device"]} for ws, rs in runs.items()}
    isolated = {}
    compute = None
    for ws in world_sizes:
        r = runs[ws][0]
        lc = LaunchConfig(world_size=ws, allow_oversubscribe=oversubscribe_allowed())
        if compute is None:
            progress("[isolated] forward/backward of the segmentor in one process")
            compute = measure_isolated(preset, r["images_per_rank"], samples=5)["results"]
        progress(f"[world size {ws}] loader supply with {r['loader_workers']} workers per rank")
        supply = launch("swinkit.workloads.loader_throughput:loader_rank",
                        dict(preset=preset, data_root=None, workers=r["loader_workers"],
                             batches=10), lc, quiet=True).result["ranks"]
        progress(f"[world size {ws}] all-reduce of the preset's {len(r['bucket_sizes_bytes'])} DDP buckets")
        elems = [b // 4 for b in r["bucket_sizes_bytes"]]
        comm = launch("swinkit.workloads.allreduce:allreduce_rank",
                      dict(samples=5, layouts=["preset_buckets"], dtypes=["fp32"], bare_iters=1,
                           sizes={"preset_buckets": elems, "segmentor_flat": [sum(elems)]}),
                      lc, quiet=True).result["ranks"][0]
        med = lambda op: statistics.median(compute[f"segmentor/{op}"]["seconds"])  # noqa: E731
        isolated[ws] = Isolated(
            ws, med("forward"), med("forward_backward"), med("optimizer"), r["images_per_rank"],
            r["loader_workers"], statistics.median(s["images_per_s"] for s in supply),
            statistics.median(comm["times"]["preset_buckets/fp32"]),
            r["bucket_sizes_bytes"][-1] / sum(r["bucket_sizes_bytes"]))
    backend = extra[min(extra)]["backend"] if extra else None
    return Inputs(measured, isolated, meta={"commit": None, "machine": None, "source": "run",
                                            "preset": preset, "backend": backend,
                                            "injection": injection.to_dict(),
                                            "notes": notes, "repeats": repeats}, extra=extra)


def _measured(world_size: int, runs: list[dict]) -> Measured:
    """Repeated launches of one world size as one measurement: medians of per-launch medians,
    the within-launch spread of the first launch, and the waits each rank caused, averaged."""
    med = statistics.median
    caused: dict[int, dict[str, float]] = {}
    for r in runs:
        for rank, by_phase in (r.get("wait_caused_s") or {}).items():
            for phase, seconds in by_phase.items():
                caused.setdefault(int(rank), {}).setdefault(phase, 0.0)
                caused[int(rank)][phase] += seconds / len(runs)
    stats = runs[0]["iteration_stats"]["0"]
    return Measured(world_size, med(r["iter_s"] for r in runs),
                    {c: med(r["blame_s"][c] for r in runs) for c in COMPONENTS},
                    stats["iqr_ratio"], stats["n"], launch_iter_s=[r["iter_s"] for r in runs],
                    extra={"straggler": straggler(caused), "skew_s": runs[0]["skew_s"]})
