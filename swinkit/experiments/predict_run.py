"""Predict world sizes that were not run (``tools/attribute.py --predict``), and score the
prediction against the run when it is made afterwards (held out).

Per launch: at each target size N', what is cheap to measure without the model, in one launch
of N' ranks: the loader's supply with N' loaders at once, then the model's bucket all-reduces
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
import statistics

from swinkit.attribution.extrapolate import Host, Target, naive, predict_at
from swinkit.attribution.links import Link, fit_link_or_bandwidth, ring_target
from swinkit.attribution.oracle import accuracy
from swinkit.data.loader import ensure_data
from swinkit.injection import Injection
from swinkit.launch import LaunchConfig, launch
from swinkit.runs.component_costs import basis_of, predict_from
from swinkit.runs.ddp_run import DDPRunSpec, run_ddp
from swinkit.runs.ddp_sweep import images_per_rank
from swinkit.runs.sweep import oversubscribe_allowed


def measure_target(preset: str, world_size: int, basis: dict, progress=print) -> Target:
    """The target-size measurements for a prediction from ``basis`` (:func:`basis_of`)."""
    probe = basis["probe"]
    progress(f"[world size {world_size}] without the model: loader supply with {world_size} "
             "loaders at once, the buckets' all-reduces and the buffer broadcast")
    # over the backend the basis ran on, which decides the device (a basis kept before it
    # was recorded: the one a run here would take)
    lc = LaunchConfig(world_size=world_size, backend=probe.get("backend", "auto"),
                      allow_oversubscribe=oversubscribe_allowed())
    ranks = launch("swinkit.experiments.target_probes:target_rank",
                   dict(preset=preset, workers=basis["host"]["loader_workers"],
                        elements=probe["elements"], dtype=probe["dtype"],
                        buffer_shapes=probe["buffer_shapes"]), lc, quiet=True).result["ranks"]
    readings = ranks[0].get("compute_slowdowns") or []
    notes = ([f"the stand-in's compute slowdown read {len(readings)} times over the timing "
              f"launch at N': " + ", ".join(f"x{x:.3f}" for x in readings) + "; the median taken"]
             if len(readings) > 1 else [])
    return Target(world_size, ranks[0]["bucket_comm_s"], ranks[0]["broadcast_s"],
                  statistics.median(r["images_per_s"] for r in ranks),
                  sync_wait_s=ranks[0].get("sync_wait_s"),
                  contention=_median_rates(ranks),
                  compute_slowdown=ranks[0].get("compute_slowdown"), notes=notes)


def pooled(history: list[Target]) -> Target:
    """The latest timings at N' with the readings of the host's sharing (the stand-in's
    compute slowdown and the lockstep wait) averaged over every launch's so far. Each reading
    scatters from one moment to the next by as much as the effect it reads (the stand-in by
    a few per cent around x1.03 on a 2-core host), and the run it predicts comes at yet
    another moment: the mean of several moments guesses it better than the latest alone.
    The network timings stay the latest's."""
    latest = history[-1]
    if len(history) == 1:
        return latest

    def timed(name):
        return [getattr(t, name) for t in history if getattr(t, name) is not None]

    def mean(name):
        return statistics.fmean(timed(name)) if timed(name) else None

    slowdowns = ", ".join(f"x{x:.3f}" for x in timed("compute_slowdown"))
    note = (f"the host's sharing at N', averaged over the launches so far: the stand-in's "
            f"slowdown over {len(timed('compute_slowdown'))} ({slowdowns or 'none timed'}), "
            f"the lockstep wait over {len(timed('sync_wait_s'))}")
    return dataclasses.replace(latest, compute_slowdown=mean("compute_slowdown"),
                               sync_wait_s=mean("sync_wait_s"), notes=latest.notes + [note])


def _median_rates(ranks: list[dict]) -> dict:
    """The ranks' median of each proxy rate (as the component run's rates are combined)."""
    import statistics as st
    names = {k for r in ranks for k in r.get("contention") or {}}
    return {k: st.median(r["contention"][k] for r in ranks if k in (r.get("contention") or {}))
            for k in names}


def predict_one(basis: dict, t1_s: float, target: Target,
                injection: Injection | None = None) -> dict:
    """The prediction at ``target`` from ``basis`` (:func:`~swinkit.runs.component_costs.basis_of`
    the largest "from" run) with the baselines and the model with its network term dropped
    beside it. ``injection``: what the run at the target is known to add (a straggler there),
    taken into the model's replay; the naive predictions know nothing of it."""
    c, host = basis["costs"], Host(**basis["host"])
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
            f"known at N': the injection {injection.describe()}, its cost per iteration the "
            "amount asked (spread over 'every' iterations as a mean); data_ms only where the "
            "rank loads itself (no loader workers)")
    return pred


def injected_costs(injection: Injection | None, world_size: int, host: Host):
    """Per rank at ``world_size``: the seconds per phase and iteration ``injection`` adds
    (``predict_at``'s ``injected``), and the late start of its all-reduces (``comm_ms``)."""
    if injection is None or not injection.active:
        return None, None
    per_it = 1e-3 / injection.every
    extra = {"forward": injection.compute_ms * per_it, "backward": injection.backward_ms * per_it,
             "optimizer": injection.optimizer_ms * per_it}
    if host.loader_workers == 0:  # each sample of the rank's batch, on the rank's own time
        extra["data_wait"] = injection.data_ms * host.images_per_rank * per_it
    extra = {k: v for k, v in extra.items() if v}
    ranks = [r for r in range(world_size) if injection.applies_to(r)]
    delay = {r: injection.comm_ms * per_it for r in ranks} if injection.comm_ms else None
    return ({r: extra for r in ranks} if extra else None), delay


def from_stored(stored: dict, world_sizes, link: Link | None = None, nodes=(),
                inter: Link | None = None) -> dict:
    """Predictions from a stored ``--predict`` JSON at sizes it did not measure: from its
    bases, with the ring model's communication (``link``: stated, or fitted to the bucket
    timings it stored at its targets; ``nodes``: that many nodes of the basis's size each,
    over the ``inter`` link)."""
    launches = []
    for row in stored["launches"]:
        basis = row["basis"]
        intra = link or _fitted(row, basis)
        g = basis["costs"]["world_size"]
        targets = {str(ws): ring_target(basis["bucket_bytes"], ws, 1, intra) for ws in world_sizes}
        targets.update({f"{k}x{g}": ring_target(basis["bucket_bytes"], g, k, intra, inter)
                        for k in nodes})  # k nodes of g ranks
        t1 = row["t1_s"]
        launches.append({"launch": row["launch"], "t1_s": t1,
                         "targets": {key: predict_one(basis, t1, t) for key, t in targets.items()}})
    sizes = list(launches[0]["targets"]) if launches else []
    return {"preset": stored["preset"], "from": stored["from"], "targets": sizes,
            "launches": launches, "summary": {}, "stored": True}


def _fitted(row: dict, basis: dict) -> Link:
    """The link fitted to the bucket all-reduces a stored prediction timed at its targets."""
    points = [(b, int(ws), t) for ws, p in row["targets"].items()
              if p.get("comm_source") == "timed at N'"
              for b, t in zip(basis["bucket_bytes"], p["bucket_comm_s"])]
    try:
        return fit_link_or_bandwidth(points)[0]
    except ValueError as exc:
        raise ValueError(f"--predict from stored results: {exc}; state the link with "
                         "--link GBPS,LATENCY_US") from None


def held_out(preset: str, world_sizes, predict_from_sizes, iters: int = 10, warmup: int = 3,
             repeats: int = 3, score: bool = True, injection=None, progress=print) -> dict:
    """Per launch: time each target size N' without the model, run the ``predict_from_sizes``,
    predict every larger size of ``world_sizes`` from them, then (``score``) run it and score
    the prediction. The timings at N' come first so that the run predicted from is the one
    just before the run at N': on a shared host the speed drifts over minutes, and a basis
    measured closer in time carries less of that drift into the score. They need the buckets'
    sizes, which one short run at the largest "from" size gives before the first launch.
    The readings of the host's sharing at N' are averaged over the launches so far
    (:func:`pooled`): still all made before the run they predict.
    Returns ``{"launches": [...], "summary": {size: ...}}``."""
    sources = sorted(set(predict_from_sizes))
    targets = sorted(ws for ws in set(world_sizes) if ws > sources[-1])
    if not targets:
        raise ValueError(f"--predict: no world size above the largest 'from' size {sources[-1]}")
    injection = injection or Injection()
    images = images_per_rank(preset, sorted(set(sources) | set(targets)), "weak")
    specs = {ws: _paired(preset, ws, iters, warmup, injection, images[ws])
             for ws in sources + targets}
    # every run's input refused (and the synthetic set written) before anything is launched
    # or announced: a bad --data-root or --inject fails in a second, not after minutes
    configs = [spec.validate()[0] for spec in specs.values()]
    ensure_data(configs[0], progress=progress)  # one data root for every size
    progress(f"[world size {sources[-1]}] a short run for the buckets' sizes the timings at "
             f"N' need")
    probe_basis = basis_of(run_ddp(dataclasses.replace(specs[sources[-1]], iters=2, warmup=1),
                                   progress=progress))
    launches, history = [], {ws: [] for ws in targets}
    for k in range(repeats):
        for ws in targets:
            history[ws].append(measure_target(preset, ws, probe_basis, progress))
        averaged = {ws: pooled(history[ws]) for ws in targets}
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
               "timed": {ws: dataclasses.asdict(history[ws][-1]) for ws in targets}}
        for ws in targets:
            pred = predict_one(basis, t1, averaged[ws], injection.for_world_size(ws))
            if score:  # written before the run: nothing of the run reaches the prediction
                progress(f"[launch {k + 1}/{repeats}, world size {ws}] the held-out DDP run")
                run = run_ddp(specs[ws], progress=progress)
                score_against(pred, run["iter_s"], predict_from(run["local_run"], specs[ws]))
            row["targets"][ws] = pred
        launches.append(row)
    return {"preset": preset, "from": sources, "targets": targets, "launches": launches,
            "summary": summarize(launches, targets), "repeatability": repeatability(launches),
            "injection": injection.to_dict()}


def score_against(pred: dict, measured_iter_s: float, paired: dict | None) -> None:
    """Add to ``pred`` the held-out run's iteration, each predictor's accuracy against it, and
    the paired oracle of that run (not held out: it shows which term the model missed)."""
    pred["measured_iter_s"] = measured_iter_s
    pred["measured_efficiency"] = pred["t1_s"] / measured_iter_s
    names = [("predicted_iter_s", "model"), ("perfect_scaling_s", "perfect"),
             ("plus_allreduce_s", "plus_allreduce"), ("no_network_s", "no_network")]
    if paired:
        pred["paired_oracle_s"] = paired["predicted_iter_s"]
        pred["paired_components_s"] = paired["components_s"]  # what the model missed
        names.append(("paired_oracle_s", "paired"))
    pred["accuracy"] = {name: accuracy(pred[key], measured_iter_s) for key, name in names}


def held_out_from_sweep(sweep, preset: str, source: int = 1, target: int = 2,
                        progress=print) -> dict:
    """World size ``target`` predicted from a weak, paired sweep's run at ``source`` (the
    basis its launch kept) and the timings at ``target`` made now without the model, then
    scored against the sweep's own run at ``target``. That run was made before, but nothing of
    it reaches the prediction: only its median iteration is read, to score. The shape of
    :func:`held_out`'s result, one launch (bench_ddp's cache, which bench_predict reads)."""
    first = sweep.get(source)
    basis = first.get("basis")
    if basis is None:
        raise ValueError(f"the run at world size {source} kept no basis for a prediction "
                         "(paired launches keep one)")
    t1 = first["iter_s"]
    pred = predict_one(basis, t1, measure_target(preset, target, basis, progress))
    score_against(pred, sweep.get(target)["iter_s"], sweep.get(target).get("prediction"))
    row = {"launch": 1, "measured_from": {source: t1}, "t1_s": t1, "basis": basis,
           "targets": {target: pred}, "load_average": os.getloadavg()[0]}
    return {"preset": preset, "from": [source], "targets": [target], "launches": [row],
            "summary": summarize([row], [target]), "repeatability": {}}


def _paired(preset, ws, iters, warmup, injection, images):
    """The spec ``--run`` launches (paired, weak scaling): measured alike at every size."""
    lc = LaunchConfig(world_size=ws, allow_oversubscribe=oversubscribe_allowed())
    return DDPRunSpec(preset=preset, world_size=ws, iters=iters, warmup=warmup, launch=lc,
                      injection=injection.for_world_size(ws),
                      overrides={"images_per_rank": images}, paired=True)


def summarize(launches: list[dict], targets: list[int]) -> dict:
    """Per target size: each launch's accuracy per predictor, and the worst launch's."""
    out = {}
    for ws in targets:
        rows = [row["targets"][ws] for row in launches if "accuracy" in row["targets"].get(ws, {})]
        if not rows:
            continue
        names = rows[0]["accuracy"]
        out[ws] = {name: {"per_launch_pct": [r["accuracy"][name]["accuracy_pct"] for r in rows],
                          "worst_pct": min(r["accuracy"][name]["accuracy_pct"] for r in rows)}
                   for name in names}
    return out


def repeatability(launches: list[dict]) -> dict:
    """The host's run-to-run spread: per world size measured in every launch, each launch's
    iteration taken as a prediction of the next launch's at the same size (Kahira et al.'s
    accuracy, as the predictors are scored). Nothing changed between those runs but time: a
    predictor's score inside this spread cannot be told from the host's noise. (No strict
    floor: a held-out pair is closer in time than two launches.) Empty with fewer than two
    launches."""
    series: dict[str, list[float]] = {}
    for row in launches:
        for ws, t in row["measured_from"].items():
            series.setdefault(str(ws), []).append(t)
        for ws, pred in row["targets"].items():
            if "measured_iter_s" in pred:
                series.setdefault(str(ws), []).append(pred["measured_iter_s"])
    out = {}
    for ws, times in series.items():
        if len(times) == len(launches) > 1:
            pcts = [accuracy(a, b)["accuracy_pct"] for a, b in zip(times, times[1:])]
            out[ws] = {"per_pair_pct": pcts, "worst_pct": min(pcts)}
    return out
