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

Every rank is read, the ranks that wait too (:func:`injected_anywhere`): a one-rank injection
leaves the others' own phases alone and makes them wait, and how blame charges those waits
shows in their rows only.
"""
from __future__ import annotations

import statistics

from swinkit.measure.phases import BLAME_KEYS

# the median of n draws scatters about 1.2533 (sqrt(pi / 2)) times as much as their mean
MEDIAN_SPREAD = 1.2533
# MAD x 1.4826 estimates a normal spread robustly (a hiccup or two among the clean iterations)
MAD_TO_SIGMA = 1.4826


def injection_effect(iterations: dict[int, list[float]], blame: dict[int, list[dict]],
                     injected: dict[int, list[bool]]) -> dict | None:
    """Added seconds per injected iteration: iteration and each blame key.

    Args:
        iterations: per rank, measured iteration times (seconds).
        blame: per rank, the blame row of each measured iteration (BLAME_KEYS -> seconds).
        injected: per rank, whether each measured iteration is read as injected.

    Returns ``{"pairs", "added_iter_s", "growth_s": {key: s}, "per_rank", "noise_s"}``:
    ``pairs`` is the fewest (injected, clean neighbour) differences on any rank; the figures
    are medians over ranks of per-rank medians of those differences; ``per_rank`` holds each
    rank's own (rank as a string); ``noise_s`` is :func:`detection_threshold` per figure,
    the ranks' median. None when no injected iteration has a clean neighbour.

    >>> out = injection_effect({0: [1.0, 2.0, 1.2]}, {0: [{"forward": 1.0}, {"forward": 2.0},
    ...                     {"forward": 1.2}]}, {0: [False, True, False]})
    >>> out["pairs"], round(out["added_iter_s"], 6), round(out["growth_s"]["forward"], 6)
    (2, 0.9, 0.9)
    """
    per_rank = {}
    for rank, flags in injected.items():
        rows = [{"iteration": t, **b} for t, b in zip(iterations[rank], blame[rank])]
        diffs = [_minus(rows[i], rows[j]) for i, hit in enumerate(flags) if hit
                 for j in (i - 1, i + 1) if 0 <= j < len(rows) and not flags[j]]
        if diffs:
            per_rank[rank] = {k: statistics.median(d[k] for d in diffs) for k in diffs[0]}
            per_rank[rank]["pairs"] = len(diffs)
            per_rank[rank]["noise"] = detection_threshold(rows, flags)
    if not per_rank:
        return None

    def med(key):
        return statistics.median(v[key] for v in per_rank.values())
    noise = [v["noise"] for v in per_rank.values() if v["noise"]]
    return {"pairs": min(v["pairs"] for v in per_rank.values()),
            "added_iter_s": med("iteration"),
            "growth_s": {k: med(k) for k in BLAME_KEYS},
            "per_rank": {str(r): {"added_iter_s": v["iteration"],
                                  "growth_s": {k: v[k] for k in BLAME_KEYS}}
                         for r, v in per_rank.items()},
            "noise_s": ({k: statistics.median(n[k] for n in noise) for k in noise[0]}
                        if noise else None)}


def _minus(a: dict, b: dict) -> dict:
    return {k: a.get(k, 0.0) - b.get(k, 0.0) for k in ("iteration",) + BLAME_KEYS}


def detection_threshold(rows: list[dict], flags: list[bool]) -> dict | None:
    """Per figure (the iteration and each blame key), the smallest added time this rank's
    estimate tells from nothing: twice the spread of a median of as many differences as
    there are injected iterations, each difference drawn as two clean iterations two apart
    differ (robust spread: MAD x 1.4826). Differences that share an iteration are not
    independent, so the injected iterations count, not the pairs. None with fewer than three
    such clean pairs.

    Clean iterations 1.0, 1.1, 1.0, 1.3, 1.2 s differ by 0.1, -0.1, 0.3, -0.1: median 0, MAD
    0.1, spread 0.148; 5 injected iterations: 2 x 1.2533 x 0.148 / sqrt(5) = 0.166 s.

    >>> rows = [{"iteration": t} for t in (1.0, 9, 1.1, 9, 1.0, 9, 1.3, 9, 1.2, 9)]
    >>> round(detection_threshold(rows, [False, True] * 5)["iteration"], 3)
    0.166
    """
    clean = {i for i, hit in enumerate(flags) if not hit}
    pairs = [(i, i + 2) for i in sorted(clean) if i + 2 in clean]
    n = sum(flags)
    if len(pairs) < 3 or not n:
        return None
    out = {}
    for key in ("iteration",) + BLAME_KEYS:
        d = [rows[b].get(key, 0.0) - rows[a].get(key, 0.0) for a, b in pairs]
        centre = statistics.median(d)
        sigma = MAD_TO_SIGMA * statistics.median(abs(x - centre) for x in d)
        out[key] = 2 * MEDIAN_SPREAD * sigma / n ** 0.5
    return out


def injected_anywhere(injected: dict[int, list[bool]], lag: int = 0) -> dict[int, list[bool]]:
    """Per rank, the iterations to read as injected: a rank with an injection of its own, its
    own; a rank without, those in which it waits for one: the injected ranks' iterations, or
    ``lag`` iterations later (1 for a delay after an iteration's last collective, the
    optimizer step: the others wait for it at the next iteration's first collective). The
    waiting ranks' rows are where blame's charging of a wait shows: the injected rank's own
    row holds its own slower phase, whatever blame does with the others' waits.

    >>> injected_anywhere({0: [False, False, False], 1: [True, False, False]})
    {0: [True, False, False], 1: [True, False, False]}
    >>> injected_anywhere({0: [False, False, False], 1: [True, False, False]}, lag=1)[0]
    [False, True, False]
    """
    length = len(next(iter(injected.values()), []))
    hit = [any(flags[i - lag] for flags in injected.values()) if i >= lag else False
           for i in range(length)]
    return {rank: list(flags) if any(flags) else list(hit) for rank, flags in injected.items()}
