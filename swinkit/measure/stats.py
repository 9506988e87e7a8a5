"""Summary statistics of repeated measurements, with the spread that makes them trustworthy."""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Sequence

UNSTABLE_IQR_RATIO = 0.10   # RELIABILITY.md row 13: IQR/median above 10 % is flagged
MIN_SAMPLES = 7             # asv compare's significance test needs >= 7 per side


@dataclass(frozen=True)
class Measurement:
    median: float
    iqr: float
    mean: float
    min: float
    max: float
    n: int

    @property
    def iqr_ratio(self) -> float:
        return self.iqr / self.median if self.median else math.nan

    @property
    def unstable(self) -> bool:
        return self.iqr_ratio > UNSTABLE_IQR_RATIO

    @property
    def too_few(self) -> bool:
        return self.n < MIN_SAMPLES

    def to_dict(self) -> dict:
        return dict(asdict(self), iqr_ratio=self.iqr_ratio, unstable=self.unstable,
                    too_few_samples=self.too_few)


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` by linear interpolation between order statistics
    (position q x (m - 1) in the sorted values; numpy's default). Plain Python: the
    torch-free layers (attribution's order statistics) take it from here.

    >>> quantile([1.0, 2.0, 3.0], 0.75)
    2.5
    """
    if not values:
        raise ValueError("quantile of no values")
    if not 0 <= q <= 1:
        raise ValueError(f"quantile q must be in [0, 1], got {q!r}")
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(values: Sequence[float]) -> Measurement:
    if not values:
        nan = math.nan
        return Measurement(nan, nan, nan, nan, nan, 0)
    return Measurement(median=quantile(values, 0.5),
                       iqr=quantile(values, 0.75) - quantile(values, 0.25),
                       mean=statistics.fmean(values), min=min(values), max=max(values),
                       n=len(values))
