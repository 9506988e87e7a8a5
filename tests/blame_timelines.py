"""Synthetic DDP timelines of N ranks, built the way a rank records them (phase marks, the
buffer broadcast and the gradient sync as blocking collectives, two buckets in between), with
known delays injected: what ``swinkit validate`` scores, made without launching anything, so
that blame's real code can be run on it with and without a planted defect.

The iteration is shaped like the ``test`` preset's on an idle 2-core host (ms): loading 8,
forward 31 after a 5 ms buffer broadcast, backward 25 (its first bucket ready at 40 % of it,
before a backward delay, which fires half way), each bucket's all-reduce 2, the optimizer 9,
the tail 1; every phase jittered by up to 3 % (a fixed seed), so clean neighbours differ a
little, as on a real host.
"""
from __future__ import annotations

import random

from swinkit.attribution.blame_of_run import blame_figures
from swinkit.injection import Injection

MS = 1e-3
BASE = {"data": 8 * MS, "forward": 31 * MS, "backward": 25 * MS, "optimizer": 9 * MS,
        "other": 1 * MS}
BROADCAST, ALLREDUCE, FINALIZE, FIRST_BUCKET = 5 * MS, 2 * MS, 0.3 * MS, 0.4
IMAGES_PER_RANK = 2


def simulate(world_size: int, injection: Injection, iters: int = 10, warmup: int = 2,
             seed: int = 7) -> list[dict]:
    """Each rank's result as a rank returns it (what ``blame_figures`` reads)."""
    rng = random.Random(seed)
    ends = [0.0] * world_size
    ranks = [{"rank": r, "timeline": [], "iteration": [], "injected": [],
              "clock": {"same_host": True, "error_s": 0.0, "alignment_error_s": 0.0},
              "injected_call_s": _measured(injection.for_rank(r))} for r in range(world_size)]
    for it in range(warmup + iters):
        work = [_work(injection.for_rank(r), it, rng) for r in range(world_size)]
        for r, (marks, collectives) in enumerate(_iteration(ends, work)):
            ranks[r]["timeline"].append({"marks": marks, "collectives": collectives})
            if it >= warmup:
                ranks[r]["iteration"].append(marks[-1][1] - marks[0][1])
                ranks[r]["injected"].append(work[r]["injected"])
            ends[r] = marks[-1][1]
    return ranks


def run_result(spec) -> dict:
    """What ``run_ddp`` returns for a ``DDPRunSpec``, as far as validate's scoring reads it."""
    ranks = simulate(spec.world_size, spec.injection, spec.iters, spec.warmup)
    return {"world_size": spec.world_size, "ranks": ranks,
            **blame_figures(ranks, spec.warmup, spec.injection)}


def _measured(own: Injection) -> dict:
    """What each delay measured per call: here exactly what was asked."""
    return {kind: getattr(own, f"{kind}_ms") * MS for kind in
            ("compute", "backward", "optimizer", "comm") if getattr(own, f"{kind}_ms") > 0}


def _work(own: Injection, it: int, rng: random.Random) -> dict:
    """One rank's phases in one iteration (seconds), its delays added where injected."""
    phase = {k: v * (1 + rng.uniform(-0.03, 0.03)) for k, v in BASE.items()}
    on = own.active and own.on_iteration(it)
    if on:
        phase["data"] += own.data_ms * MS * IMAGES_PER_RANK
        phase["forward"] += own.compute_ms * MS
        phase["optimizer"] += own.optimizer_ms * MS
    return {**phase, "late_backward": own.backward_ms * MS if on else 0.0,
            "comm_delay": own.comm_ms * MS if on else 0.0, "injected": on}


def _iteration(starts: list[float], work: list[dict]):
    """Every rank's marks and collectives of one iteration, the ranks meeting at the buffer
    broadcast and at the gradient sync as DDP makes them meet."""
    loaded = [s + w["data"] for s, w in zip(starts, work)]
    broadcast_done = max(loaded) + BROADCAST
    fwd_end = [broadcast_done + w["forward"] for w in work]
    ready0 = [f + FIRST_BUCKET * w["backward"] for f, w in zip(fwd_end, work)]
    bwd_end = [f + w["backward"] + w["late_backward"] for f, w in zip(fwd_end, work)]
    launch0 = [r + w["comm_delay"] for r, w in zip(ready0, work)]
    launch1 = [b + w["comm_delay"] for b, w in zip(bwd_end, work)]
    done0 = max(launch0) + ALLREDUCE
    done1 = max(max(launch1), done0) + ALLREDUCE
    synced = done1 + FINALIZE
    for r, w in enumerate(work):
        opt_end = synced + w["optimizer"]
        marks = [["start", starts[r]], ["data_wait", loaded[r]], ["forward", fwd_end[r]],
                 ["backward", bwd_end[r]], ["exposed_comm", synced], ["optimizer", opt_end],
                 ["other", opt_end + w["other"]]]
        collectives = [
            {"name": "buffers", "blocking": True, "arrive": loaded[r], "done": broadcast_done,
             "ready": None},
            {"name": "bucket0", "blocking": False, "ready": ready0[r], "arrive": launch0[r],
             "done": done0},
            {"name": "bucket1", "blocking": False, "ready": bwd_end[r], "arrive": launch1[r],
             "done": done1},
            {"name": "grad_sync", "blocking": True, "ready": bwd_end[r], "arrive": launch1[r],
             "done": synced}]
        yield marks, collectives
