"""The cost of an injection read from neighbouring iterations of one run.

With ``--inject ...,every=2`` a run alternates injected and clean iterations. Each injected
iteration is compared with each of its clean neighbours (the one before and the one after,
where they exist), per rank; the median of those differences is the added cost. A slow drift
of a busy machine moves neighbours alike and cancels, which a comparison of two separate
launches cannot do (launch-to-launch noise here is several percent).

Each neighbour is a difference of its own rather than half of a mean of two. A clean
iteration slowed by a hiccup (a page fault storm, a burst of another process) spoils the
differences it takes part in either way, two of them; but averaged into both neighbours'
baselines those were two of only five (10 iterations, every=2), and two such hiccups spoiled
four of five: a full CI run measured +39 ms for a 120 ms injection so, while every phase's own
median was right. As differences of their own they are two of nine: the median survives two
hiccups among the clean iterations (not three).
"""
from __future__ import annotations

import statistics

from swinkit.measure.phases import BLAME_KEYS


def injection_effect(iterations: dict[int, list[float]], blame: dict[int, list[dict]],
                  injected: dict[int, list[bool]]) -> dict | None:
    """Added seconds per injected iteration: iteration and each blame key.

    Args:
        iterations: per rank, measured iteration times (seconds).
        blame: per rank, the blame row of each measured iteration (BLAME_KEYS -> seconds).
        injected: per rank, whether each measured iteration was injected.

    Returns ``{"pairs", "added_iter_s", "growth_s": {key: s}}``: ``pairs`` is the fewest
    (injected, clean neighbour) differences on any rank; the figures are medians over ranks of
    per-rank medians of those differences. None when no injected iteration has a clean
    neighbour.

    >>> out = injection_effect({0: [1.0, 2.0, 1.2]}, {0: [{"forward": 1.0}, {"forward": 2.0},
    ...                     {"forward": 1.2}]}, {0: [False, True, False]})
    >>> out["pairs"], round(out["added_iter_s"], 6), round(out["growth_s"]["forward"], 6)
    (2, 0.9, 0.9)
    """
    per_rank = {}
    for rank, flags in injected.items():
        rows = [{"iteration": t, **b} for t, b in zip(iterations[rank], blame[rank])]
        diffs = [{k: rows[i].get(k, 0.0) - rows[j].get(k, 0.0) for k in ("iteration",) + BLAME_KEYS}
                 for i, hit in enumerate(flags) if hit
                 for j in (i - 1, i + 1) if 0 <= j < len(rows) and not flags[j]]
        if diffs:
            per_rank[rank] = {k: statistics.median(d[k] for d in diffs) for k in diffs[0]}
            per_rank[rank]["pairs"] = len(diffs)
    if not per_rank:
        return None
    med = lambda key: statistics.median(v[key] for v in per_rank.values())  # noqa: E731
    return {"pairs": min(v["pairs"] for v in per_rank.values()),
            "added_iter_s": med("iteration"),
            "growth_s": {k: med(k) for k in BLAME_KEYS}}
