"""Predict world sizes that were not run (``tools/attribute.py --predict``), and score the
prediction against the run when it is made afterwards (held out).

Per launch: at each target size N', what is cheap to measure without the model, in one launch
of N' ranks: the loader's supply with N' loaders at once (without loader workers, rank 0's
loader alone first: how much N' loaders slow one), then the model's bucket all-reduces
(the payloads of the model's own buckets) and its buffer broadcast timed as the component run
times them (cold, the slowest rank's); then the "from" world sizes run as ``--run`` runs them
(paired DDP launches, the components measured beside the DDP steps), the last of them just
before the run at N'.
:mod:`swinkit.attribution.extrapolate` predicts N' from the largest "from" run and those
timings; with ``score`` the DDP run at N' follows, and the error is reported per launch.
Nothing measured at N' by the DDP run is used by the prediction.
"""
from __future__ import annotations

import dataclasses
import os

from swinkit.attribution.extrapolate import Host, Target, naive, predict_at
from swinkit.attribution.held_out_scores import repeatability, score_against, summarize
from swinkit.attribution.miss_split import split_miss
from swinkit.attribution.pooled_targets import pooled
from swinkit.data.loader import ensure_data
from swinkit.experiments.injected_costs import (check_held_out, injected_costs,
                                                without_injection, without_link)
from swinkit.experiments.target_timing import measure_target
from swinkit.injection import Injection
from swinkit.launch import LaunchConfig
from swinkit.runs.component_costs import basis_of, costs, predict_from
from swinkit.runs.ddp_run import DDPRunSpec, run_ddp
from swinkit.runs.ddp_sweep import images_per_rank
from swinkit.runs.sweep import oversubscribe_allowed

# the timing launches at N' before the first launch's prediction. The readings of the host's
# sharing are pooled over the timings so far, and a launch predicted from one timing alone was
# the weak one: in 2 of 8 sets of 3 (each rank at its own speed, 2 from 1) the first launch
# missed 95 % (90.7, 94.7 %) where no later one did; re-predicted offline with a second
# timing of the same set pooled in, the first launches read 96.0-99.9 % (8 of 8 sets).
# Later launches have the earlier ones' timings to pool with: one each.
FIRST_TIMINGS = 2


def predict_one(basis: dict, t1_s: float, target: Target, injection: Injection | None = None,
                basis_injection: Injection | None = None) -> dict:
    """The prediction at ``target`` from ``basis`` (:func:`~swinkit.runs.component_costs.basis_of`
    the largest "from" run) with the baselines and the model with its network term dropped
    beside it. ``injection``: what the run at the target is known to add (a straggler there),
    taken into the model's replay; the naive predictions know nothing of it.
    ``basis_injection``: the one the run predicted from had (in its timings already; for a
    basis made in place, the launch's, as each rank's turns alone held it). A
    slower link (``comm_scale``) is not taken here: :func:`measure_target` times it."""
    c, host = basis["costs"], Host(**basis["host"])
    injection, basis_injection = without_link(injection), without_link(basis_injection)
    check_held_out(basis_injection, [])
    # every rank the basis holds: its N0 ranks, or each rank of the launch a basis made in
    # place ran alone in (world size 1 in each of their places)
    places = max(r["rank"] for r in c["ranks"]) + 1
    held = injected_costs(basis_injection, places, host)[0]
    if held:  # the run as if clean: the target's injection is added whole
        c = without_injection(c, held)
    injected, delay = injected_costs(injection, target.world_size, host)
    pred = predict_at(c, target, host, injected=injected, launch_delay_s=delay)
    pred.update(naive(t1_s, target))
    pred["no_network_s"] = predict_at(c, target, host, network=False, injected=injected,
                                      launch_delay_s=delay)["predicted_iter_s"]
    pred["from_world_size"] = c["world_size"]
    pred["t1_s"] = t1_s
    pred["predicted_efficiency"] = t1_s / pred["predicted_iter_s"]
    if injected or delay:
        pred["assumptions"].append(
            f"known at N': the injection {injection.describe()}, its cost the amount asked "
            "(per iteration, optimizer_ms per step; spread over 'every' iterations as a mean); "
            "data_ms only where the rank loads itself (no loader workers)")
    if held:
        pred["assumptions"].append(
            f"the run predicted from had the injection {basis_injection.describe()}: taken off "
            "its timings first (what each rank held), before compute is scaled")
    return pred


def held_out(preset: str, world_sizes, predict_from_sizes, iters: int = 10, warmup: int = 3,
             repeats: int = 3, score: bool = True, injection=None, same_launch: bool = False,
             progress=print) -> dict:
    """Per launch: time each target size N' without the model, run the ``predict_from_sizes``,
    predict every larger size of ``world_sizes`` from them, then (``score``) run it and score
    the prediction. The timings at N' come first so that the run predicted from is the one
    just before the run at N': on a shared host the speed drifts over minutes, and a basis
    measured closer in time carries less of that drift into the score. They need the buckets'
    sizes: one short run at the largest "from" size first. The readings of the host's sharing
    at N' are averaged over the timings so far (:func:`pooled`; :data:`FIRST_TIMINGS` before
    the first launch), all made before the run.
    ``same_launch``: the run at 1 is made inside the launch at N' (:func:`_same_launch`)."""
    sources, targets = _sizes(world_sizes, predict_from_sizes, same_launch, score)
    injection = injection or Injection()
    specs = _specs(preset, sources, targets, iters, warmup, injection, same_launch)
    # every run's input refused (and the synthetic set written) before anything is launched
    # or announced: a bad --data-root or --inject fails in a second, not after minutes
    configs = [spec.validate()[0] for spec in specs.values()]
    ensure_data(configs[0], progress=progress)  # one data root for every size
    progress(f"[world size {sources[-1]}] a short run: the buckets' sizes for the timings")
    # the model's own buckets: a slower link known at N' is scaled per target (comm_scale)
    plain = without_link(specs[sources[-1]].injection)
    probe_basis = basis_of(run_ddp(dataclasses.replace(specs[sources[-1]], iters=2, warmup=1,
                                                       injection=plain), progress=progress))
    launches, history = [], {ws: [] for ws in targets}
    for k in range(repeats):
        for ws in targets:
            scale = specs[ws].injection.comm_scale  # a slower link known at N'
            history[ws] += [measure_target(preset, ws, probe_basis, progress, scale)
                            for _ in range(FIRST_TIMINGS if k == 0 else 1)]
        averaged = {ws: pooled(history[ws]) for ws in targets}
        if same_launch:
            launches.append(_same_launch(specs, averaged, history, injection, k, repeats,
                                         progress))
        else:
            launches.append(_separate_launches(specs, sources, averaged, history, k, repeats,
                                               score, progress))
    return {"preset": preset, "from": sources, "targets": targets, "launches": launches,
            "summary": summarize(launches, targets), "repeatability": repeatability(launches),
            "injection": injection.to_dict(), "same_launch": same_launch}


def _separate_launches(specs: dict, sources: list, averaged: dict, history: dict, k: int,
                       repeats: int, score: bool, progress) -> dict:
    """One launch of :func:`held_out` without ``same_launch``: the "from" sizes run in their
    own launches, the prediction of each target from the largest, and (``score``) the run at
    each target after it."""
    targets = list(averaged)
    runs = {}
    for ws in sources:
        progress(f"[launch {k + 1}/{repeats}, world size {ws}] DDP and its components")
        runs[ws] = run_ddp(specs[ws], progress=progress)
    basis, t1 = basis_of(runs[sources[-1]]), runs[sources[0]]["iter_s"]
    row = {"launch": k + 1, "measured_from": {ws: r["iter_s"] for ws, r in runs.items()},
           "t1_s": t1, "basis": basis, "targets": {},
           # the host's 1-minute load at the launch (others' processes share the cores)
           "load_average": os.getloadavg()[0],
           # this launch's own timings at N', before pooling (the prediction's are pooled)
           "timed": {ws: dataclasses.asdict(history[ws][-1]) for ws in targets},
           **_earlier_timings(history, k)}
    for ws in targets:
        pred = predict_one(basis, t1, averaged[ws], specs[ws].injection,
                           specs[sources[-1]].injection)
        if score:  # written before the run: nothing of the run reaches the prediction
            progress(f"[launch {k + 1}/{repeats}, world size {ws}] the held-out DDP run")
            run = run_ddp(specs[ws], progress=progress)
            pred["bucket_spans"] = run.get("bucket_spans")
            score_against(pred, run["iter_s"], predict_from(run["local_run"], specs[ws]))
            _explain_miss(pred, basis, averaged[ws], costs(run["local_run"]), run["iter_s"],
                          specs[sources[-1]].injection, specs[ws].injection)
        row["targets"][ws] = pred
    return row


def _earlier_timings(history: dict, k: int) -> dict:
    """The first launch's timings at N' before its latest (``timed`` holds the latest), kept in
    its row: the prediction pooled them too."""
    if k or FIRST_TIMINGS == 1:
        return {}
    return {"timed_earlier": {ws: [dataclasses.asdict(t) for t in h[:FIRST_TIMINGS - 1]]
                              for ws, h in history.items()}}


def _sizes(world_sizes, predict_from_sizes, same_launch: bool, score: bool):
    """(the "from" sizes, the target sizes above them), or ValueError naming the option."""
    sources = sorted(set(predict_from_sizes))
    targets = sorted(ws for ws in set(world_sizes) if ws > sources[-1])
    if not targets:
        raise ValueError(f"--predict: no world size above the largest 'from' size {sources[-1]}")
    if same_launch and (sources != [1] or not score):
        raise ValueError("--same-launch predicts from world size 1 (--predict-from 1) and scores "
                         f"the run it is made in (not with --predict); got from {sources}")
    return sources, targets


def _specs(preset, sources, targets, iters, warmup, injection, same_launch) -> dict:
    """Every size's spec (:func:`_paired`); with ``same_launch`` the targets' carry the solo
    steps. ValueError where the injection cannot be predicted held out."""
    images = images_per_rank(preset, sorted(set(sources) | set(targets)), "weak")
    specs = {ws: _paired(preset, ws, iters, warmup, injection, images[ws])
             for ws in sources + targets}
    if same_launch:  # the launches at N' carry the run at 1: validated as such
        specs.update({ws: dataclasses.replace(specs[ws], solo=True) for ws in targets})
    check_held_out(None if same_launch else specs[sources[-1]].injection,  # solo: clean
                   [specs[ws].injection for ws in targets])
    return specs


def _same_launch(specs: dict, averaged: dict, history: dict, injection: Injection, k: int,
                 repeats: int, progress) -> dict:
    """One launch per target size N' whose schedule interleaves, step by step, DDP over the
    N' ranks, the local steps (the paired oracle's components) and *solo* steps: one rank
    alone over its group of one while the other ranks idle at a barrier, the ranks taking
    turns, world size 1 in each rank's place inside the launch
    (:func:`swinkit.rank.step_switch.schedule`). N' is predicted from the solo steps (the
    basis at 1, each rank its own, and T(1)) and the timings at N' only, then scored
    against the DDP steps. On CPU the compute slowdown by the host's sharing is the model's
    own: beside each solo step the same rank runs its step with the others running the
    stand-in, not the model (``beside_slowdown``), taken in place of the stand-in's
    reading. Runs at 1 and N' in separate launches are a minute apart, and this host's
    speed wanders by more than 5 % over that (docs: 'Longer runs do not lower the floor');
    interleaved, both meet the same moments. The prediction is computed after the launch,
    from nothing of its steps at N'."""
    row = {"launch": k + 1, "measured_from": {}, "targets": {}, "same_launch": True,
           "load_average": os.getloadavg()[0],
           "timed": {ws: dataclasses.asdict(history[ws][-1]) for ws in averaged},
           **_earlier_timings(history, k)}
    for ws, target in averaged.items():
        progress(f"[launch {k + 1}/{repeats}, world size {ws}] DDP, its components and each "
                 "rank alone in turn, interleaved step by step")
        spec = specs[ws]  # with its solo steps
        run = run_ddp(spec, progress=progress)
        basis, t1 = basis_of(run, "solo_run"), run["solo_run"]["per_batch_s"]
        beside = run.get("beside_slowdown")  # on CPU: the model's own step beside the stand-in
        if beside:
            target = dataclasses.replace(target, model_slowdown=beside["ratio"])
        pred = predict_one(basis, t1, target, injection.for_world_size(ws))
        pred["beside_slowdown"] = beside
        pred["bucket_spans"] = run.get("bucket_spans")  # the run's all-reduces, as it had them
        score_against(pred, run["iter_s"], predict_from(run["local_run"], spec))
        _explain_miss(pred, basis, target, costs(run["local_run"]), run["iter_s"], None,
                      spec.injection)
        row["targets"][ws] = pred
        # the row's T(1) and basis: the first target's launch (each prediction has its own)
        row["measured_from"].setdefault(1, t1)
        row.setdefault("basis", basis)
        row.setdefault("t1_s", t1)
    return row


def _explain_miss(pred: dict, basis: dict, target: Target, paired: dict | None,
                  measured_s: float, *injections) -> None:
    """Add to a scored ``pred`` where it missed, input by input (:func:`split_miss`): the run
    at N''s own components (``paired``: its local steps' costs) swapped in for the predicted
    ones, against its iteration ``measured_s``. Not with an injection in either run: one
    known at N' is no input of the run's own to swap. A split that cannot be made, for
    whatever reason, is recorded as such: it is a side record, and the launches already
    scored (or the asv suite's held-out result) are not lost to it."""
    if any(i is not None and i.active for i in injections):
        return
    try:
        pred["miss_split"] = split_miss(basis["costs"], target, Host(**basis["host"]), paired,
                                        measured_s)
    except Exception as exc:  # a side record: whatever stops it is noted, not raised
        pred["miss_split"] = {"error": f"{type(exc).__name__}: {exc}"}


def held_out_from_sweep(sweep, preset: str, source: int = 1, target: int = 2,
                        progress=print) -> dict:
    """World size ``target`` predicted from a weak, paired sweep's run at ``source`` (the
    basis its launch kept) and the timings at ``target`` made now without the model, then
    scored against the sweep's own run at ``target``. That run was made before, but nothing of
    it reaches the prediction: its median iteration is read to score it, and after that its
    components (the basis it kept) to split the miss (:func:`_explain_miss`). The shape of
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
    # pooled as a held-out sweep's first launch pools its timings (FIRST_TIMINGS)
    timings = [measure_target(preset, target, basis, progress) for _ in range(FIRST_TIMINGS)]
    timed = pooled(timings)
    pred = predict_one(basis, t1, timed)
    scored = sweep.get(target)  # read from here on only: the prediction is made
    pred["bucket_spans"] = scored.get("bucket_spans")
    score_against(pred, scored["iter_s"], scored.get("prediction"))
    if scored.get("basis"):  # the run at N''s components, kept by the sweep
        _explain_miss(pred, basis, timed, scored["basis"].get("costs"), scored["iter_s"])
    row = {"launch": 1, "measured_from": {source: t1}, "t1_s": t1, "basis": basis,
           "targets": {target: pred}, "load_average": os.getloadavg()[0],
           "timed": {target: dataclasses.asdict(timings[-1])},
           **_earlier_timings({target: timings}, 0)}
    return {"preset": preset, "from": [source], "targets": [target], "launches": [row],
            "summary": summarize([row], [target]), "repeatability": {}}


def _paired(preset, ws, iters, warmup, injection, images):
    """The spec ``--run`` launches (paired, weak scaling): measured alike at every size."""
    lc = LaunchConfig(world_size=ws, allow_oversubscribe=oversubscribe_allowed())
    return DDPRunSpec(preset=preset, world_size=ws, iters=iters, warmup=warmup, launch=lc,
                      injection=injection.for_world_size(ws),
                      overrides={"images_per_rank": images}, paired=True)
