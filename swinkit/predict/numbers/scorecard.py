"""A held-out prediction's scorecard as numbers (``swinkit scorecard``; no torch, no launching):
per target size, every predictor's accuracy in each of K fresh launches, its worst launch and
its range, against the paired run's DDP steps and against the same configuration run
unpaired; the gap the paired launch's barrier makes; and the host's own launch-to-launch
spread, the floor below which a score says nothing. The launches come from
:func:`swinkit.predict.supervisor.held_out.held_out` (separate launches, ``unpaired``).
"""
from __future__ import annotations

import statistics

from swinkit.predict.numbers.scores import is_in_launch, summarize
from swinkit.attribution.oracle import accuracy

# the predictors a scorecard shows, in its order; "paired" is the oracle, not held out
SHOWN = ("model", "perfect", "plus_allreduce", "paired")


def scorecard(result: dict) -> dict:
    """``{target: {"paired_run": stats, "unpaired_run": stats, "barrier_gap": ...}, "host": ...}``
    from a held-out result; ``stats`` per predictor: ``per_launch_pct``, ``worst_pct``,
    ``best_pct``, ``range_pts`` and ``mean_pct`` over the launches. ValueError for an
    in-launch result: its figures are not held out and make no scorecard."""
    if is_in_launch(result):
        raise ValueError("an in-launch prediction is not held out: a scorecard scores separate "
                         "launches only")
    launches, targets = result["launches"], result["targets"]
    out = {"targets": {}, "host": host_spread(launches),
           "launches": len(launches),
           "load_average": [row.get("load_average") for row in launches]}
    for ws in targets:
        against = {"paired_run": summarize(launches, [ws]).get(ws, {}),
                   "unpaired_run": summarize(launches, [ws], "accuracy_unpaired").get(ws, {})}
        out["targets"][str(ws)] = {
            **{ref: {name: _stats(by[name]["per_launch_pct"]) for name in SHOWN if name in by}
               for ref, by in against.items()},
            "barrier_gap": barrier_gap([row["targets"][ws] for row in launches
                                        if "barrier_gap_s" in row["targets"].get(ws, {})])}
    return out


def _stats(pcts: list[float]) -> dict:
    """One predictor's launches: each, the worst, the best, their range and mean.

    >>> _stats([97.0, 81.5, 94.0])["range_pts"], _stats([97.0, 81.5, 94.0])["worst_pct"]
    (15.5, 81.5)
    """
    return {"per_launch_pct": pcts, "worst_pct": min(pcts), "best_pct": max(pcts),
            "range_pts": max(pcts) - min(pcts), "mean_pct": statistics.fmean(pcts)}


def barrier_gap(preds: list[dict]) -> dict | None:
    """The unpaired run's iteration less the paired run's DDP steps', per launch (seconds and
    as a share of the paired figure), and the mean share: what the barrier before each
    paired step hides from the iteration the oracle is scored on."""
    if not preds:
        return None
    gaps = [p["barrier_gap_s"] for p in preds]
    shares = [p["barrier_gap_s"] / p["measured_iter_s"] for p in preds]
    return {"per_launch_s": gaps, "per_launch_share": shares,
            "mean_share": statistics.fmean(shares)}


def host_spread(launches: list[dict]) -> dict:
    """Per world size (the unpaired runs as ``"N unpaired"``), each launch's measured
    iteration as a prediction of the next launch's: nothing but time changed between them,
    so a predictor's score inside this spread cannot be told from the host's noise. Worst
    and range beside each; empty with fewer than two launches.

    >>> spread = host_spread([{"measured_from": {1: 1.0}, "targets": {}},
    ...                       {"measured_from": {1: 1.25}, "targets": {}}])
    >>> spread["1"]["per_pair_pct"]
    [80.0]
    """
    series: dict[str, list[float]] = {}
    for row in launches:
        for ws, t in row["measured_from"].items():
            series.setdefault(str(ws), []).append(t)
        for ws, pred in row["targets"].items():
            for key, name in (("measured_iter_s", str(ws)),
                              ("unpaired_iter_s", f"{ws} unpaired")):
                if key in pred:
                    series.setdefault(name, []).append(pred[key])
    out = {}
    for name, times in series.items():
        if len(times) == len(launches) > 1:
            pcts = [accuracy(a, b)["accuracy_pct"] for a, b in zip(times, times[1:])]
            out[name] = {**_stats(pcts), "per_pair_pct": pcts}
    return out
