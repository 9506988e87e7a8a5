"""Gradient norms for the gradient noise scale, measured where DDP reduces the gradients.

A DDP communication hook sees each bucket of this rank's own gradient (its small batch) before
the all-reduce; after the step, the parameters' ``.grad`` hold the all-reduced mean (the big
batch of every rank's images). The hook adds up ``|g_small|^2`` bucket by bucket and then does
what DDP's default hook does (divide by the world size, all-reduce); :meth:`GradNoise.after_backward`
reads ``|g_big|^2``. The estimators themselves are :mod:`swinkit.attribution.noise_scale`'s.

Written here rather than with ``torch.distributed.algorithms.ddp_comm_hooks.default_hooks``:
those hooks reduce without exposing the bucket before the reduction.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

REDUCTIONS = ("mean", "sum")


class GradNoise:
    """Running sums of |g_small|^2 and |g_big|^2 over a run's optimizer steps.

    Args:
        world: ranks in the reduction (the divisor of DDP's mean).
        group: the process group (None: every rank).
        reduction: ``mean`` (DDP's) or ``sum``: gradients summed instead of averaged across
            ranks, the planted defect the DDP-vs-one-process test must catch.
    """

    def __init__(self, world: int, group=None, reduction: str = "mean"):
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        self.world, self.group, self.reduction = world, group, reduction
        self.step_small_sq = None  # this step's, on the gradients' device (no sync per bucket)
        self.small_sq = 0.0   # sum over steps of this rank's |g_small|^2
        self.big_sq = 0.0     # sum over steps of |g_big|^2
        self.steps = 0

    def attach(self, ddp: torch.nn.parallel.DistributedDataParallel) -> None:
        ddp.register_comm_hook(self, reduce_and_measure)

    def after_backward(self, parameters) -> None:
        """Close one step: its |g_small|^2 (from the buckets) and |g_big|^2 (from ``.grad``,
        the all-reduced gradient)."""
        grads = [p.grad for p in parameters if p.grad is not None]
        if grads:  # one read of the device per step, not one per parameter
            norms = torch.stack([n.double() for n in torch._foreach_norm(grads)])
            self.big_sq += float(norms.pow(2).sum())
        if self.step_small_sq is not None:
            self.small_sq += float(self.step_small_sq)
        self.step_small_sq = None
        self.steps += 1

    def totals(self) -> dict:
        """This rank's sums (the run all-reduces ``small_sq`` over ranks)."""
        return {"steps": self.steps, "small_sq": self.small_sq, "big_sq": self.big_sq}


def reduce_and_measure(state: GradNoise, bucket):
    """DDP comm hook: add this bucket's squared norm (this rank's gradient), then reduce it as
    DDP's default hook does (divide by the world size, all-reduce); ``reduction="sum"`` skips
    the division. The bucket's flat buffer: (numel,).

    Returns a ``torch.futures.Future[torch.Tensor]``; no return annotation, because DDP compares
    it with the real type and this module's annotations are strings."""
    buffer = bucket.buffer()
    sq = torch.linalg.vector_norm(buffer, dtype=torch.float64) ** 2
    state.step_small_sq = sq if state.step_small_sq is None else state.step_small_sq + sq
    if state.reduction == "mean":
        buffer.div_(state.world)
    work = dist.all_reduce(buffer, group=state.group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])
