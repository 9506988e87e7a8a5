"""Order statistics of an empirical distribution (torch-free): how long the slowest of n
ranks takes when each rank's time is an independent draw from measured samples."""
from __future__ import annotations

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
