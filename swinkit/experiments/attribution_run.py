"""Measure now what the attribution report needs: the DDP iteration per world size, and each
component in isolation under the same launch (what ``tools/attribute.py --run`` does).

Returns the same :class:`~swinkit.attribution.inputs.Inputs` as reading stored asv results.
"""
from __future__ import annotations

import statistics

from swinkit.attribution.blame import straggler
from swinkit.attribution.inputs import Inputs
from swinkit.attribution.loss_split import Measured
from swinkit.measure.phases import BLAME_KEYS
from swinkit.attribution.prediction import Isolated
from swinkit.input_checks import check_int
from swinkit.launch import LaunchConfig, launch
from swinkit.runs.ddp_run import DDPRunSpec, run_ddp
from swinkit.runs.component_costs import predict_from
from swinkit.injection import Injection
from swinkit.runs.ddp_sweep import images_per_rank
from swinkit.runs.sweep import oversubscribe_allowed


def from_run(preset: str, world_sizes, injection=None, iters: int = 10, warmup: int = 3,
             repeats: int = 3, scaling: str = "weak", progress=print,
             precision: str | None = None) -> Inputs:
    """Measure now: the DDP iteration per world size, ``repeats`` launches with the world
    sizes interleaved (1, 2, 1, 2, ...) so that a slow drift of a shared machine hits each
    alike and the lost time carries its launch-to-launch spread; each launch also measures the
    components of its own DDP run (paired), and the oracle predicts it from them. Every launch
    runs in ``precision`` (None: the preset's), its components too."""
    check_int("repeats", repeats, 1)
    images = images_per_rank(preset, world_sizes, scaling)
    injection = injection or Injection()
    notes = [f"injection {injection.describe()} is not applied at world size {ws}: "
             f"rank(s) {list(injection.named_ranks())} do not exist there"
             for ws in world_sizes if injection.active and not injection.for_world_size(ws).active]
    runs: dict[int, list[dict]] = {ws: [] for ws in world_sizes}
    predictions: dict[int, list[dict]] = {ws: [] for ws in world_sizes}
    # The components are measured in the launch of the DDP run they predict (a paired run:
    # DDP and local optimizer steps alternating in the same processes), so whatever makes one
    # launch of a shared machine slower than another reaches the prediction and the
    # measurement alike. Separate launches differed by up to 10 % here, in both directions.
    for k in range(repeats):
        for ws in world_sizes:
            lc = LaunchConfig(nproc_per_node=ws, allow_oversubscribe=oversubscribe_allowed())
            spec = _spec(preset, ws, iters, warmup, lc, injection, images[ws], precision)
            progress(f"[launch {k + 1}/{repeats}, world size {ws}] DDP iterations and their "
                     f"components, alternating ({warmup} + {iters} of each), then the "
                     "collectives alone and beside the loop")
            run = run_ddp(spec, progress=progress)
            runs[ws].append(run)
            predictions[ws].append(predict_from(run["local_run"], spec))
    measured = {ws: _measured(ws, rs) for ws, rs in runs.items()}
    extra = {ws: {"backend": rs[0]["backend"], "device": rs[0]["device"],
                  "precision": rs[0].get("precision")} for ws, rs in runs.items()}
    predicted = {ws: _median_prediction(ps) for ws, ps in predictions.items()}
    isolated = {}
    for ws in world_sizes:
        r, pred = runs[ws][0], predicted[ws]
        lc = LaunchConfig(nproc_per_node=ws, allow_oversubscribe=oversubscribe_allowed())
        progress(f"[world size {ws}] loader supply with {r['loader_workers']} workers per rank")
        supply = launch("swinkit.components.loader_throughput:loader_rank",
                        dict(preset=preset, data_root=None, workers=r["loader_workers"],
                             batches=10), lc, quiet=True).result["ranks"]
        local = pred["components_s"]
        sizes = pred["bucket_sizes_bytes"]
        isolated[ws] = Isolated(
            ws, local["forward"], local["forward"] + local["backward"] + local["exposed_comm"],
            local["optimizer"], r["images_per_rank"], r["loader_workers"],
            statistics.median(s["images_per_s"] for s in supply), sum(pred["bucket_comm_s"]),
            sizes[-1] / sum(sizes) if sizes else 0.0)
    backend = extra[min(extra)]["backend"] if extra else None
    # the precision the ranks applied, as they labelled it (tf32 on a CPU: a no-op)
    precision = (extra[min(extra)].get("precision") or {}).get("label") if extra else None
    meta = {"commit": None, "machine": None, "source": "run", "preset": preset,
            "backend": backend, "precision": precision, "injection": injection.to_dict(), "notes": notes,
            "repeats": repeats, "scaling": scaling}
    return Inputs(measured, isolated, predicted=predicted, meta=meta, extra=extra)


def _median_prediction(predictions: list[dict]) -> dict:
    """The launch whose predicted iteration is the median one (a whole prediction, so its
    components still add up to it), with every launch's prediction beside it."""
    ranked = sorted(predictions, key=lambda p: p["predicted_iter_s"])
    chosen = dict(ranked[(len(ranked) - 1) // 2])
    chosen["launch_predicted_iter_s"] = [p["predicted_iter_s"] for p in predictions]
    chosen["source"] = "paired"
    return chosen


def _spec(preset, ws, iters, warmup, lc, injection, images: int,
          precision: str | None = None) -> DDPRunSpec:
    return DDPRunSpec(preset=preset, nproc_per_node=ws, iters=iters, warmup=warmup, launch=lc,
                      injection=injection.for_world_size(ws),
                      overrides={"images_per_rank": images}, paired=True, precision=precision)


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
                    {c: med(r["blame_s"][c] for r in runs) for c in BLAME_KEYS},
                    stats["iqr_ratio"], stats["n"], launch_iter_s=[r["iter_s"] for r in runs],
                    launch_iqr_ratio=[r["iteration_stats"]["0"]["iqr_ratio"] for r in runs],
                    extra={"straggler": straggler(caused), "skew_s": runs[0]["skew_s"],
                           "images_per_rank": runs[0]["images_per_rank"]})
