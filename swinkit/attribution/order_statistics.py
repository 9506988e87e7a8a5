"""Order statistics of an empirical distribution (torch-free): how long the slowest of n
ranks takes when each rank's time is an independent draw from measured samples."""
from __future__ import annotations

import bisect
import math

from swinkit.measure.stats import quantile


def median_max(values: list[float], n: int) -> float:
    """The median of the maximum of ``n`` independent draws from ``values``' empirical
    distribution: its 0.5^(1/n) quantile (P(max <= x) = F(x)^n; :func:`quantile`)."""
    return quantile(values, 0.5 ** (1 / n))


def expected_max(values: list[float], n: int) -> float:
    """E[max of ``n`` independent draws] from ``values`` (each equally likely): the i-th
    smallest of m is the maximum with probability (i/m)^n - ((i-1)/m)^n.

    >>> expected_max([1.0, 2.0], 2)  # max is 2 unless both draws are 1 (probability 1/4)
    1.75
    """
    xs, m = sorted(values), len(values)
    return sum(x * ((i / m) ** n - ((i - 1) / m) ** n) for i, x in enumerate(xs, 1))


def _cdf(xs: list[float], x: float) -> float:
    """P(draw <= x) for the sorted values ``xs`` as :func:`quantile` interpolates them (the
    inverse of that quantile function between the sorted values)."""
    if x < xs[0]:
        return 0.0
    if x >= xs[-1]:
        return 1.0
    nxt = bisect.bisect_right(xs, x)  # xs[nxt - 1] <= x < xs[nxt]
    within = (x - xs[nxt - 1]) / (xs[nxt] - xs[nxt - 1])
    return (nxt - 1 + within) / (len(xs) - 1)


def median_max_each(per_rank: list[list[float]], iterations: int = 60) -> float:
    """The median of the maximum of one draw from each rank's own samples (independent):
    the x where the product of the ranks' distributions, P(max <= x), reaches 0.5 (bisection).
    With every rank's samples alike it is :func:`median_max` of them; where one rank is
    slower throughout, it is that rank's median (the others never set the maximum).

    >>> four = [1.0, 2.0, 3.0, 4.0]
    >>> round(median_max_each([four, four]), 6) == round(median_max(four, 2), 6)
    True
    >>> round(median_max_each([[0.9, 1.0, 1.1], [1.3, 1.4, 1.5]]), 6)
    1.4
    """
    if len(per_rank) == 1:
        return quantile(per_rank[0], 0.5)
    ranks = [sorted(v) for v in per_rank]  # once: the bisection reads them many times
    lo, hi = min(xs[0] for xs in ranks), max(xs[-1] for xs in ranks)
    if lo == hi:
        return lo
    for _ in range(iterations):
        mid = (lo + hi) / 2
        below = math.prod(_cdf(xs, mid) for xs in ranks)
        lo, hi = (mid, hi) if below < 0.5 else (lo, mid)
    return hi
