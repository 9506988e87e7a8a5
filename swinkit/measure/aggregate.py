"""Across-rank aggregation of per-iteration phase samples (numbers only, no rendering).

Each phase: the median over iterations per rank, then the median of those across ranks (and,
because medians do not add up, the mean of per-rank means beside it, which does); skew is
the spread of the per-rank medians (max - min). Who made whom wait is blame's business
(swinkit.attribution.blame): a rank late from waiting on its loader is not busy, but it is late.
"""
from __future__ import annotations

import statistics
from typing import Sequence

from swinkit.measure.stats import summarize


def aggregate_phases(ranks: Sequence[dict], phases: Sequence[str]) -> dict:
    """ranks: per-rank dicts with ``phases`` {name: [s per iteration]} and ``iteration`` [s]."""
    per_rank = {r["rank"]: {p: summarize(r["phases"][p]) for p in phases} for r in ranks}
    iteration = {r["rank"]: summarize(r["iteration"]) for r in ranks}
    agg = {p: statistics.median(per_rank[k][p].median for k in per_rank) for p in phases}
    iter_s = statistics.median(m.median for m in iteration.values())
    skew = {p: max(per_rank[k][p].median for k in per_rank) - min(per_rank[k][p].median
                                                                   for k in per_rank)
            for p in phases}
    # Means add up (sum of phase means = mean iteration, exactly), so they are what the loss
    # split uses; medians and IQRs stay the robust summary and the spread.
    mean_phases = {p: statistics.fmean(statistics.fmean(r["phases"][p]) for r in ranks)
                   for p in phases}
    mean_iter = statistics.fmean(statistics.fmean(r["iteration"]) for r in ranks)
    return {
        "phases_s": agg,
        "phase_shares": {p: agg[p] / iter_s if iter_s else None for p in phases},
        "iter_s": iter_s,
        "phase_sum_s": sum(agg.values()),
        "phases_mean_s": mean_phases,
        "iter_mean_s": mean_iter,
        "iteration_stats": {str(k): m.to_dict() for k, m in iteration.items()},
        "per_rank_phases_s": {str(k): {p: m.median for p, m in v.items()} for k, v in per_rank.items()},
        "per_rank_phase_stats": {str(k): {p: m.to_dict() for p, m in v.items()}
                                 for k, v in per_rank.items()},
        "skew_s": skew,
    }


def cross_check(ranks: Sequence[dict]) -> dict:
    """Our backward split vs DDP's reducer timers, over iterations where both exist.

    Disagreement = |ours - DDP's| / ours of the medians, for backward compute, exposed
    communication and their sum (the whole ``loss.backward()``).
    """
    ours = {"backward": [], "exposed_comm": [], "backward_total": [], "forward": []}
    theirs = {k: [] for k in ours}
    for r in ranks:
        for i, ddp in enumerate(r.get("ddp_timers") or []):
            if not ddp:
                continue
            b, e = r["phases"]["backward"][i], r["phases"]["exposed_comm"][i]
            for key, mine, other in (("backward", b, ddp["backward"]),
                                     ("exposed_comm", e, ddp["exposed_comm"]),
                                     ("backward_total", b + e, ddp["backward"] + ddp["exposed_comm"]),
                                     ("forward", r["phases"]["forward"][i], ddp["forward"])):
                ours[key].append(mine)
                theirs[key].append(other)
    out = {}
    for key in ours:
        if not ours[key]:
            out[key] = None
            continue
        mine, other = statistics.median(ours[key]), statistics.median(theirs[key])
        out[key] = {"ours_s": mine, "ddp_s": other, "n": len(ours[key]),
                    "disagreement": abs(mine - other) / mine if mine else None}
    return out
