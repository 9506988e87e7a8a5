"""The one timing loop of the isolated benchmarks: warm-up calls, then one clock read on each
side of every timed call, with the device drained first where work is asynchronous."""
from __future__ import annotations

import time
from typing import Callable


def timed(fn: Callable[[], object], samples: int, warmup: int = 0,
          sync: Callable[[], object] | None = None) -> list[float]:
    """Seconds of each of ``samples`` calls of ``fn`` after ``warmup`` untimed calls.

    ``sync`` (e.g. ``torch.cuda.synchronize``) runs before the clock is read on either side,
    so asynchronous device work launched by ``fn`` is inside its sample and earlier work is
    not; on CPU pass None."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(samples):
        sync and sync()
        start = time.perf_counter()
        fn()
        sync and sync()
        times.append(time.perf_counter() - start)
    return times


def event_timed(fns: list[Callable[[], object]], event_factory: Callable[[], object],
                sync: Callable[[], object]) -> list[float]:
    """Seconds of each of ``fns`` run back to back, from device events recorded between them
    on the launching stream, with one ``sync`` before and one after the lot.

    What a GPU collective takes on the device, as DDP pipelines them: a host clock around each
    call would add a launch and a synchronisation (10-30 us) to every one of them, a sizeable
    part of an NVLink all-reduce of a bucket. ``event_factory``: e.g.
    ``lambda: torch.cuda.Event(enable_timing=True)`` (events with ``record()`` and
    ``elapsed_time(other)`` in ms)."""
    sync()
    events = [event_factory()]
    events[0].record()
    for fn in fns:
        fn()
        events.append(event_factory())
        events[-1].record()
    sync()
    return [a.elapsed_time(b) / 1e3 for a, b in zip(events, events[1:])]
