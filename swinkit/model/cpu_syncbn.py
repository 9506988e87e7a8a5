"""SyncBatchNorm for CPU ranks: the GPU presets' SyncBN, runnable on this project's machines.

torch's ``SyncBatchNorm`` refuses CPU tensors once a process group exists (its statistics
kernels are CUDA-only), so CPU runs used to turn the heads' SyncBN into plain BN, and every
path that only SyncBN reaches (its hooks, its collectives on the timeline, their blame, a
local step's group of one) went untested. :class:`CpuSyncBatchNorm` behaves as SyncBN does
(a ``process_group``, torch's decision when to synchronise) and its synchronised path runs on
CPU: one ``all_gather`` of the per-rank statistics in forward and one ``all_reduce`` of the
gradient sums in backward, called through ``torch.distributed`` as torch's own SyncBN calls
them, with the statistics in plain tensor ops. It is not a subclass of
``torch.nn.SyncBatchNorm``, because DDP refuses that class on CPU modules; swinkit's
instruments find both by :func:`swinkit.measure.sync_bn.is_sync_batch_norm`. A config asks
for it with ``norm_cfg=dict(type='CpuSyncBN')`` (the presets' ``cpu_sync_bn``).

The math is batch norm over the union of the ranks' batches:

    mean = sum_r n_r mean_r / N,  var = sum_r n_r E_r[x^2] / N - mean^2     (N = sum_r n_r)
    dx   = w * invstd * (dy - sum(dy) / N - xhat * sum(dy * xhat) / N)      (sums over all ranks)
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm


class _CpuSyncBatchNormFunction(torch.autograd.Function):
    """Forward and backward of batch norm synchronised over ``group`` (x: (B, C, *))."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, group, world):
        dims = [d for d in range(x.dim()) if d != 1]
        count = x.numel() // x.shape[1]
        mean = x.mean(dims)
        combined = torch.cat([mean, (x * x).mean(dims), x.new_full((1,), float(count))])
        gathered = [torch.empty_like(combined) for _ in range(world)]
        dist.all_gather(gathered, combined, group)  # looked up at call time, as torch's SyncBN
        stats = torch.stack(gathered)  # (world, 2C + 1)
        c = x.shape[1]
        counts = stats[:, 2 * c:]
        total = counts.sum()
        mean = (stats[:, :c] * counts).sum(0) / total
        var = (stats[:, c:2 * c] * counts).sum(0) / total - mean * mean
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(momentum * mean)
                running_var.mul_(1 - momentum).add_(momentum * var * total / max(total - 1, 1))
        shape = [1, c] + [1] * (x.dim() - 2)
        xhat = (x - mean.view(shape)) * invstd.view(shape)
        ctx.save_for_backward(xhat, weight, invstd, total)
        ctx.group, ctx.dims = group, dims
        out = xhat if weight is None else xhat * weight.view(shape)
        return out if bias is None else out + bias.view(shape)

    @staticmethod
    def backward(ctx, grad_out):
        xhat, weight, invstd, total = ctx.saved_tensors
        c = xhat.shape[1]
        shape = [1, c] + [1] * (xhat.dim() - 2)
        sum_dy = grad_out.sum(ctx.dims)
        sum_dy_xhat = (grad_out * xhat).sum(ctx.dims)
        grad_weight, grad_bias = sum_dy_xhat.clone(), sum_dy.clone()  # DDP reduces these
        combined = torch.cat([sum_dy, sum_dy_xhat])
        dist.all_reduce(combined, dist.ReduceOp.SUM, ctx.group)
        sum_dy, sum_dy_xhat = combined[:c], combined[c:]
        scale = invstd if weight is None else invstd * weight
        grad_in = scale.view(shape) * (grad_out - (sum_dy / total).view(shape)
                                       - xhat * (sum_dy_xhat / total).view(shape))
        return (grad_in, None if weight is None else grad_weight,
                None if weight is None else grad_bias, None, None, None, None, None, None)


class CpuSyncBatchNorm(_BatchNorm):
    """SyncBatchNorm whose synchronised path runs on CPU (see the module doc). It synchronises
    when torch's would: training, a process group initialised, more than one rank in
    ``process_group`` (default: every rank); otherwise it is plain batch norm. x: (B, C, *)."""
    syncs_batch_norm = True  # what swinkit.measure.sync_bn.is_sync_batch_norm looks for

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, process_group=None,
                 device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        self.process_group = process_group

    def _check_input_dim(self, x):
        if x.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {x.dim()}D input)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
        group = self.process_group or (dist.group.WORLD if dist.is_initialized() else None)
        world = dist.get_world_size(group) if group is not None else 1
        if not self.training or world == 1:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                self.training or not self.track_running_stats, momentum, self.eps)
        return _CpuSyncBatchNormFunction.apply(x, self.weight, self.bias, self.running_mean,
                                               self.running_var, self.eps, momentum, group, world)


def register() -> None:
    """Make ``CpuSyncBN`` a norm type in MMSeg's MODELS registry (ConvModule's ``norm_cfg``)."""
    from mmseg.registry import MODELS
    MODELS.register_module("CpuSyncBN", module=CpuSyncBatchNorm, force=True)
