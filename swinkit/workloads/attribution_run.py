"""Measure now what the attribution report needs: the DDP iteration per world size, and each
component in isolation under the same launch (what ``tools/attribute.py --run`` does).

Returns the same :class:`~swinkit.attribution.inputs.Inputs` as reading stored asv results.
"""
from __future__ import annotations

import statistics

from swinkit.attribution.inputs import Inputs
from swinkit.attribution.loss_split import Measured
from swinkit.attribution.prediction import Isolated
from swinkit.dist import LaunchConfig, launch
from swinkit.workloads.ddp_run import DDPRunSpec, run_ddp
from swinkit.workloads.forward_backward import measure_isolated
from swinkit.workloads.inject import Injection
from swinkit.workloads.sweep import oversubscribe_allowed


def from_run(preset: str, world_sizes, injection=None, iters: int = 10, warmup: int = 3,
             progress=print) -> Inputs:
    """Measure now: the DDP iteration per world size, and each component in isolation."""

    injection = injection or Injection()
    measured, isolated, extra = {}, {}, {}
    compute = None
    for ws in world_sizes:
        lc = LaunchConfig(world_size=ws, allow_oversubscribe=oversubscribe_allowed())
        progress(f"[world size {ws}] DDP iteration ({warmup} + {iters} iterations)")
        r = run_ddp(DDPRunSpec(preset=preset, world_size=ws, iters=iters, warmup=warmup,
                               injection=injection, launch=lc), progress=progress)
        stats = r["iteration_stats"]["0"]
        measured[ws] = Measured(ws, r["iter_mean_s"], dict(r["phases_mean_s"]), stats["iqr_ratio"],
                                stats["n"], extra={"straggler": r["straggler"],
                                                   "skew_s": r["skew_s"]})
        extra[ws] = {"backend": r["backend"], "device": r["device"]}
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
                                            "injection": injection.to_dict()}, extra=extra)
