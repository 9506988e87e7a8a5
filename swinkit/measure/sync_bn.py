"""SyncBN on the timeline: its collectives recorded, its compute left to the phases.

SyncBatchNorm all-gathers its batch statistics in forward and all-reduces its gradient sums in
backward, each a collective that holds every rank until the last arrives. Each is recorded as
a blocking collective ``<module>.fwd`` / ``<module>.bwd`` (:func:`record_module_collectives`),
from the rank's arrival to its return, so blame can split it into waiting and transfer; the
statistics and normalisation around it stay in forward and backward.
"""
from __future__ import annotations

import threading

import torch
import torch.distributed as dist


def record_module_collectives(timeline, model: torch.nn.Module) -> int:
    """Record the collectives inside every SyncBatchNorm of ``model`` (its forward all-gather
    of the batch statistics, its backward all-reduce of the gradient sums) as blocking
    collectives ``<module>.fwd`` / ``<module>.bwd``. Returns how many modules are watched.

    Only the collective is recorded, from the rank's arrival to its return: the statistics
    and normalisation around it are the phase's compute (forward, backward), not
    communication. Where SyncBN does not synchronise (world size 1, a group of one, eval
    mode) it runs plain batch norm and nothing is recorded, as nothing waits.

    No module backward hook is used: a full backward hook wraps the module's output in a view,
    and MMCV's ConvModule modifies SyncBN's output in place (``ReLU(inplace=True)``), which
    autograd refuses. Scopes are set instead by plain forward hooks and by hooks on the
    autograd node of SyncBN's output (:class:`_SyncBNScope`)."""
    modules = [(name, m) for name, m in model.named_modules() if is_sync_batch_norm(m)]
    if modules:
        _install_collective_tap()
    for name, module in modules:
        scope = _SyncBNScope(timeline, name)
        module.register_forward_pre_hook(scope.enter_forward)
        module.register_forward_hook(scope.leave_forward, always_call=True)  # closes on errors too
    return len(modules)


def is_sync_batch_norm(module: torch.nn.Module) -> bool:
    """torch's SyncBatchNorm, or a module that synchronises batch statistics the same way
    and says so (``syncs_batch_norm``: SyncBN's CPU stand-in, which DDP would refuse as a
    SyncBatchNorm subclass on CPU)."""
    return isinstance(module, torch.nn.SyncBatchNorm) or getattr(module, "syncs_batch_norm", False)


# The collectives torch's SyncBatchNorm autograd Function calls (torch/nn/modules/_functions.py:
# ``dist.all_gather_single`` on NCCL in torch 2.13, ``all_gather_into_tensor`` in others,
# ``dist.all_gather`` on gloo, ``all_reduce`` in backward), looked up on torch.distributed at
# call time. tests/test_sync_bn.py reads that source and fails if it calls one not listed here.
_TAPPED = ("all_gather", "all_gather_single", "all_gather_into_tensor", "all_reduce")


_scope = threading.local()  # the SyncBN scope open on this thread (autograd's device thread on GPU)


def _install_collective_tap() -> None:
    """Wrap the collectives SyncBN calls so that, inside an open :class:`_SyncBNScope` on the
    calling thread, each call is recorded on that scope's timeline; outside one they pass
    straight through (one attribute read). Idempotent.

    Why a wrapper on torch.distributed: torch offers no hook on a collective called inside an
    autograd Function, and copying SyncBN's Function to time it would fork torch's numerics.
    The wrapper changes no argument and no result."""
    for op in _TAPPED:
        original = getattr(dist, op, None)
        if original is None or getattr(original, "_swinkit_tap", False):
            continue

        def tapped(*args, _original=original, **kwargs):
            scope = getattr(_scope, "current", None)
            if scope is None:
                return _original(*args, **kwargs)
            return scope.record(_original, args, kwargs)
        tapped._swinkit_tap = True
        tapped.__wrapped__ = original
        tapped.__doc__ = original.__doc__
        setattr(dist, op, tapped)


class _SyncBNScope:
    """One SyncBN module's recorder: the forward's collectives go on the timeline as
    ``<name>.fwd``; a forward that synchronised also hooks its output's autograd node, so
    the node's backward records ``<name>.bwd``."""

    def __init__(self, timeline, name: str):
        self.timeline, self.name = timeline, name
        self.kind = "fwd"
        self.recorded = 0  # collectives recorded in the open scope

    def record(self, collective, args, kwargs):
        if not self.timeline.is_open:  # outside the measured iterations: nothing to file under
            return collective(*args, **kwargs)
        clock = self.timeline.clock
        # the rank's own contribution: the last tensor argument (all_gather_single takes the
        # output first, then the input; all_gather a list, then the input; all_reduce one)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        nbytes = tensors[-1].numel() * tensors[-1].element_size() if tensors else 0
        record = self.timeline.collective(f"{self.name}.{self.kind}", blocking=True,
                                          nbytes=nbytes, arrive=clock.now())
        _scope.current = None  # the collective itself may call others (gloo's all_gather)
        try:
            return collective(*args, **kwargs)
        finally:
            record.done = clock.now()
            _scope.current = self
            self.recorded += 1

    def enter_forward(self, *_) -> None:
        self.kind, self.recorded = "fwd", 0
        _scope.current = self

    def leave_forward(self, module, inputs, output) -> None:
        _scope.current = None
        node = getattr(output, "grad_fn", None)
        if self.recorded and node is not None:  # it synchronised: so will its backward
            node.register_prehook(self._enter_backward)
            node.register_hook(self._leave_backward)

    def _enter_backward(self, grad_outputs):
        self.kind = "bwd"
        _scope.current = self

    def _leave_backward(self, grad_inputs, grad_outputs):
        _scope.current = None
