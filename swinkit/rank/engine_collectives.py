"""Every collective an engine runs, on the rank's timeline, with its message bytes.

:class:`CollectiveRecorder` wraps the methods of a communication backend object (DeepSpeed's
``deepspeed.comm`` backend, ``cdb``, through which every ZeRO collective passes; for FSDP2 the
``torch.distributed`` module itself, :data:`FSDP_OPS`) so each call becomes a record
``"{op}@{phase}"`` on the :class:`~swinkit.measure.timeline.Timeline`: arrival at the call,
done when it returns (synchronous calls: gloo on CPU, where the call blocks until the
collective is complete) or when its work handle's ``wait()`` returns (``async_op=True``).

A synchronous collective also cuts the phase the rank was in: the phase is closed at the
arrival and the collective's own span is marked ``exposed_comm`` (communication the rank sat
in, not hidden under compute), so phases still add up to the iteration and blame can split the
span into waiting for the last rank and transfer. On GPU the marks are CUDA events on the
stream current at the call (DeepSpeed's reduction stream under ``overlap_comm``); they time
when the collective was queued and finished there, not a host stall.

Message bytes are the whole message, as NCCL's tests count it: the tensor reduced or
broadcast, the *output* of an all-gather, the *input* of a reduce-scatter. (DeepSpeed's comms
logger keeps the per-rank shard of gathers and scatters and multiplies by N in its bandwidth;
:mod:`swinkit.rank.deepspeed` converts.)
"""
from __future__ import annotations

OPS = ("all_reduce", "all_reduce_coalesced", "reduce", "reduce_scatter", "reduce_scatter_tensor",
       "broadcast", "all_gather", "all_gather_into_tensor", "all_gather_base",
       "all_gather_coalesced", "all_to_all_single", "inference_all_reduce")
# FSDP2's collectives, called through torch.distributed (``*_single`` from torch 2.13 on)
FSDP_OPS = ("all_gather_into_tensor", "all_gather_single", "reduce_scatter_tensor",
            "reduce_scatter_single")


def _nbytes(t) -> int:
    return t.numel() * t.element_size() if hasattr(t, "numel") else 0


def message_bytes(op: str, args: tuple, kwargs: dict) -> int:
    """The message size of one call (see the module doc), from its arguments."""
    def arg(i, name):
        return kwargs[name] if name in kwargs else (args[i] if len(args) > i else None)
    if op in ("all_reduce", "reduce", "broadcast", "inference_all_reduce"):
        return _nbytes(arg(0, "tensor"))
    if op == "all_reduce_coalesced":
        return sum(_nbytes(t) for t in arg(0, "tensors") or [])
    if op in ("all_gather_into_tensor", "all_gather_base"):
        return _nbytes(arg(0, "output_tensor"))
    if op == "all_gather_single":
        return _nbytes(arg(0, "output_tensor"))
    if op == "reduce_scatter_single":
        return _nbytes(arg(1, "input"))
    if op == "all_gather":
        return sum(_nbytes(t) for t in arg(0, "tensor_list") or [])
    if op == "all_gather_coalesced":
        return sum(_nbytes(t) for t in arg(0, "output_tensors") or [])
    if op == "reduce_scatter_tensor":
        return _nbytes(arg(1, "input_tensor"))
    if op == "reduce_scatter":
        return sum(_nbytes(t) for t in arg(1, "input_list") or [])
    if op == "all_to_all_single":
        return _nbytes(arg(1, "input"))
    raise ValueError(f"op must be one of {', '.join(dict.fromkeys(OPS + FSDP_OPS))}; got {op!r}")


class _Handle:
    """A work handle whose ``wait()`` closes the record; everything else passes through."""

    def __init__(self, work, record, clock):
        self._work, self._record, self._clock = work, record, clock

    def wait(self, *args, **kwargs):
        out = self._work.wait(*args, **kwargs)
        if self._record.done is None:
            self._record.done = self._clock.now()
        return out

    def __getattr__(self, name):
        return getattr(self._work, name)


class CollectiveRecorder:
    """Records the backend's collectives while :attr:`phase` is set (inside a measured step).

    ``phase`` is the phase the rank is in (``forward``, ``backward``, ``optimizer``); the rank
    loop sets it before each engine call and clears it between iterations, so collectives run
    at start-up or in a separate logging pass are not recorded.
    """

    def __init__(self, timeline, backend, ops=OPS):
        self.timeline = timeline
        self.phase: str | None = None
        self.calls = 0
        for op in ops:
            original = getattr(backend, op, None)
            if original is not None:
                setattr(backend, op, self._wrap(op, original))

    def _wrap(self, op, original):
        def call(*args, **kwargs):
            phase, tl = self.phase, self.timeline
            if phase is None or not tl.enabled or not tl.iterations:
                return original(*args, **kwargs)
            self.calls += 1
            clock = tl.clock
            async_op = bool(kwargs.get("async_op", False))
            arrive = clock.now()
            if not async_op:
                tl.mark(phase, arrive)
            record = tl.collective(f"{op}@{phase}", blocking=not async_op,
                                   nbytes=message_bytes(op, args, kwargs), arrive=arrive,
                                   ready=arrive)
            out = original(*args, **kwargs)
            if async_op and out is not None and hasattr(out, "wait"):
                return _Handle(out, record, clock)
            record.done = clock.now()
            if not async_op:
                tl.mark("exposed_comm", record.done)
            return out
        call.__wrapped__ = original
        return call
