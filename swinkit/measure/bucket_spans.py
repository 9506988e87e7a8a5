"""How long each gradient bucket's all-reduce took in the run itself, read from the ranks'
timelines: from the moment the last rank had the bucket ready (the earliest it can finish
anywhere) to the moment the last rank saw it done, and how much of that lay beside backward
(before the last rank's backward reached its end).

The oracle replays each bucket with its duration timed alone at N. Beside backward the two
share the host (gloo's threads and the backward on the same cores) or the device (NCCL's
kernels and the backward's), and the all-reduce can take several times as long as alone; a
replay that keeps the isolated duration is then short. Read beside the timed durations this
shows by how much, in the run being predicted, with no model of the contention in between.
"""
from __future__ import annotations

import statistics

BUCKET_PREFIX = "bucket"  # the name :mod:`swinkit.measure.ddp_hooks` records buckets under


def bucket_spans(timelines: dict[int, list[dict]], warmup: int) -> dict[str, dict]:
    """Per bucket name, over the measured iterations (after ``warmup``) in which every rank
    launched it: the median ``span_s`` (last rank ready -> last rank done) and the median
    ``beside_backward_s`` (the part of the span before the last rank's backward ended),
    with ``iterations``, how many were read. Timelines resolved onto one clock
    (:meth:`~swinkit.measure.timeline.Timeline.resolve`).

    Two ranks, one iteration, bucket0 ready at 10 and 12, done at 19 and 20, backwards ending
    at 15 and 16: the span is 20 - 12 = 8, of it 16 - 12 = 4 beside backward.

    >>> def it(ready, done, bwd):
    ...     return {"marks": [["start", 0.0], ["forward", 5.0], ["backward", bwd]],
    ...             "collectives": [{"name": "bucket0", "ready": ready, "done": done}]}
    >>> bucket_spans({0: [it(10.0, 19.0, 15.0)], 1: [it(12.0, 20.0, 16.0)]}, warmup=0)
    {'bucket0': {'span_s': 8.0, 'beside_backward_s': 4.0, 'iterations': 1}}
    """
    per_rank = list(timelines.values())
    if not per_rank:
        return {}
    spans: dict[str, list[tuple[float, float]]] = {}
    for n in range(warmup, min(len(t) for t in per_rank)):
        its = [t[n] for t in per_rank]
        records = [{c["name"]: c for c in it["collectives"]
                    if c["name"].startswith(BUCKET_PREFIX)} for it in its]
        backward_end = max(_backward_end(it) for it in its)
        for name in set.intersection(*(set(r) for r in records)):
            cs = [r[name] for r in records]
            if any(c.get("ready") is None or c.get("done") is None for c in cs):
                continue
            start, end = max(c["ready"] for c in cs), max(c["done"] for c in cs)
            spans.setdefault(name, []).append(
                (end - start, max(0.0, min(end, backward_end) - start)))
    return {name: {"span_s": statistics.median(s for s, _ in v),
                   "beside_backward_s": statistics.median(b for _, b in v),
                   "iterations": len(v)}
            for name, v in sorted(spans.items(), key=lambda kv: _index(kv[0]))}


def _backward_end(iteration: dict) -> float:
    """When this rank's backward phase ended (its last ``backward`` mark)."""
    return max(t for name, t in iteration["marks"] if name == "backward")


def _index(name: str) -> int:
    """bucket2 -> 2, so that bucket10 sorts after bucket9."""
    return int(name[len(BUCKET_PREFIX):] or 0)
