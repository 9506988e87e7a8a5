"""The iteration replayed rank by rank from components measured in the run's own launch, as
DDP would interleave them (the report prefers this to :mod:`~swinkit.attribution.prediction`).

The components come from :mod:`swinkit.rank.components`: each rank's training loop with
nothing communicated (phases, and when each gradient bucket became ready), and the collectives
timed on their own, all measured under the co-location of the run predicted. This module
replays one optimizer step after another on every rank, the way DDP synchronises them, in the
manner of trace-driven simulators (Zhu et al., "Daydream: Accurately Estimating the Efficacy
of Optimizations for DNN Training"; Hu et al., "dPRO: A Generic Performance Diagnosis and
Optimization Toolkit for Expediting Distributed DNN Training"):

* the buffer broadcast before each optimizer step's first forward is a barrier: it starts when
  the last rank arrives and adds what N ranks add to the broadcast the local steps already ran
  over one;
* bucket j's all-reduce starts when every rank has it ready (plus any injected launch delay
  on that rank) and the previous collective is done (one collective at a time, in order, as
  gloo and NCCL run DDP's buckets); it takes its isolated time, except that while it overlaps
  backward the two slow each other at the rates the component run measured
  (``costs["contention"]``; :mod:`swinkit.attribution.overlap`);
* a rank's backward returns when its own compute and the last bucket are both done, then
  DDP's finalisation (measured locally) and the optimizer run;
* with gradient accumulation only the last micro-batch of a step synchronises gradients.

The local steps met the other ranks at the same two points (the buffer sync, the end of a
synchronising backward), so that their compute contended as DDP's does; their waits there are
left out of the costs, and the replay puts back the waits of the run it predicts.

Each rank's measured iterations are replayed in order, the i-th of every rank side by side
(they ran at the same time, co-located), so a rank late in one iteration makes the others wait
in that one; the predicted iteration is the median period of the replayed steps after the
first, per micro-batch. Without samples the ranks' medians are replayed. Accuracy is
Kahira et al.'s ("An Oracle for Guiding Large-Scale Model/Hybrid Parallel Training of
Convolutional Neural Networks"): 100 % x (1 - |predicted - measured| / measured).

Numbers only: no torch, no processes.
"""
from __future__ import annotations

import statistics

from swinkit.attribution.overlap import overlap_backward
from swinkit.measure.phases import PHASES

STEPS = 6  # replayed optimizer steps; the period is read from the last two (steady state)


def simulate(costs: dict, launch_delay_s: dict[int, float] | None = None) -> dict:
    """Replay ``costs`` (see :func:`swinkit.runs.component_costs.costs`); ``launch_delay_s``:
    per rank, seconds each bucket's all-reduce is launched after it is ready (an injection).

    Returns ``predicted_iter_s`` (per micro-batch), ``predicted_step_s`` and
    ``components_s``: the local phases (median over ranks) and ``sync_s``, what synchronising
    the ranks adds on top of them (waits for the slowest rank, exposed communication)."""
    ranks = costs["ranks"]
    k = costs["grad_accum"]
    comm = costs["bucket_comm_s"]
    broadcast = costs["broadcast_s"]
    delay = {r["rank"]: (launch_delay_s or {}).get(r["rank"], 0.0) for r in ranks}
    rates = {name: (costs.get("contention") or {}).get(name, 1.0)
             for name in ("compute_rate", "comm_rate")}
    # SyncBN's collectives (GPU presets at N > 1): the local steps ran it as plain batch norm.
    # Its forward all-gathers sit in the decode heads, at the end of forward: one barrier
    # there, then their time; its backward all-reduces come early in backward, right after
    # that barrier, so they add their time to backward with no wait of their own.
    sync_bn = costs.get("sync_bn_s") or {"forward": 0.0, "backward": 0.0}
    t = {r["rank"]: 0.0 for r in ranks}
    comm_free = 0.0
    step_ends = [0.0]
    n_samples = min((len(pos.get("samples") or []) for r in ranks for pos in r["positions"]),
                    default=0)
    for step in range(n_samples or STEPS):
        for p in range(k):
            # the ranks' step-th measured iterations side by side (their medians without them)
            this = {r["rank"]: (r["positions"][p]["samples"][step] if n_samples
                                else r["positions"][p]) for r in ranks}
            ph = {rank: v["phases_s"] for rank, v in this.items()}
            ready = {rank: v["bucket_ready_s"] for rank, v in this.items()}
            for r in t:
                t[r] += ph[r]["data_wait"]
            # DDP syncs buffers in a forward after one that synchronised gradients: with
            # accumulation only the first micro-batch's (no_sync forwards clear DDP's flag)
            if p == 0 and costs.get("buffer_sync", broadcast > 0):
                comm_free = max(max(t.values()), comm_free) + broadcast
                t = dict.fromkeys(t, comm_free)
            forward_end = {r: t[r] + ph[r]["forward"] for r in t}
            if sync_bn["forward"] > 0:  # SyncBN's gathers hold every rank (in the heads)
                forward_end = dict.fromkeys(t, max(forward_end.values()) + sync_bn["forward"])
            backward = {r: ph[r]["backward"] + sync_bn["backward"] for r in t}
            if p == k - 1 and comm:  # the synchronising micro-batch
                t, comm_free = overlap_backward(forward_end, backward, ready, delay, comm,
                                                comm_free, **rates)
            else:
                t = {r: forward_end[r] + backward[r] for r in t}
            for r in t:
                t[r] += ph[r]["exposed_comm"] + ph[r]["optimizer"] + ph[r]["other"]
        step_ends.append(max(t.values()))
    periods = [b - a for a, b in zip(step_ends, step_ends[1:])]
    # the first step starts from an idle pipeline: steady state is every step after it
    step = statistics.median(periods[1:] if len(periods) > 1 else periods)
    local = {name: statistics.median(statistics.fmean(r["positions"][p]["phases_s"][name]
                                                      for p in range(k)) for r in ranks)
             for name in PHASES}
    per_batch = step / k
    return {"predicted_iter_s": per_batch, "predicted_step_s": step,
            "components_s": {**local, "sync_s": per_batch - sum(local.values())}}


def accuracy(predicted: float, measured: float) -> dict:
    """Signed relative error and Kahira et al.'s accuracy, in percent."""
    error = (predicted - measured) / measured
    return {"prediction_error": error, "accuracy_pct": 100 * (1 - abs(error))}


def rank_correlation(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation (average ranks for ties); None for fewer than 2 pairs or
    a constant side."""
    if len(xs) != len(ys) or len(xs) < 2:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    return cov / (vx * vy) ** 0.5 if vx and vy else None


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for m in range(i, j + 1):
            ranks[order[m]] = (i + j) / 2 + 1
        i = j + 1
    return ranks
