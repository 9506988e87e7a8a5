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
