"""Scaling arithmetic (the thesis's equations 3.1 and 3.2): numbers only.

Images per rank are fixed and a training run of ``base_iters`` iterations on one rank takes
``base_iters / N`` iterations on N ranks, so on per-iteration times T(N):

    speedup     S(N) = N * T(1) / T(N)
    efficiency  E(N) = S(N) / N = T(1) / T(N)
    Karp-Flatt  e(N) = (1/S - 1/N) / (1 - 1/N)      (experimentally determined serial fraction)

That is weak scaling. For strong scaling (the global batch fixed, images per rank = global / N)
the same functions take T(1) / N in place of T(1) (the iteration N ranks would take at perfect
scaling), which gives S(N) = T(1) / T(N) and E(N) = T(1) / (N T(N)): see
:func:`swinkit.attribution.loss_split.scaling_rows`.
"""
from __future__ import annotations

import math


def speedup(t1: float, tn: float, n: int) -> float:
    return n * t1 / tn


def efficiency(t1: float, tn: float) -> float:
    return t1 / tn


def karp_flatt(s: float, n: int) -> float:
    """NaN at N = 1, where the serial fraction is undefined."""
    if n <= 1:
        return math.nan
    return (1 / s - 1 / n) / (1 - 1 / n)


def projected_training_s(iter_s: float, n: int, base_iters: int) -> float:
    """Projection of a whole weak-scaling run: base_iters / N iterations of iter_s each."""
    return iter_s * base_iters / n
