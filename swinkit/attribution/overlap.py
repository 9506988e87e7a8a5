"""Backward and the gradient all-reduces overlapping, with the contention between them.

DDP launches bucket j's all-reduce when every rank has it ready, while the ranks still compute
the rest of backward. If the two used separate resources, the overlap would be free, and the
iteration would be compute plus whatever communication sticks out past it. They do not: on a
CPU, gloo's threads reduce and copy on the same cores as the backward pass; on a GPU, NCCL's
kernels take SMs and memory bandwidth from the backward kernels. So while both run, each runs
slower.

This is a fluid model of that overlap, the way network simulators treat shared links: each
rank's backward is an amount of work (seconds when alone), each bucket's all-reduce another
(its isolated time); while an all-reduce is in flight every computing rank progresses at
``compute_rate`` seconds of work per second, and while any rank computes the all-reduce
progresses at ``comm_rate``; otherwise at 1. Both rates are measured, not fitted: the
component run times backward with all-reduces running beside it, and all-reduces with
backward running beside them (:mod:`swinkit.rank.components`). With both rates 1 the
model is the contention-free replay: a bucket starts when the last rank has it ready and the
previous one is done, and takes its isolated time.

Numbers only: no torch, no processes.
"""
from __future__ import annotations

_EPS = 1e-12


def overlap_backward(start: dict, backward: dict, ready: dict, delay: dict, comm: list[float],
                     comm_free: float, compute_rate: float = 1.0,
                     comm_rate: float = 1.0) -> tuple[dict, float]:
    """Run one synchronising backward on every rank with its buckets' all-reduces.

    ``start[r]``: when rank r's backward begins; ``backward[r]``: its seconds alone;
    ``ready[r][j]``: seconds of its backward after which bucket j is ready (clipped to the
    backward; missing buckets are ready at its end); ``delay[r]``: seconds after it is ready
    that rank r launches a bucket (an injection); ``comm[j]``: bucket j's isolated all-reduce;
    ``comm_free``: when the previous collective ends. Returns (when each rank's backward
    returns: its compute and the last all-reduce both done, the time the last all-reduce ends).
    """
    for name, rate in (("compute_rate", compute_rate), ("comm_rate", comm_rate)):
        if not 0 < rate <= 1:
            raise ValueError(f"{name} must be in (0, 1], got {rate!r}")
    ranks = list(start)
    marks = {r: sorted({min(_ready(ready[r], j, backward[r]), backward[r])
                        for j in range(len(comm))} | {backward[r]}) for r in ranks}
    done = dict.fromkeys(ranks, 0.0)       # seconds of backward work done
    finished: dict = {}                     # rank -> when its compute ended
    reached: dict = {r: {} for r in ranks}  # rank -> {bucket: when it became ready}
    t = min(start.values())
    bucket, left = 0, None                  # the next bucket; work left of the one in flight
    while len(finished) < len(ranks) or bucket < len(comm):
        for r in ranks:  # a rank with no backward left is done the moment it starts
            if r not in finished and start[r] <= t + _EPS and done[r] >= backward[r] - _EPS:
                finished[r] = max(t, start[r])
        computing = [r for r in ranks if r not in finished and start[r] <= t + _EPS]
        c_rate = compute_rate if left is not None else 1.0
        m_rate = comm_rate if computing else 1.0
        _mark_ready(reached, done, ready, backward, start, len(comm), t)
        if left is None and bucket < len(comm) and len(
                [r for r in ranks if bucket in reached[r]]) == len(ranks):
            launch = max(max(reached[r][bucket] + delay[r] for r in ranks), comm_free)
            if launch <= t + _EPS:
                left = comm[bucket]
                continue
        events = [start[r] for r in ranks if start[r] > t + _EPS]
        events += [t + (_next(marks[r], done[r]) - done[r]) / c_rate for r in computing]
        if left is not None:
            events.append(t + left / m_rate)
        elif bucket < len(comm) and all(bucket in reached[r] for r in ranks):
            events.append(max(max(reached[r][bucket] + delay[r] for r in ranks), comm_free))
        if not events:  # the last rank's compute ended after every all-reduce: nothing left
            continue
        step = min(events) - t
        for r in computing:
            done[r] = min(done[r] + step * c_rate, backward[r])
        t += step
        if left is not None:
            left -= step * m_rate
            if left <= _EPS:
                left, bucket, comm_free = None, bucket + 1, t
    ends = {r: max(finished[r], comm_free) for r in ranks}
    return ends, comm_free


def _ready(ready: list[float], j: int, backward: float) -> float:
    return ready[j] if j < len(ready) else backward


def _next(marks: list[float], done: float) -> float:
    """The next point of this rank's backward where something happens (a bucket ready, the end)."""
    return next(m for m in marks if m > done + _EPS)


def _mark_ready(reached, done, ready, backward, start, n_buckets, t) -> None:
    """Note the time each rank's bucket became ready (its backward got that far)."""
    for r in start:
        if start[r] > t + _EPS:
            continue
        for j in range(n_buckets):
            if j not in reached[r] and done[r] >= min(_ready(ready[r], j, backward[r]),
                                                        backward[r]) - _EPS:
                reached[r][j] = t
