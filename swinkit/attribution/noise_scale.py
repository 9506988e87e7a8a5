"""The gradient noise scale, the statistical efficiency of a batch, and goodput: numbers only.

Gradient noise scale (McCandlish et al., "An Empirical Model of Large-Batch Training", 2018,
appendix A.1). With G the true gradient and Sigma the per-example gradient covariance, the
gradient of a batch of B examples has ``E|g_B|^2 = |G|^2 + tr(Sigma) / B``. Norms measured at
two batch sizes, B_small < B_big, give unbiased estimates of both terms::

    |G|^2     ~= (B_big |g_big|^2 - B_small |g_small|^2) / (B_big - B_small)
    tr(Sigma) ~= (|g_small|^2 - |g_big|^2) / (1 / B_small - 1 / B_big)
    B_simple   = tr(Sigma) / |G|^2                       (the noise scale, phi below)

In a DDP step the small batch is one rank's (its gradient before the all-reduce, |g_small|^2
averaged over the ranks) and the big one all ranks' together (the all-reduced gradient). One
step's estimates are noisy (either can be negative); the ratio is taken of their means over
many steps, as McCandlish et al. advise, not the mean of per-step ratios.

Statistical efficiency and goodput (Qiao et al., "Pollux: Co-adaptive Cluster Scheduling for
Goodput-Optimized Deep Learning", OSDI 2021): relative to a base batch m0, one example of a
batch of M makes this fraction of the progress one example makes at m0::

    EFF(M) = (phi + m0) / (phi + M)           (1 at M = m0; below 1 for M > m0)
    GOODPUT(M) = THROUGHPUT(M) x EFF(M)       (images/s, counted as images at m0)

so a larger batch pays only while its throughput grows faster than its efficiency falls.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NoiseScale:
    """Estimates from gradient norms at two batch sizes (see the module doc).

    Attributes:
        grad_sq: |G|^2, the squared norm of the true gradient.
        trace_sigma: tr(Sigma), the per-example gradient variance summed over parameters.
        b_simple: tr(Sigma) / |G|^2 (examples); None where |G|^2 <= 0 (noise dominates the
            estimate: more steps are needed) or tr(Sigma) < 0.
    """
    grad_sq: float
    trace_sigma: float
    b_simple: float | None


def noise_scale(b_small: float, b_big: float, small_sq: float, big_sq: float) -> NoiseScale:
    """McCandlish et al.'s unbiased estimators from |g_small|^2 and |g_big|^2.

    Args:
        b_small: examples in the small batch (one rank's).
        b_big: examples in the big batch (all ranks'); must be larger.
        small_sq: mean |g_small|^2 (over ranks and steps).
        big_sq: mean |g_big|^2 (over the same steps).

    Hand-worked (B_small 2, B_big 4, |g_small|^2 5, |g_big|^2 3): |G|^2 = (4*3 - 2*5) / 2 = 1,
    tr(Sigma) = (5 - 3) / (1/2 - 1/4) = 8, B_simple = 8:

    >>> noise_scale(2, 4, 5.0, 3.0)
    NoiseScale(grad_sq=1.0, trace_sigma=8.0, b_simple=8.0)
    """
    if not 0 < b_small < b_big:
        raise ValueError(f"batch sizes must satisfy 0 < b_small < b_big, got {b_small}, {b_big}")
    grad_sq = (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
    trace_sigma = (small_sq - big_sq) / (1 / b_small - 1 / b_big)
    ok = grad_sq > 0 and trace_sigma >= 0
    return NoiseScale(grad_sq, trace_sigma, trace_sigma / grad_sq if ok else None)


def statistical_efficiency(phi: float, batch: float, base_batch: float) -> float:
    """Pollux's EFF(M) = (phi + m0) / (phi + M): progress per example at ``batch`` (M)
    relative to ``base_batch`` (m0), for gradient noise scale ``phi``.

    >>> round(statistical_efficiency(8.0, 4, 2), 4), statistical_efficiency(8.0, 2, 2)
    (0.8333, 1.0)
    """
    if not (phi >= 0 and batch > 0 and base_batch > 0):
        raise ValueError(f"need phi >= 0 and batches > 0, got {phi}, {batch}, {base_batch}")
    return (phi + base_batch) / (phi + batch)


def goodput(images_per_s: float, phi: float, batch: float, base_batch: float) -> float:
    """Throughput x statistical efficiency: images per second, counted as images at m0.

    >>> round(goodput(120.0, 8.0, 4, 2), 6)   # 120 x (8 + 2) / (8 + 4)
    100.0
    """
    return images_per_s * statistical_efficiency(phi, batch, base_batch)


def pooled_noise_scale(estimates: list[dict]) -> NoiseScale | None:
    """One estimate from several runs' (``{"steps", "grad_sq", "trace_sigma"}`` each): |G|^2
    and tr(Sigma) averaged over all their steps (each run's unbiased estimates weighted by its
    steps), then divided, as within a run. Runs whose own |G|^2 came out <= 0 count too:
    dropping them would keep the runs whose noise happened to fall one way. None without
    steps.

    |G|^2 = (10 x 1.0 + 30 x -0.2) / 40 = 0.1, tr(Sigma) = (10 x 8 + 30 x 4) / 40 = 5:

    >>> est = pooled_noise_scale([{"steps": 10, "grad_sq": 1.0, "trace_sigma": 8.0},
    ...                           {"steps": 30, "grad_sq": -0.2, "trace_sigma": 4.0}])
    >>> round(est.grad_sq, 9), est.trace_sigma, round(est.b_simple, 6)
    (0.1, 5.0, 50.0)
    """
    steps = sum(e["steps"] for e in estimates)
    if not steps:
        return None
    grad_sq = sum(e["steps"] * e["grad_sq"] for e in estimates) / steps
    trace = sum(e["steps"] * e["trace_sigma"] for e in estimates) / steps
    ok = grad_sq > 0 and trace >= 0
    return NoiseScale(grad_sq, trace, trace / grad_sq if ok else None)
