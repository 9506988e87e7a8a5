"""Blame: each wait charged to the rank and phase that caused it, from the ranks' timelines.

Input: every rank's resolved timeline (see :mod:`swinkit.measure.timeline`), all on rank 0's
clock. A blocking collective (DDP's buffer broadcast, SyncBN, the final gradient sync) holds a
rank from its arrival ``a_r`` until it is done ``d_r``. With ``L = max_r a_r`` (the last rank's
arrival):

    sync_wait_r = clip(min(d_r, L) - a_r, 0, d_r - a_r)      waiting for the last rank
    transfer_r  = (d_r - a_r) - sync_wait_r                   moving data

A wait is charged to the late rank ``l`` (the one that arrived at L): between the previous
blocking collective and this one, the late rank spent ``work_l[p]`` in each phase p and the
waiting rank ``work_r[p]``; the wait goes to the phases in which the late rank spent more, in
proportion to its excess ``max(0, work_l[p] - work_r[p])``. When those excesses add up to less
than the wait (say the previous collective ended at different times on the two ranks), the
rest is ``unattributed``: shown, never folded into a phase. A launch delayed past the bucket's
ready time counts as ``exposed_comm`` work of the late rank (its link made it late).

Per rank and iteration, blame re-reads the phases so they still add up to the iteration:

    blame[p]            = own time in phase p outside blocking collectives + waits charged to p
    blame[exposed_comm] += transfers of blocking collectives (not hidden under compute)
    blame[unattributed] = waits that could not be traced
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from swinkit.measure.phases import BLAME_KEYS, PHASES, UNATTRIBUTED
from swinkit.measure.timeline import phase_durations

RESOLUTION_S = 1e-6  # differences below a microsecond are clock rounding, not causes


@dataclass
class _Sync:
    """One blocking collective on one rank, placed in its rank's sequence."""
    iteration: int
    name: str
    arrive: float
    done: float
    phase: str


@dataclass
class BlameResult:
    """Per rank, per measured iteration: blame, sync_wait and transfer by phase; waits caused."""
    blame: dict[int, list[dict]] = field(default_factory=dict)
    sync_wait: dict[int, list[dict]] = field(default_factory=dict)
    transfer: dict[int, list[dict]] = field(default_factory=dict)
    wait_caused: dict[tuple[int, str], float] = field(default_factory=lambda: defaultdict(float))
    measured_iterations: int = 0
    problems: list[str] = field(default_factory=list)


def _intervals(timeline: list[dict]) -> list[tuple[int, str, float, float]]:
    """(iteration, phase, start, end) of every phase of every iteration of one rank."""
    out = []
    for i, it in enumerate(timeline):
        marks = it["marks"]
        out += [(i, name, t0, t1) for (_, t0), (name, t1) in zip(marks, marks[1:])]
    return out


def _phase_at(intervals, t: float) -> str:
    for _, name, t0, t1 in intervals:
        if t0 <= t <= t1:
            return name
    return "other"


def _syncs(timeline: list[dict], intervals) -> list[_Sync]:
    out = []
    for i, it in enumerate(timeline):
        for c in it["collectives"]:
            if c["blocking"] and c["arrive"] is not None and c["done"] is not None:
                mid = (c["arrive"] + c["done"]) / 2
                out.append(_Sync(i, c["name"], c["arrive"], c["done"], _phase_at(intervals, mid)))
    return out


def _work(intervals, start: float, end: float) -> dict[str, float]:
    """Seconds per phase of one rank inside (start, end]."""
    work = dict.fromkeys(PHASES, 0.0)
    for _, name, t0, t1 in intervals:
        overlap = min(t1, end) - max(t0, start)
        if overlap > 0:
            work[name] += overlap
    return work


def split_wait(arrive: float, done: float, last_arrival: float) -> tuple[float, float]:
    """(sync_wait, transfer) of one rank's collective: waiting for the last rank's arrival,
    capped at the rank's own span (a root may finish before the last rank arrives), and the rest.

    >>> split_wait(0.0, 0.10, 0.08)
    (0.08, 0.020000000000000004)
    """
    span = max(done - arrive, 0.0)
    wait = min(max(min(done, last_arrival) - arrive, 0.0), span)
    return wait, span - wait


def charge_wait(wait: float, late: dict[str, float], waiting: dict[str, float],
                resolution_s: float = RESOLUTION_S) -> tuple[dict, float]:
    """Split ``wait`` over the phases in which the late rank worked longer than the waiting one.

    Returns ({phase: seconds charged}, seconds unattributed); they add up to ``wait``.

    >>> charge_wait(0.08, {"data_wait": 0.10, "forward": 0.2}, {"data_wait": 0.02, "forward": 0.2})
    ({'data_wait': 0.08}, 0.0)
    """
    excess = {p: late[p] - waiting[p] for p in late if late[p] - waiting[p] > resolution_s}
    total = sum(excess.values())
    if total <= 0:
        return {}, wait
    scale = min(1.0, wait / total)
    charged = {p: e * scale for p, e in excess.items()}
    return charged, max(wait - total, 0.0)


def compute_blame(timelines: dict[int, list[dict]], warmup: int = 0,
                  resolution_s: float = RESOLUTION_S) -> BlameResult:
    """Blame for every rank and every iteration at or after ``warmup`` (see the module doc).

    ``resolution_s``: differences the ranks' clocks cannot tell apart (at least
    :data:`RESOLUTION_S`; on GPU the event-to-host mapping's error, across hosts the offsets'):
    a wait or an excess below it is not read as a cause (:func:`resolution`)."""
    ranks = sorted(timelines)
    intervals = {r: _intervals(timelines[r]) for r in ranks}
    syncs = {r: _syncs(timelines[r], intervals[r]) for r in ranks}
    n_iter = min(len(timelines[r]) for r in ranks)
    out = BlameResult(measured_iterations=max(n_iter - warmup, 0))
    per_iter = {r: [_start_row(timelines[r][i]) for i in range(n_iter)] for r in ranks}
    counts = {len(s) for s in syncs.values()}
    if len(counts) != 1:
        out.problems.append(f"ranks entered different numbers of blocking collectives "
                            f"({ {r: len(syncs[r]) for r in ranks} }): waits left in their phases")
    else:
        for k in range(counts.pop()):
            _blame_one(k, ranks, syncs, intervals, timelines, per_iter, out, warmup,
                       max(resolution_s, RESOLUTION_S))
    for r in ranks:
        rows = per_iter[r][warmup:n_iter]
        out.blame[r] = [row["blame"] for row in rows]
        out.sync_wait[r] = [row["sync_wait"] for row in rows]
        out.transfer[r] = [row["transfer"] for row in rows]
    return out


def _start_row(iteration: dict) -> dict:
    """Blame starts as the rank's phases; collectives then move their waits to causes."""
    blame = {**phase_durations(iteration), UNATTRIBUTED: 0.0}
    return {"blame": blame, "sync_wait": dict.fromkeys(PHASES, 0.0),
            "transfer": dict.fromkeys(PHASES, 0.0)}


def _blame_one(k, ranks, syncs, intervals, timelines, per_iter, out: BlameResult, warmup,
               resolution_s: float = RESOLUTION_S) -> None:
    """The k-th blocking collective of the run, on every rank."""
    here = {r: syncs[r][k] for r in ranks}
    last = max(ranks, key=lambda r: here[r].arrive)
    arrival = here[last].arrive
    for r in ranks:
        s = here[r]
        wait, transfer = split_wait(s.arrive, s.done, arrival)
        row = per_iter[r][s.iteration]
        row["sync_wait"][s.phase] += wait
        row["transfer"][s.phase] += transfer
        row["blame"][s.phase] -= wait + transfer
        row["blame"]["exposed_comm"] += transfer
        if wait <= resolution_s:  # kept in the sum, but no cause is read into clock error
            row["blame"][UNATTRIBUTED] += wait
            continue
        prev_r = syncs[r][k - 1].done if k else timelines[r][0]["marks"][0][1]
        prev_l = syncs[last][k - 1].done if k else timelines[last][0]["marks"][0][1]
        charged, unattributed = charge_wait(wait, _work(intervals[last], prev_l, here[last].arrive),
                                            _work(intervals[r], prev_r, s.arrive), resolution_s)
        for phase, seconds in charged.items():
            row["blame"][phase] += seconds
            if s.iteration >= warmup:
                out.wait_caused[(last, phase)] += seconds
        row["blame"][UNATTRIBUTED] += unattributed


def addup_error(blame: dict[int, list[dict]], iterations: dict[int, list[float]]) -> float:
    """The largest gap, over ranks and measured iterations, between a rank's blame row and its
    iteration time: blame moves seconds between keys and never makes or loses any, so each row
    adds up to its iteration (a wait counted twice would not).

    >>> addup_error({0: [{"forward": 0.25, "backward": 0.5}]}, {0: [0.5]})
    0.25
    """
    return max((abs(sum(row.values()) - t) for r, rows in blame.items()
                for row, t in zip(rows, iterations[r])), default=0.0)


def resolution(clocks: list[dict]) -> float:
    """Blame's resolution for ranks whose clocks are these results' ``clock`` entries: a
    difference between two ranks' times may be off by both ranks' errors, so the two widest
    GPU event-to-host mapping errors added, plus across hosts the two widest offset errors
    (one host's ranks share the clock: its offset estimate is only a check).

    >>> resolution([{"same_host": True, "error_s": 4e-5, "alignment_error_s": 2e-5},
    ...             {"same_host": True, "error_s": 3e-5, "alignment_error_s": 5e-6}])
    2.5e-05
    """
    def two_widest(key):
        return sum(sorted((c.get(key) or 0.0) for c in clocks)[-2:])
    offsets = 0.0 if all(c.get("same_host", True) for c in clocks) else two_widest("error_s")
    return max(RESOLUTION_S, two_widest("alignment_error_s") + offsets)


def summarize_blame(result: BlameResult) -> dict:
    """JSON-ready figures: medians per rank, median across ranks, means, and the straggler."""
    def med(rows, key):
        return statistics.median(row[key] for row in rows) if rows else 0.0

    per_rank = {r: {k: med(rows, k) for k in BLAME_KEYS} for r, rows in result.blame.items()}
    mean_rank = {r: {k: statistics.fmean(row[k] for row in rows) if rows else 0.0 for k in BLAME_KEYS}
                 for r, rows in result.blame.items()}
    n = max(result.measured_iterations, 1)
    caused: dict[int, dict[str, float]] = defaultdict(dict)
    for (rank, phase), seconds in result.wait_caused.items():
        caused[rank][phase] = seconds / n
    return {
        "blame_s": {k: statistics.median(v[k] for v in per_rank.values()) for k in BLAME_KEYS},
        "blame_mean_s": {k: statistics.fmean(v[k] for v in mean_rank.values()) for k in BLAME_KEYS},
        "per_rank_blame_s": {str(r): v for r, v in per_rank.items()},
        "sync_wait_s": {str(r): {p: med(rows, p) for p in PHASES} for r, rows in result.sync_wait.items()},
        "transfer_s": {str(r): {p: med(rows, p) for p in PHASES} for r, rows in result.transfer.items()},
        "wait_caused_s": {str(r): v for r, v in caused.items()},
        "straggler": straggler(caused),
        "blame_problems": result.problems,
    }


def straggler(caused: dict[int, dict[str, float]]) -> dict:
    """The rank that made the others wait most (seconds per iteration), and the phase that made
    it late; ``rank`` None when nobody made anybody wait."""
    if not caused:
        return {"rank": None, "phase": None, "wait_caused_s": 0.0}
    rank = max(caused, key=lambda r: sum(caused[r].values()))
    phase = max(caused[rank], key=caused[rank].get)
    return {"rank": rank, "phase": phase, "wait_caused_s": sum(caused[rank].values()),
            "by_phase": dict(caused[rank])}


def annotate(timelines: dict[int, list[dict]]) -> None:
    """Write ``sync_wait_s`` / ``transfer_s`` into each blocking collective (for the trace)."""
    ranks = sorted(timelines)
    flat = {r: [c for it in timelines[r] for c in it["collectives"]
                if c["blocking"] and c["arrive"] is not None and c["done"] is not None] for r in ranks}
    if len({len(v) for v in flat.values()}) != 1:
        return
    for k in range(len(flat[ranks[0]])):
        arrival = max(flat[r][k]["arrive"] for r in ranks)
        for r in ranks:
            c = flat[r][k]
            c["sync_wait_s"], c["transfer_s"] = split_wait(c["arrive"], c["done"], arrival)
