"""Phase timers with one interface for CPU (perf_counter) and GPU (CUDA events).

On GPU the events are recorded into the stream and read only after the iteration (or after the
run), so nothing synchronises inside the measured step; on CPU the clock is read directly.
A :class:`PhaseClock` marks boundaries; consecutive marks make phases that add up to the span.
"""
from __future__ import annotations

import time

import torch


class _CpuMark:
    __slots__ = ("t",)

    def __init__(self):
        self.t = time.perf_counter()

    def seconds_since(self, earlier: "_CpuMark") -> float:
        return self.t - earlier.t


class _CudaMark:
    __slots__ = ("event",)

    def __init__(self):
        self.event = torch.cuda.Event(enable_timing=True)
        self.event.record()

    def seconds_since(self, earlier: "_CudaMark") -> float:
        self.event.synchronize()
        return earlier.event.elapsed_time(self.event) / 1e3


class PhaseClock:
    """Marks named boundaries within one iteration.

    Example::

        clock.start(); ...; clock.mark("data_wait"); ...; clock.mark("forward")
        phases = clock.phases()   # {"data_wait": s, "forward": s}, read after the step
    """

    def __init__(self, cuda: bool = False):
        self._mark = _CudaMark if cuda else _CpuMark
        self._marks: list[tuple[str, object]] = []

    def new_mark(self):
        """A mark taken now, to be placed later with :meth:`append` (e.g. from a hook)."""
        return self._mark()

    def start(self, mark=None) -> None:
        """Open the span now, or at ``mark`` (e.g. the mark that closed the previous span)."""
        self._marks = [("start", mark if mark is not None else self._mark())]

    def append(self, phase: str, mark) -> None:
        """Close ``phase`` at a mark taken earlier (it must be later than the previous mark)."""
        self._marks.append((phase, mark))

    def mark(self, phase: str) -> None:
        self._marks.append((phase, self._mark()))

    def phases(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for (_, earlier), (name, later) in zip(self._marks, self._marks[1:]):
            out[name] = out.get(name, 0.0) + later.seconds_since(earlier)
        return out

    def total(self) -> float:
        return self._marks[-1][1].seconds_since(self._marks[0][1])
