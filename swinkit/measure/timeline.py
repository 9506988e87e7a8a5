"""One timeline per rank on a clock comparable across ranks: phase boundaries and collectives.

What a rank records per iteration (:class:`IterationRecord`):

* ``marks``: the phase boundaries in order, ``start`` then marks closing phases of
  :data:`swinkit.measure.phases.PHASES` (a phase may recur, e.g. one forward per micro-batch
  under gradient accumulation; its durations add), so phases add up to the iteration;
* ``collectives``: every collective the rank entered, with its ``arrive`` and ``done`` times
  (and for gradient buckets the ``ready`` time the bucket was handed over). ``blocking``
  collectives hold the rank until they finish (DDP's buffer broadcast, SyncBN, the final
  gradient synchronisation); the others run beside compute (earlier gradient buckets).

Marks come from a clock of :mod:`swinkit.measure.clocks` (the host's, CUDA events', or none),
all read as host seconds after the run, so the ranks' timelines can be laid side by side.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from swinkit.measure.clocks import NullClock
from swinkit.measure.phases import PHASES

# A barrier swinkit adds to local steps where DDP would make the ranks meet
# (swinkit.rank.meet): a wait the oracle replays, not work of the phase it fell in.
MEET = "meet"


@dataclass
class Collective:
    """One collective as this rank saw it (marks until :meth:`IterationRecord.resolve`)."""
    name: str
    blocking: bool
    arrive: Any = None
    done: Any = None
    ready: Any = None
    nbytes: int = 0


@dataclass
class IterationRecord:
    """Marks and collectives of one iteration on one rank."""
    marks: list[tuple[str, Any]] = field(default_factory=list)
    collectives: list[Collective] = field(default_factory=list)

    def resolve(self, clock, offset_s: "float | Callable[[float], float]" = 0.0) -> dict:
        """Plain seconds on rank 0's clock (``offset_s``: this rank's clock minus rank 0's, a
        number or a function of this rank's time such as :class:`OffsetLine`)."""
        offset = offset_s if callable(offset_s) else (lambda t: offset_s)
        # every mark read from the iteration's start: a short interval (see CudaClock)
        start = self.marks[0][1] if self.marks else None
        near = (start, clock.seconds(start)) if start is not None else None

        def s(mark):
            if mark is None:
                return None
            t = clock.seconds(mark, near=near if mark is not start else None)
            return t - offset(t)
        return {"marks": [[name, s(m)] for name, m in self.marks],
                "collectives": [{"name": c.name, "blocking": c.blocking, "arrive": s(c.arrive),
                                 "done": s(c.done), "ready": s(c.ready), "bytes": c.nbytes}
                                for c in self.collectives]}


class Timeline:
    """Records one rank's iterations: ``begin`` starts one (closing the previous one's tail as
    ``other``), ``mark`` closes a phase, ``collective`` opens a record that hooks fill in."""

    def __init__(self, clock):
        self.clock = clock
        self.iterations: list[IterationRecord] = []
        self._open = False  # the last iteration's tail still runs (closed by begin or end)

    @property
    def enabled(self) -> bool:
        return not isinstance(self.clock, NullClock)

    @property
    def is_open(self) -> bool:
        """An iteration is being recorded (between ``begin`` and ``end``)."""
        return self._open

    @property
    def current(self) -> IterationRecord:
        return self.iterations[-1]

    def begin(self) -> None:
        mark = self.clock.now()
        if self._open:
            self.current.marks.append(("other", mark))
        self.iterations.append(IterationRecord(marks=[("start", mark)]))
        self._open = True

    def mark(self, phase: str, mark=None) -> None:
        """Close ``phase`` now, or at a mark taken earlier (e.g. by a hook)."""
        self.current.marks.append((phase, self.clock.now() if mark is None else mark))

    def end(self) -> None:
        """Close the last iteration's tail: until the next ``begin``, time belongs to none."""
        if self._open:
            self.current.marks.append(("other", self.clock.now()))
        self._open = False

    def collective(self, name: str, blocking: bool, nbytes: int = 0, **marks) -> Collective:
        record = Collective(name, blocking, nbytes=nbytes, **marks)
        self.current.collectives.append(record)
        return record

    def resolve(self, offset_s: "float | Callable[[float], float]" = 0.0) -> list[dict]:
        self.clock.finish()
        return [it.resolve(self.clock, offset_s) for it in self.iterations]


def phase_intervals(iteration: dict) -> list[tuple[str, float, float]]:
    """(phase, start, end) of a resolved iteration, in order."""
    marks = iteration["marks"]
    return [(name, t0, t1) for (_, t0), (name, t1) in zip(marks, marks[1:])]


def phase_durations(iteration: dict) -> dict[str, float]:
    """{phase: seconds} of a resolved iteration, every phase present (0 if it did not occur)."""
    out = dict.fromkeys(PHASES, 0.0)
    for name, t0, t1 in phase_intervals(iteration):
        out[name] += t1 - t0
    return out


def work_durations(iteration: dict) -> dict[str, float]:
    """:func:`phase_durations` less the :data:`MEET` waits inside each phase: what the rank
    did itself in a local step that met the others.

    >>> it = {"marks": [["start", 0.0], ["data_wait", 1.0], ["forward", 5.0], ["backward", 7.0],
    ...                 ["exposed_comm", 9.0], ["optimizer", 10.0]],
    ...       "collectives": [{"name": "meet", "arrive": 1.0, "done": 3.0},
    ...                       {"name": "meet", "arrive": 7.5, "done": 8.5}]}
    >>> d = work_durations(it); d["forward"], d["exposed_comm"], d["backward"]
    (2.0, 1.0, 2.0)
    """
    out = phase_durations(iteration)
    spans = phase_intervals(iteration)
    for c in iteration["collectives"]:
        if c["name"] != MEET:
            continue
        # the phase the meeting began in; it ends there too (no mark is taken inside it)
        phase = next(name for name, t0, t1 in spans if t0 <= c["arrive"] < t1)
        out[phase] -= c["done"] - c["arrive"]
    return out


def iteration_span(iteration: dict) -> tuple[float, float]:
    marks = iteration["marks"]
    return marks[0][1], marks[-1][1]


# ---------------------------------------------------------------- clocks of several hosts


def chrome_trace(timelines: dict[int, list[dict]], warmup: int = 0) -> dict:
    """One Chrome/Perfetto trace (``chrome://tracing``, ui.perfetto.dev): a process per rank,
    a track of phases and a track of collectives (waits and transfers as separate slices)."""
    events = []
    t0 = min(iteration_span(it)[0] for tl in timelines.values() for it in tl)
    us = lambda s: (s - t0) * 1e6  # noqa: E731
    for rank, iterations in timelines.items():
        events.append({"ph": "M", "name": "process_name", "pid": rank,
                       "args": {"name": f"rank {rank}"}})
        for tid, label in ((0, "phases"), (1, "collectives")):
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid,
                           "args": {"name": label}})
        for i, it in enumerate(iterations):
            for phase, start, end in phase_intervals(it):
                events.append({"ph": "X", "name": phase, "pid": rank, "tid": 0, "ts": us(start),
                               "dur": max(end - start, 0) * 1e6,
                               "args": {"iteration": i - warmup, "warmup": i < warmup}})
            for c in it["collectives"]:
                if c["arrive"] is None or c["done"] is None:
                    continue
                events.append({"ph": "X", "name": c["name"], "pid": rank, "tid": 1,
                               "ts": us(c["arrive"]), "dur": max(c["done"] - c["arrive"], 0) * 1e6,
                               "args": {"bytes": c["bytes"], "blocking": c["blocking"],
                                        **{k: c[k] for k in ("sync_wait_s", "transfer_s") if k in c}}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}
