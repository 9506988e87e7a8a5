"""Predict world sizes that were not run (``tools/attribute.py --predict``), and score the
prediction against the run when it is made afterwards (held out).

Per launch: at each target size N', what is cheap to measure without the model, in one launch
of N' ranks (twice, :data:`FIRST_TIMINGS`, the host-sharing readings of the two averaged): the
loader's supply with N' loaders at once (without loader workers, rank 0's loader alone first:
how much N' loaders slow one), then the model's bucket all-reduces (the payloads of the
model's own buckets) and its buffer broadcast timed as the component run times them (cold,
the slowest rank's); then the "from" world sizes run as ``--run`` runs them (paired DDP
launches, the components measured beside the DDP steps), the last of them just before the
run at N'. :mod:`swinkit.predict.numbers.extrapolate` predicts N' from the largest "from" run and
those timings; with ``score`` the DDP run at N' follows, and the error is reported per
launch. Nothing measured at N' by the DDP run is used by the prediction.

Every launch is made alike and owes nothing to the others (its own timings, nothing pooled
across launches): a command's launches are so many fresh draws of the same forecast, and
the spread of their scores is the forecast's, not an artefact of their order.
"""
from __future__ import annotations

import dataclasses
import os

from swinkit.predict.numbers.scores import repeatability, score_against, summarize
from swinkit.predict.numbers.pooled_targets import pooled
from swinkit.data.loader import ensure_data
from swinkit.predict.supervisor.held_out_parts import (FIRST_TIMINGS, earlier_timings, explain_miss,
                                                paired_spec, predict_one, score_unpaired_run)
from swinkit.predict.numbers.injected_costs import check_held_out, without_link
from swinkit.predict.supervisor.target_timing import measure_target
from swinkit.injection import Injection
from swinkit.runs.component_costs import basis_of, costs, predict_from
from swinkit.runs.ddp_run import run_ddp
from swinkit.runs.ddp_sweep import images_per_rank

__all__ = ["FIRST_TIMINGS", "IN_LAUNCH_REMOVED", "held_out", "held_out_from_sweep", "predict_one"]

# what ``--in-launch`` (formerly ``--same-launch``) answers now: the mode is gone
IN_LAUNCH_REMOVED = (
    "--in-launch (formerly --same-launch) was removed: its run at 1, made inside the launch it "
    "scored, was not held out, and what it added (each rank alone in turn, its step beside a "
    "stand-in) modelled CPU ranks sharing cores. A forecast: --run --predict-from N (separate "
    "launches; swinkit scorecard prints its figures). The decomposition check: the paired "
    "oracle every --run prints (docs/prediction.md)")


def held_out(preset: str, world_sizes, predict_from_sizes, iters: int = 10, warmup: int = 3,
             repeats: int = 3, score: bool = True, injection=None, unpaired: bool = False,
             progress=print) -> dict:
    """Per launch: time each target size N' without the model, run the ``predict_from_sizes``,
    predict every larger size of ``world_sizes`` from them, then (``score``) run it and score
    the prediction. The timings at N' come first so that the run predicted from is the one
    just before the run at N': on a shared host the speed drifts over minutes, and a basis
    measured closer in time carries less of that drift into the score. They need the buckets'
    sizes: one short run at the largest "from" size first. ``unpaired``: each scored run at
    N' also run unpaired (no local steps, no barrier between steps: the run a user has) and
    every predictor scored against it too."""
    sources, targets = _sizes(world_sizes, predict_from_sizes)
    injection = injection or Injection()
    specs = _specs(preset, sources, targets, iters, warmup, injection)
    # every run's input refused (and the synthetic set written) before anything is launched
    # or announced: a bad --data-root or --inject fails in a second, not after minutes
    configs = [spec.validate()[0] for spec in specs.values()]
    ensure_data(configs[0], progress=progress)  # one data root for every size
    progress(f"[world size {sources[-1]}] a short run: the buckets' sizes for the timings")
    # the model's own buckets: a slower link known at N' is scaled per target (comm_scale)
    plain = without_link(specs[sources[-1]].injection)
    probe_basis = basis_of(run_ddp(dataclasses.replace(specs[sources[-1]], iters=2, warmup=1,
                                                       injection=plain), progress=progress))
    launches = []
    for k in range(repeats):
        def say(ws, what, k=k):
            progress(f"[launch {k + 1}/{repeats}, world size {ws}] {what}")
        history = {ws: [measure_target(preset, ws, probe_basis, progress,
                                       specs[ws].injection.comm_scale)  # a slower link at N'
                        for _ in range(FIRST_TIMINGS)] for ws in targets}
        timed = {ws: pooled(history[ws]) for ws in targets}
        launches.append(_separate_row(specs, sources, timed, history, k + 1, say, score,
                                      unpaired))
    return {"preset": preset, "from": sources, "targets": targets, "launches": launches,
            "summary": summarize(launches, targets), "repeatability": repeatability(launches),
            "injection": injection.to_dict(), "in_launch": False}  # held out, always


def _separate_row(specs: dict, sources: list, timed: dict, history: dict, number: int, say,
                  score: bool, unpaired: bool) -> dict:
    """One launch of :func:`held_out`: the "from" sizes run in their own launches, the
    prediction of each target from the largest, and (``score``) the run at each target after
    it."""
    runs = {}
    for ws in sources:
        say(ws, "DDP and its components")
        runs[ws] = run_ddp(specs[ws], progress=lambda s, ws=ws: say(ws, s))
    basis, t1 = basis_of(runs[sources[-1]]), runs[sources[0]]["iter_s"]
    row = {"launch": number, "measured_from": {ws: r["iter_s"] for ws, r in runs.items()},
           "t1_s": t1, "basis": basis, "targets": {},
           # the host's 1-minute load at the launch (others' processes share the cores)
           "load_average": os.getloadavg()[0],
           # this launch's own timings at N', the latest (the prediction pooled them all)
           "timed": {ws: dataclasses.asdict(history[ws][-1]) for ws in timed},
           **earlier_timings(history, 0)}
    for ws, target in timed.items():
        pred = predict_one(basis, t1, target, specs[ws].injection, specs[sources[-1]].injection,
                           t1_injection=specs[sources[0]].injection)
        if score:  # written before the run: nothing of the run reaches the prediction
            say(ws, "the held-out DDP run")
            run = run_ddp(specs[ws], progress=lambda s, ws=ws: say(ws, s))
            pred["bucket_spans"] = run.get("bucket_spans")
            score_against(pred, run["iter_s"], predict_from(run["local_run"], specs[ws]))
            explain_miss(pred, basis, target, costs(run["local_run"]), run["iter_s"],
                         specs[sources[-1]].injection, specs[ws].injection)
            if unpaired:
                score_unpaired_run(pred, specs[ws], lambda s, ws=ws: say(ws, s))
        row["targets"][ws] = pred
    return row


def _sizes(world_sizes, predict_from_sizes):
    """(the "from" sizes, the target sizes above them), or ValueError naming the option."""
    sources = sorted(set(predict_from_sizes))
    targets = sorted(ws for ws in set(world_sizes) if ws > sources[-1])
    if not targets:
        raise ValueError(f"--predict: no world size above the largest 'from' size {sources[-1]}")
    return sources, targets


def _specs(preset, sources, targets, iters, warmup, injection) -> dict:
    """Every size's spec (:func:`paired_spec`). ValueError where the injection cannot be
    predicted held out."""
    images = images_per_rank(preset, sorted(set(sources) | set(targets)), "weak")
    specs = {ws: paired_spec(preset, ws, iters, warmup, injection, images[ws])
             for ws in sources + targets}
    check_held_out(specs[sources[-1]].injection, [specs[ws].injection for ws in targets])
    return specs


def held_out_from_sweep(sweep, preset: str, source: int = 1, target: int = 2,
                        progress=print) -> dict:
    """World size ``target`` predicted from a weak, paired sweep's run at ``source`` (the
    basis its launch kept) and the timings at ``target`` made now without the model, then
    scored against the sweep's own run at ``target``. That run was made before, but nothing of
    it reaches the prediction: its median iteration is read to score it, and after that its
    components (the basis it kept) to split the miss (:func:`explain_miss`). The shape of
    :func:`held_out`'s result, one launch (bench_ddp's cache, which bench_predict reads)."""
    if Injection.from_dict(sweep.meta.get("injection")).active:
        raise ValueError("the sweep ran with an injection: a held-out prediction from it "
                         "would not know what its timings hold (tools/attribute.py --run "
                         "--predict-from takes one in)")
    first = sweep.get(source)
    basis = first.get("basis")
    if basis is None:
        raise ValueError(f"the run at world size {source} kept no basis for a prediction "
                         "(paired launches keep one)")
    t1 = first["iter_s"]
    # pooled as a held-out launch pools its timings (FIRST_TIMINGS)
    timings = [measure_target(preset, target, basis, progress) for _ in range(FIRST_TIMINGS)]
    timed = pooled(timings)
    pred = predict_one(basis, t1, timed)
    scored = sweep.get(target)  # read from here on only: the prediction is made
    pred["bucket_spans"] = scored.get("bucket_spans")
    score_against(pred, scored["iter_s"], scored.get("prediction"))
    if scored.get("basis"):  # the run at N''s components, kept by the sweep
        explain_miss(pred, basis, timed, scored["basis"].get("costs"), scored["iter_s"])
    row = {"launch": 1, "measured_from": {source: t1}, "t1_s": t1, "basis": basis,
           "targets": {target: pred}, "load_average": os.getloadavg()[0],
           "timed": {target: dataclasses.asdict(timings[-1])},
           **earlier_timings({target: timings}, 0)}
    return {"preset": preset, "from": [source], "targets": [target], "launches": [row],
            "summary": summarize([row], [target]), "repeatability": {}}
