"""Clocks for the timeline: one interface, the host's or the GPU's, and the hosts' offsets.

:class:`HostClock`, :class:`CudaClock` and :class:`NullClock` share one interface: ``now()``
returns a mark, ``seconds(mark)`` turns it into seconds on the host's ``perf_counter`` after the
run, ``anchor()`` re-maps the device's timer where the loop stands outside an iteration, and
``error_s()`` bounds the mapping's error. ``perf_counter`` is ``CLOCK_MONOTONIC``, one clock for
every process of a Linux host, so on one node the ranks' timelines are comparable as recorded.
On GPU a mark is a CUDA event recorded into the stream (nothing synchronises inside the step).
Across nodes, :func:`estimate_clock_offsets` measures each rank's offset from rank 0 by
ping-pong, before and after the run, and :class:`OffsetLine` applies it as a straight line.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable


class HostClock:
    """perf_counter marks (CPU ranks)."""
    name = "perf_counter"

    def now(self) -> float:
        return time.perf_counter()

    def seconds(self, mark: float, near=None) -> float:
        return mark

    def anchor(self) -> None:
        """Marks are host time already."""

    def finish(self) -> None:
        """Nothing is in flight on the host."""

    def error_s(self) -> float:
        return 0.0


class CudaClock:
    """CUDA-event marks on the current stream, read after the run (no sync inside the step).

    Events become host seconds through *anchors*: an event recorded on an idle device between
    two host reads, ``synchronize(); t0; record; synchronize(); t1``, completed within
    [t0, t1], so its host time is their midpoint within half their distance. Anchors are taken
    at start-up, wherever the loop already stands outside an iteration (:meth:`anchor`) and at
    the end (:meth:`finish`); a mark maps along the straight line between the anchors around
    it, so the GPU timer's drift against the host clock over a long run is followed piecewise.
    :meth:`error_s` bounds the mapping's error: the widest anchor, plus how far the middle
    anchors sit off the line through the first and the last (the drift one line would miss),
    plus the step of a float32 interval as long as the longest between anchors.

    ``cudaEventElapsedTime`` returns float32 milliseconds: its step is 4 us at 60 s and 36 us
    at 600 s, as much as a SyncBN collective on NVLink. So no interval read is long: anchors
    are placed from chained anchor-to-anchor intervals, a mark from the anchor before it, and
    with ``near`` (an earlier mark already mapped, e.g. its iteration's start) from that mark,
    so marks within an iteration keep sub-microsecond differences.
    ``event_factory`` and ``synchronize``: CUDA's unless given (a CPU test drives the
    arithmetic with fake events)."""
    name = "cuda_events"

    def __init__(self, event_factory=None, synchronize=None, now=time.perf_counter):
        if event_factory is None:
            import torch
            event_factory = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
            synchronize = torch.cuda.synchronize
        self._event, self._sync, self._now = event_factory, synchronize, now
        self._anchors: list[tuple[Any, float, float]] = []  # (event, host seconds, half-width)
        self._marked = False  # a mark was recorded since the last anchor
        self.anchor()

    def anchor(self) -> None:
        """Map the device's timer to the host clock now (synchronises: outside iterations)."""
        self._sync()
        t0 = self._now()
        event = self._event()
        event.record()
        self._sync()
        t1 = self._now()
        self._anchors.append((event, (t0 + t1) / 2, (t1 - t0) / 2))
        self._marked = False

    def now(self):
        event = self._event()
        event.record()
        self._marked = True
        return event

    def _points(self) -> list[tuple[float, float]]:
        """(device seconds from the first anchor, host seconds) of every anchor, the device
        side chained from anchor-to-anchor intervals. Kept until the next anchor: resolving a
        paired run reads them for every mark (hundreds of anchors, thousands of marks)."""
        cached = getattr(self, "_cached_points", None)
        if cached is not None and len(cached) == len(self._anchors):
            return cached
        self._cached_points = self._compute_points()
        return self._cached_points

    def _compute_points(self) -> list[tuple[float, float]]:
        device = [0.0]
        for (a, _, _), (b, _, _) in zip(self._anchors, self._anchors[1:]):
            device.append(device[-1] + a.elapsed_time(b) / 1e3)
        return list(zip(device, (host for _, host, _ in self._anchors)))

    def seconds(self, mark, near: "tuple[Any, float] | None" = None) -> float:
        """Host seconds of ``mark``; ``near``: (an earlier mark, its host seconds) to read it
        from, a short interval."""
        points = self._points()
        if near is not None:
            ref, ref_s = near
            return ref_s + ref.elapsed_time(mark) / 1e3 * _slope_at(points, ref_s, by="host")
        coarse = self._anchors[0][0].elapsed_time(mark) / 1e3  # only to find its anchor
        i = max([k for k, (x, _) in enumerate(points) if x <= coarse] or [0])
        return map_piecewise(points, points[i][0] + self._anchors[i][0].elapsed_time(mark) / 1e3)

    def finish(self) -> None:
        """Close the mapping after the last mark (resolving twice adds no second anchor)."""
        if self._marked:
            self.anchor()

    def error_s(self) -> float:
        points = self._points()
        widest = max(half for _, _, half in self._anchors)
        longest = max((b[0] - a[0] for a, b in zip(points, points[1:])), default=0.0)
        float32_step = longest * 2.0 ** -24  # of the longest interval read from one anchor
        if len(points) < 3:
            return widest + float32_step
        ends = [points[0], points[-1]]
        return widest + float32_step + max(abs(map_piecewise(ends, x) - host)
                                           for x, host in points[1:-1])


def _slope_at(points: list[tuple[float, float]], at: float, by: str = "device") -> float:
    """Host seconds per device second of the segment of ``points`` holding ``at`` (a device
    or, with ``by="host"``, a host time); 1 with fewer than two points.

    >>> _slope_at([(0.0, 10.0), (1.0, 11.5), (2.0, 12.5)], 11.8, by="host")
    1.0
    """
    if len(points) < 2:
        return 1.0
    k = 1 if by == "host" else 0
    i = 1
    while i < len(points) - 1 and at > points[i][k]:
        i += 1
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return (y1 - y0) / (x1 - x0) if x1 != x0 else 1.0


def map_piecewise(points: list[tuple[float, float]], x: float) -> float:
    """``x`` mapped along the straight lines through ``points`` ((x, y), x ascending); beyond
    either end along the nearest segment (one point: a shift).

    >>> map_piecewise([(0.0, 10.0), (1.0, 11.5), (2.0, 12.5)], 1.5), map_piecewise([(0.0, 10.0), (1.0, 11.5)], 3.0)
    (12.0, 14.5)
    """
    if len(points) == 1:
        return points[0][1] + x - points[0][0]
    i = 1
    while i < len(points) - 1 and x > points[i][0]:
        i += 1
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    slope = (y1 - y0) / (x1 - x0) if x1 != x0 else 1.0
    return y0 + (x - x0) * slope


class NullClock:
    """The same interface, recording nothing: the bare loop's clock."""
    name = "none"

    def now(self) -> None:
        return None

    def seconds(self, mark, near=None) -> float:
        return float("nan")

    def anchor(self) -> None:
        pass

    def finish(self) -> None:
        pass

    def error_s(self) -> float:
        return 0.0


@dataclass(frozen=True)
class OffsetLine:
    """A rank's clock minus rank 0's as a straight line through two estimates (before and
    after the run), so drift between hosts is followed rather than frozen at the start.

    >>> line = OffsetLine(100.0, 0.010, 200.0, 0.012)   # 20 ppm drift
    >>> round(line(150.0), 6), OffsetLine.none()(5.0)
    (0.011, 0.0)
    """
    at0: float
    offset0: float
    at1: float
    offset1: float

    @classmethod
    def none(cls) -> "OffsetLine":
        return cls(0.0, 0.0, 1.0, 0.0)

    def __call__(self, t: float) -> float:
        if self.at1 == self.at0:
            return self.offset0
        return self.offset0 + (t - self.at0) * (self.offset1 - self.offset0) / (self.at1 - self.at0)


def make_clock(cuda: bool, enabled: bool = True):
    if not enabled:
        return NullClock()
    return CudaClock() if cuda else HostClock()


def estimate_clock_offsets(rank: int, world: int, group=None, rounds: int = 8,
                           now: Callable[[], float] = time.perf_counter) -> dict:
    """Each rank's clock offset from rank 0, by ping-pong over a (gloo) process group.

    Rank 0 sends its time t1 to rank r, which answers with its own time t2; rank 0 reads t3 on
    receipt. Then offset = t2 - (t1 + t3) / 2 with error at most (t3 - t1) / 2 (the answer was
    taken somewhere inside the round trip); the round with the shortest trip is kept.

    Returns on every rank: ``{"offset_s": [per rank], "error_s": [per rank]}`` (rank 0: 0, 0).
    """
    import torch
    import torch.distributed as dist

    best = torch.zeros(world, 2, dtype=torch.float64)  # offset, error per rank
    for peer in range(1, world):
        if rank not in (0, peer):
            continue
        trips = []
        for _ in range(rounds):
            msg = torch.zeros(1, dtype=torch.float64)
            if rank == 0:
                t1 = now()
                dist.send(msg, peer, group=group)
                dist.recv(msg, peer, group=group)
                t3 = now()
                trips.append((t3 - t1, float(msg) - (t1 + t3) / 2))
            else:
                dist.recv(msg, 0, group=group)
                msg.fill_(now())
                dist.send(msg, 0, group=group)
        if rank == 0:
            trip, offset = min(trips)
            best[peer] = torch.tensor([offset, trip / 2])
    dist.broadcast(best, 0, group=group)
    return {"offset_s": best[:, 0].tolist(), "error_s": best[:, 1].tolist()}
