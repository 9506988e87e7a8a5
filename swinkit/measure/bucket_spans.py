"""How long each gradient bucket's all-reduce took in the run itself, read from the ranks'
timelines: from the moment it could start (the last rank had the bucket ready, and the bucket
before it on the group was done everywhere) to the moment the last rank saw it done, and how
much of that lay beside backward (before the last rank's backward reached its end).

The oracle replays each bucket with its duration timed alone, starting as this does. Beside
backward the two share the host (gloo's threads and the backward on the same cores) or the
device (NCCL's kernels and the backward's), and on a 2-core host the first bucket of `test`
took 1.5 to 3 times its time alone; a replay that keeps the isolated duration is then short.
Read beside the timed durations this shows by how much, in the run being predicted, with no
model of the contention in between.
"""
from __future__ import annotations

import statistics

BUCKET_PREFIX = "bucket"  # the name :mod:`swinkit.measure.ddp_hooks` records buckets under


def bucket_spans(timelines: dict[int, list[dict]], warmup: int) -> dict[str, dict]:
    """Per bucket name, over the measured iterations (after ``warmup``) in which every rank
    launched it: the median ``span_s`` (from the last rank's ready, or the end of the bucket
    launched before it where that is later: the group runs them one after another, to the
    last rank's done) and the median ``beside_backward_s`` (the part of the span before the
    last rank's backward ended), with ``iterations``, how many were read. Timelines resolved
    onto one clock (:meth:`~swinkit.measure.timeline.Timeline.resolve`).

    Two ranks, one iteration, bucket0 ready at 10 and 12, done at 19 and 20, backwards ending
    at 15 and 16: the span is 20 - 12 = 8, of it 16 - 12 = 4 beside backward. bucket1, ready
    at 14 everywhere, waits for bucket0 until 20 and is done at 22: 2, none beside.

    >>> def it(ready, done, bwd):
    ...     return {"marks": [["start", 0.0], ["forward", 5.0], ["backward", bwd]],
    ...             "collectives": [{"name": "bucket0", "ready": ready, "done": done},
    ...                             {"name": "bucket1", "ready": 14.0, "done": 22.0}]}
    >>> spans = bucket_spans({0: [it(10.0, 19.0, 15.0)], 1: [it(12.0, 20.0, 16.0)]}, warmup=0)
    >>> spans["bucket0"], spans["bucket1"]["span_s"], spans["bucket1"]["beside_backward_s"]
    ({'span_s': 8.0, 'beside_backward_s': 4.0, 'iterations': 1}, 2.0, 0.0)
    """
    per_rank = list(timelines.values())
    if not per_rank:
        return {}
    spans: dict[str, list[tuple[float, float]]] = {}
    for n in range(warmup, min(len(t) for t in per_rank)):
        its = [t[n] for t in per_rank]
        records = [{c["name"]: c for c in it["collectives"]
                    if c["name"].startswith(BUCKET_PREFIX)} for it in its]
        ends = [_backward_end(it) for it in its]
        if None in ends:  # not a backward of every rank (nothing of DDP's to read)
            continue
        common = [[r[name] for r in records] for name in set.intersection(*map(set, records))]
        common = [cs for cs in common
                  if all(c.get("ready") is not None and c.get("done") is not None for c in cs)]
        previous_done = float("-inf")
        for cs in sorted(common, key=lambda cs: max(c["ready"] for c in cs)):  # launch order
            start = max(max(c["ready"] for c in cs), previous_done)
            end = previous_done = max(c["done"] for c in cs)
            spans.setdefault(cs[0]["name"], []).append(
                (end - start, max(0.0, min(end, max(ends)) - start)))
    return {name: {"span_s": statistics.median(s for s, _ in v),
                   "beside_backward_s": statistics.median(b for _, b in v),
                   "iterations": len(v)}
            for name, v in sorted(spans.items(), key=lambda kv: bucket_index(kv[0]))}


def _backward_end(iteration: dict) -> float | None:
    """When this rank's backward phase ended (its last ``backward`` mark); None without one."""
    return max((t for name, t in iteration["marks"] if name == "backward"), default=None)


def bucket_index(name: str) -> int:
    """bucket2 -> 2, so that bucket10 sorts after bucket9."""
    return int(name[len(BUCKET_PREFIX):] or 0)
