"""How much backward and the gradient all-reduces slow each other when they overlap.

DDP overlaps each bucket's all-reduce with the rest of backward. The isolated components time
each alone: backward with nothing communicated, the all-reduces with nothing computed. Beside
each other they share cores (gloo reduces and copies on CPU threads) or SMs and memory
bandwidth (NCCL's kernels), and both run slower; an oracle that assumes the overlap is free
predicts too short an iteration exactly when overlap matters.

:class:`CommLoad` all-reduces the run's own bucket payloads round after round on a thread of
its own while the training loop (communicating nothing) runs a few iterations on the main
thread, on every rank at once. Then

* ``compute_rate`` = backward alone / backward with the all-reduces beside it (median
  iterations), and
* ``comm_rate`` = a round of all-reduces alone / the same round beside backward (median
  rounds, the first and last dropped: they straddle the loop's start and end);

each capped at 1 (faster under load is noise, not a speed-up). The fluid model in
:mod:`swinkit.attribution.overlap` applies them while the two overlap.

Every rank's thread must issue the same collectives, so after each round the threads agree
to go on (an all-reduce of a flag, MIN over ranks) until any rank's loop has finished.

On CUDA the load's collectives are issued from a stream of its own, and so are injected comm
delays (:mod:`swinkit.rank.inject`): :class:`SideStreams` makes each such stream once, from
the high-priority pool, never from the default pool that ProcessGroupNCCL's streams and the
streams of futures' callbacks are drawn from, round robin. A side stream that happened to be a
communicator's stream would make its work queue behind, and hold up, unrelated collectives.
"""
from __future__ import annotations

import statistics
import threading
import time
import warnings
from collections.abc import Callable

import torch
import torch.distributed as dist

MIN_ROUNDS = 3  # rounds kept after dropping the first and the last
# torch.cuda.Stream priority: lower is more urgent. Pool 0 serves ProcessGroupNCCL and future
# callbacks; NCCL's high-priority option (TORCH_NCCL_HIGH_PRIORITY=1) takes the most urgent
# level, which is -1 too only on a GPU with two priority levels.
HIGH_PRIORITY = -1
POOL_SIZE = 32  # streams per priority per device in PyTorch's pool; beyond, draws repeat


def high_priority_stream(device, priority: int):
    """A stream from PyTorch's pool of ``priority`` on ``device`` (the default factory)."""
    return torch.cuda.Stream(device=device, priority=priority)


class SideStreams:
    """Dedicated streams, one per (device, name), each made once by ``factory(device=...,
    priority=HIGH_PRIORITY)`` on first use and reused after; ``factory`` is a seam for tests.

    Making a stream per use instead draws a new pool stream every time, and the pool is a
    ring of :data:`POOL_SIZE`: within an iteration of a few dozen buckets it wraps onto streams
    that others hold. Shared by threads (a load thread, the autograd thread): hence the lock.
    """

    def __init__(self, factory: Callable = high_priority_stream):
        self.factory = factory
        self._streams: dict = {}
        self._lock = threading.Lock()

    def get(self, device, name: str):
        """The stream called ``name`` on ``device``."""
        key = (device, name)
        with self._lock:
            if key not in self._streams:
                on_device = sum(d == device for d, _ in self._streams)
                if on_device == POOL_SIZE:
                    warnings.warn(f"more than {POOL_SIZE} side streams on {device}: the pool "
                                  "wraps, and some share a stream", RuntimeWarning, stacklevel=2)
                self._streams[key] = self.factory(device=device, priority=HIGH_PRIORITY)
            return self._streams[key]


SIDE_STREAMS = SideStreams()  # one per process: every user of a side stream shares the cache


def load_stream(device: torch.device, streams: SideStreams = SIDE_STREAMS):
    """The stream :class:`CommLoad` issues its collectives from: None on CPU."""
    return streams.get(device, "comm-load") if device.type == "cuda" else None


class CommLoad(threading.Thread):
    """All-reduce ``sizes`` (element counts per bucket, each bucket's collectives back to back)
    on a group of its own until every rank has called :meth:`finish`; seconds per round in
    ``rounds``. On CUDA the collectives go on a stream of this thread, so that waiting for them
    does not wait for the training loop's kernels, and each round is timed by device events on
    that stream: the round it is compared with, alone, is timed so
    (:func:`~swinkit.measure.timing.event_timed`), and a host clock would add a launch and a
    wake-up to every round. ``events``: the event factory (CUDA events by default on GPU;
    stand-ins in tests)."""

    def __init__(self, sizes: list[list[int]], dtype, device: torch.device,
                 streams: SideStreams = SIDE_STREAMS, events: Callable | None = None):
        super().__init__(name="swinkit-comm-load", daemon=True)
        # A group of its own (made collectively, here, on every rank): the training loop may
        # use the world group meanwhile (SyncBN on GPU presets), and two threads' collectives
        # on one communicator could interleave differently on different ranks.
        self.group = dist.new_group(list(range(dist.get_world_size())))
        self.tensors = [[torch.zeros(n, dtype=dtype, device=device) for n in entry]
                        for entry in sizes]
        self.device = device
        self.streams = streams
        self.events = events
        self.flag = torch.ones(1, dtype=torch.int32, device=device)
        self.go_on = True
        self.rounds: list[float] = []
        self.error: BaseException | None = None

    def finish(self) -> None:
        """This rank's loop is done: the threads stop after the round in flight."""
        self.go_on = False

    def run(self) -> None:
        try:
            stream = load_stream(self.device, self.streams)
            if stream is not None:
                events = self.events or (lambda: torch.cuda.Event(enable_timing=True))
                with torch.cuda.stream(stream):
                    self._loop(stream.synchronize, events)
            else:
                self._loop(None, self.events)
        except BaseException as exc:  # re-raised by the main thread (see ``join_or_raise``)
            self.error = exc

    def _loop(self, sync, events: Callable | None) -> None:
        while True:
            start = time.perf_counter()
            if events:
                begin, end = events(), events()
                begin.record()
            for entry in self.tensors:
                for t in entry:
                    dist.all_reduce(t, group=self.group)
            if events:
                end.record()
            if sync:
                sync()
            self.rounds.append(begin.elapsed_time(end) / 1e3 if events
                               else time.perf_counter() - start)
            self.flag.fill_(1 if self.go_on else 0)
            dist.all_reduce(self.flag, op=dist.ReduceOp.MIN, group=self.group)
            if int(self.flag.item()) == 0:
                return

    def join_or_raise(self, timeout_s: float) -> None:
        self.join(timeout_s)
        if self.is_alive():
            raise RuntimeError(f"the all-reduce load thread did not stop within {timeout_s} s")
        if self.error is not None:
            raise RuntimeError("the all-reduce load thread failed") from self.error


def rates(backward_alone_s: list[float], backward_loaded_s: list[float],
          round_alone_s: float, rounds_loaded_s: list[float]) -> dict:
    """``compute_rate`` and ``comm_rate`` (see the module docstring); ``None`` for a rate with
    too few samples to tell (the oracle then assumes no contention for it)."""
    kept = rounds_loaded_s[1:-1]
    compute = (min(1.0, statistics.median(backward_alone_s) / statistics.median(backward_loaded_s))
               if backward_alone_s and backward_loaded_s else None)
    comm = (min(1.0, round_alone_s / statistics.median(kept))
            if len(kept) >= MIN_ROUNDS and round_alone_s > 0 else None)
    return {"compute_rate": compute, "comm_rate": comm,
            "backward_alone_s": statistics.median(backward_alone_s) if backward_alone_s else None,
            "backward_loaded_s": (statistics.median(backward_loaded_s)
                                  if backward_loaded_s else None),
            "round_alone_s": round_alone_s, "rounds_loaded_s": rounds_loaded_s}
