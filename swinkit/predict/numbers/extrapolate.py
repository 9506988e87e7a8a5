"""The iteration at a world size nobody has run, from a run at a smaller one (held out).

The oracle (:mod:`swinkit.attribution.oracle`) replays a run from components measured inside
that run's own launch at that N: a strong check of the decomposition, and no answer to "what
will N' give me". Here the run at the largest measured size N0 supplies what does not depend
on N', and what does is either measured cheaply at N' without the model or modelled:

* **per-rank compute**: the median rank's local phases (and bucket ready times) of the run at
  N0, each of N' ranks given that same profile;
* **shared host cores**: each rank keeps ``threads_per_rank`` cores busy, and each loader
  worker the share of an iteration it spends loading; while N' ranks need more cores than the
  host has, every compute phase slows by the overcommit (a fluid share of the cores), relative
  to the overcommit at N0 (:func:`core_slowdown`);
* **loading**: where a rank loads itself (no workers) and N0 = 1, the run's own data wait
  times how much N' loaders at once slow one (:func:`loading_ratio`); otherwise the supply
  with N' loaders at once, measured at N' (only the excess of a batch's loading over compute
  stalls when loader workers prefetch);
* **communication**: the model's bucket all-reduces and its buffer broadcast timed at N' (or,
  where nothing can be timed, the ring model of :mod:`swinkit.predict.numbers.links`); the replay
  overlaps them with backward as DDP does, with the contention rates of the largest measured
  size above one (none, rate 1, where only one rank was run);
* **waiting for the slowest rank**: each step waits for the slowest of N' ranks. The
  per-rank, per-iteration local work samples of the run at N0 are independent draws; the
  measured iteration is a median, so the prediction adds the median of the maximum of N'
  draws less the median of one: its 0.5^(1/N') quantile, as P(max <= x) = F(x)^N'
  (:mod:`~swinkit.predict.numbers.order_statistics`; the mean is reported beside it). The wait
  timed at N' with equal work on every rank (``iteration_wait_s``, in the model's rhythm
  between meetings; else ``sync_wait_s`` per sync point) replaces it where larger, and stands
  alone where the ranks' threads outnumber the cores (time-sliced ranks are not independent
  draws).

Everything this returns is a prediction and carries its assumptions (``assumptions``).
Numbers only: no torch, no processes.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from swinkit.attribution.oracle import simulate
from swinkit.predict.numbers.assumptions import assumptions
from swinkit.predict.numbers.order_statistics import expected_max, median_max
from swinkit.predict.numbers.rank_profiles import rank_profiles, rank_samples

COMPUTE_PHASES = ("forward", "backward", "exposed_comm", "optimizer", "other")


@dataclass
class Host:
    """What N' ranks share on one host: its cores, and what each rank keeps busy."""
    cores: int
    threads_per_rank: int = 1
    loader_workers: int = 0
    images_per_rank: int = 1


@dataclass
class Target:
    """What was measured (or stated) at the target size N', without the model."""
    world_size: int
    bucket_comm_s: list[float]
    broadcast_s: float = 0.0
    supply_images_per_s: float | None = None  # per rank, N' loaders at once
    # rank 0's loader alone (the others idle) over its rate with N' at once, timed at N'
    loader_slowdown: float | None = None
    data_wait_s: float | None = None  # stated: each iteration's data wait at N' (not the supply's)
    source: str = "timed at N'"
    notes: list[str] = field(default_factory=list)
    ranks_per_node: int | None = None  # sharing one host's cores (default: every rank)
    # a rank's wait at one sync point for the slowest of N' ranks doing equal fixed work,
    # timed at N' (the host's time-sharing); None: not timed
    sync_wait_s: float | None = None
    # what a rank loses per optimizer step waiting for the slowest when every rank works in
    # the model's rhythm (its segments between meetings) without the model; None: not timed
    iteration_wait_s: float | None = None
    # backward vs all-reduce contention rates timed at N' with a stand-in for backward
    contention: dict = field(default_factory=dict)
    # how much slower a stand-in for the model's compute ran with N' ranks at once than alone
    # (shared cores, caches, memory bandwidth), timed at N'; None: not timed
    compute_slowdown: float | None = None


def core_slowdown(n: int, n0: int, host: Host, worker_busy: float = 0.0) -> float:
    """How much slower compute runs at ``n`` ranks than at ``n0`` on one ``host``: each rank
    keeps threads_per_rank + loader_workers x worker_busy cores busy; beyond the host's cores
    every busy thread gets cores / demand of one (fluid sharing).

    >>> core_slowdown(4, 1, Host(cores=2))  # 4 ranks of 1 thread on 2 cores: half speed
    2.0
    """
    per_rank = host.threads_per_rank + host.loader_workers * min(max(worker_busy, 0.0), 1.0)

    def over(k):
        return max(1.0, k * per_rank / host.cores)
    return over(n) / over(n0)


def loading_ratio(costs: dict, target: Target, host: Host) -> float | None:
    """How much slower one rank loads with N' loaders at once than alone (timed at N'; at
    least 1, a reading under it is noise) where a rank that loads itself (no workers) is
    predicted from world size 1: its data wait there is scaled by this. Loaders timed without
    the model supply faster than the model's loop loads (on `test` its wait exceeded their
    supply by 0.5 ms a step at 1, 0.9 at 2, over 12 launches), so the run's own wait is the
    base; None where the model takes the supply itself.

    >>> loading_ratio({"world_size": 1}, Target(2, [], loader_slowdown=0.98), Host(cores=2))
    1.0
    """
    if costs["world_size"] != 1 or host.loader_workers or not target.loader_slowdown:
        return None
    return max(target.loader_slowdown, 1.0)


def injected_positions(positions: list[dict], extra: dict[str, float]) -> list[dict]:
    """``positions`` (a rank's micro-batches of a step) with known seconds per phase added
    (``extra``; negative: taken off): the optimizer's to the last micro-batch only, where the
    step is; backward's half way through it, so the buckets ready after its middle are late.

    >>> injected_positions([{"phases_s": {"backward": 0.4}, "bucket_ready_s": [0.1, 0.3]}],
    ...                    {"backward": 0.05})[0]["bucket_ready_s"]
    [0.1, 0.35]
    """
    out = []
    for i, p in enumerate(positions):
        ph = dict(p["phases_s"])
        for phase in extra if i == len(positions) - 1 else set(extra) - {"optimizer"}:
            ph[phase] = ph.get(phase, 0.0) + extra[phase]
        half, late = p["phases_s"].get("backward", 0.0) / 2, extra.get("backward", 0.0)
        out.append({"phases_s": ph, "bucket_ready_s": [t + late if t >= half else t
                                                       for t in p["bucket_ready_s"]]})
    return out


def _at_target(position: dict, slow: float, target: Target, ratio: float | None,
               load_s: float | None, host: Host) -> dict:
    """One position of a rank's profile (its phases and bucket-ready times) as predicted at
    the target: compute ``slow`` times slower, the data wait as the target's (stated), the
    loader's ``ratio`` of the measured one, or from the supply's ``load_s`` per batch."""
    ph = dict(position["phases_s"])
    compute = sum(ph[k] for k in COMPUTE_PHASES if k in ph) * slow
    for k in COMPUTE_PHASES:
        if k in ph:
            ph[k] *= slow
    if target.data_wait_s is not None:
        ph["data_wait"] = target.data_wait_s
    elif ratio is not None:
        ph["data_wait"] *= ratio
    elif load_s is not None:
        # no workers: the rank loads itself; with workers only the excess over compute
        stall = load_s if host.loader_workers == 0 else max(load_s - compute, 0.0)
        ph["data_wait"] = stall if not host.loader_workers else max(ph["data_wait"], stall)
    return {"phases_s": ph, "bucket_ready_s": [t * slow for t in position["bucket_ready_s"]]}


def predict_at(costs: dict, target: Target, host: Host, network: bool = True,
               injected: dict[int, dict[str, float]] | None = None,
               launch_delay_s: dict[int, float] | None = None,
               slowdown: float | None = None) -> dict:
    """The iteration at ``target.world_size`` from ``costs`` (the component costs of the run at
    the largest measured size, :func:`swinkit.runs.component_costs.costs`). ``network=False``
    drops the communication terms (the trap of a model that pins its network term to zero).
    ``injected``: per rank at N', seconds per phase known to be added there (an iteration's;
    the optimizer's a step's: :func:`injected_positions`); ``launch_delay_s``: per rank,
    seconds each bucket's all-reduce starts late (as :func:`~swinkit.attribution.oracle.simulate`
    takes them). ``slowdown``: compute's slowdown by the shared host, stated (else from the
    cores' overcommit and the stand-in; :mod:`~swinkit.predict.numbers.miss_split` holds it while
    it swaps compute, which the overcommit's loading share would otherwise move).
    Returns ``predicted_iter_s`` and its parts, every figure predicted."""
    # Long: the model's terms in the order they build on each other (cores, compute, loading,
    # the replay with communication, the wait for the slowest rank); split, each would pass on
    # half a dozen of the others' figures.
    n, n0 = target.world_size, costs["world_size"]
    injected = injected or {}
    profiles = rank_profiles(costs, n)
    local = statistics.fmean(sum(sum(p["phases_s"].values()) for p in profile) / len(profile)
                             for profile in profiles)
    load_s = (host.images_per_rank / target.supply_images_per_s
              if target.supply_images_per_s else None)
    busy = min(load_s / local, 1.0) if (load_s and local > 0) else 0.0
    over = core_slowdown(target.ranks_per_node or n, n0, host, busy)
    # the stand-in timed at N' sees the host's sharing beyond its cores (caches, memory
    # bandwidth) as well as an overcommit of them: the larger of the two, not both (which
    # would count an overcommit twice); relative to one rank, so only from a basis at 1
    timed = (target.compute_slowdown or 1.0) if n0 == 1 else 1.0
    slow = slowdown if slowdown is not None else max(over, timed)
    ratio = loading_ratio(costs, target, host)
    ranks = [[_at_target(p, slow, target, ratio, load_s, host) for p in profile]
             for profile in profiles]
    comm = list(target.bucket_comm_s) if network else [0.0] * len(target.bucket_comm_s)
    replay_costs = {
        "world_size": n, "grad_accum": costs["grad_accum"],
        "contention": costs.get("contention") if n0 > 1 else target.contention,
        "ranks": [{"rank": r, "positions": injected_positions(ranks[r], injected[r])
                   if r in injected else ranks[r]} for r in range(n)],
        "bucket_comm_s": comm, "broadcast_s": target.broadcast_s if network else 0.0,
        "buffer_sync": costs.get("buffer_sync", True),
        "sync_bn_s": {"forward": 0.0, "backward": 0.0}}
    base = simulate(replay_costs, launch_delay_s)
    samples = [x for mine in rank_samples(costs) for x in mine]  # the draws of a median rank
    jitter = (median_max(samples, n) - median_max(samples, 1)) * slow if samples else 0.0
    # the same wait seen from the host: per sync point (each bucket, the buffer broadcast)
    # what equal work waited for the slowest rank at N'; the larger of the two estimates.
    # Ranks time-sliced on too few cores are not independent draws (one fair scheduler
    # evens them out): there the timed wait alone stands. Time-sliced means the ranks' own
    # threads outnumber the cores; loader workers busy a few per cent of the time (an
    # overcommit of x1.01) leave each rank its core, and its draws independent. (Workers busy
    # most of the step time-slice the ranks too; they are not counted here: a known limit.)
    points = len(comm) + (1 if replay_costs["buffer_sync"] else 0)
    desync = (target.sync_wait_s or 0.0) * points / costs["grad_accum"] if n > 1 else 0.0
    if target.iteration_wait_s is not None and n > 1:  # timed in the model's own rhythm
        desync = target.iteration_wait_s / costs["grad_accum"]
    sliced = (target.ranks_per_node or n) * host.threads_per_rank > host.cores
    shared = sliced and (target.iteration_wait_s, target.sync_wait_s) != (None, None)
    jitter = desync if shared else max(jitter, desync)
    predicted = base["predicted_iter_s"] + jitter
    parts = dict(base["components_s"])
    parts["slowest_rank_wait"] = jitter
    return {"world_size": n, "predicted_iter_s": predicted, "components_s": parts,
            "core_slowdown": over, "compute_slowdown": slow, "worker_busy": busy,
            "load_s": load_s,
            "jitter_s": jitter, "sync_points_wait_s": desync,
            "expected_max_work_s": expected_max(samples, n) if samples else None,
            "bucket_comm_s": comm, "broadcast_s": replay_costs["broadcast_s"],
            "comm_source": target.source if network else "network term dropped",
            "assumptions": assumptions(costs, target, host, ratio) + list(target.notes)}


def naive(t1: float, target: Target, known_s: float = 0.0) -> dict:
    """The two baselines: perfect scaling (T(N') = T(1)), and T(1) plus the buckets' isolated
    all-reduce at N' (no overlap, nothing else changes); each with ``known_s``, what a cost
    known at N' (an injected straggler) adds to its slowest rank, as the model knows it."""
    return {"perfect_scaling_s": t1 + known_s,
            "plus_allreduce_s": t1 + known_s + sum(target.bucket_comm_s),
            "naive_known_s": known_s}
