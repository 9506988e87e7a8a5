"""A paired launch's other kinds of step read as runs of their own: its local steps (the
paired oracle's components at N), its solo steps (world size 1 in each rank's place) and the
ratio of its beside steps to its solo steps (how much the model's step slows beside busy
neighbours). The kinds and their order: :func:`swinkit.rank.step_switch.schedule`."""
from __future__ import annotations

import statistics

from swinkit.attribution.extrapolate import COMPUTE_PHASES
from swinkit.measure.timeline import phase_durations


def local_run(out: dict, ranks: list[dict], grad_accum: int) -> dict:
    """A paired run's local iterations in the shape of a ``local`` run's result (what
    :func:`swinkit.runs.component_costs.costs` reads): no warm-up, the DDP ones warmed up."""
    local_ranks = [{**{k: r[k] for k in ("rank", "comm", "contention") if k in r},
                    **r["local"]} for r in ranks]
    return {"world_size": out["world_size"], "warmup": 0, "grad_accum": grad_accum,
            "ranks": local_ranks, "bucket_sizes_bytes": out["bucket_sizes_bytes"],
            "loader_workers": out["loader_workers"], "images_per_rank": out["images_per_rank"],
            **step_times(local_ranks, grad_accum)}


def solo_run(out: dict, ranks: list[dict], grad_accum: int) -> dict:
    """The ranks' solo steps in the shape of a ``local`` run at world size 1, one "rank" per
    rank that ran alone (``in_place``: each is world size 1 in that rank's place, its
    process, memory and core as the DDP steps had them). Alone there is nothing to
    communicate (the all-reduce and broadcast of one rank are no collective), so the
    communication is zero; the buckets' payloads and dtype are the launch's. Its
    ``per_batch_s`` (T(1)) is the ranks' median of each one's median step."""
    comm = ranks[0]["comm"]
    alone = {"bucket_s": [0.0] * len(comm["bucket_s"]), "broadcast_s": 0.0,
             "sync_bn_s": {"forward": 0.0, "backward": 0.0},
             "buffer_sync": comm.get("buffer_sync", True), "elements": comm["elements"],
             "dtype": comm["dtype"]}
    ranks = [{"rank": r["rank"], "comm": alone, **r["solo"]} for r in ranks if "solo" in r]
    return {"world_size": 1, "in_place": True, "warmup": 0, "grad_accum": grad_accum,
            "ranks": ranks,
            "bucket_sizes_bytes": out["bucket_sizes_bytes"],
            "loader_workers": out["loader_workers"], "images_per_rank": out["images_per_rank"],
            **step_times(ranks, grad_accum)}


def step_times(ranks: list[dict], grad_accum: int) -> dict:
    """``step_s``: the median optimizer step (``grad_accum`` consecutive iterations summed,
    median per rank, median across ranks); ``per_batch_s`` = step_s / grad_accum, comparable
    with a run without accumulation (a median over iterations would pick the cheap no_sync
    micro-batches and miss the all-reduce)."""
    step = statistics.median(median_step(r["iteration"], grad_accum) for r in ranks)
    return {"grad_accum": grad_accum, "step_s": step, "per_batch_s": step / grad_accum}


def median_step(iterations: list[float], grad_accum: int) -> float:
    """The median of ``grad_accum`` consecutive ``iterations`` summed (whole optimizer steps).

    >>> median_step([1, 3, 1, 3, 2, 5], 2)
    4
    """
    k = grad_accum
    return statistics.median(sum(iterations[i:i + k])
                             for i in range(0, len(iterations) - k + 1, k))


def beside_slowdown(ranks: list[dict], grad_accum: int = 1) -> dict:
    """How much slower each rank's compute ran in its beside steps (the other ranks running
    the stand-in) than in its solo steps (the others idle): per rank the median beside
    optimizer step's compute phases (``grad_accum`` consecutive iterations summed, as
    :func:`median_step`: a median over iterations would pick the no_sync micro-batches
    and miss the optimizer) over the median solo step's, and the ranks' mean (``ratio``).
    Compute only: the loading and waits of a step are predicted on their own.

    >>> it = lambda ms: {"marks": [["start", 0.0], ["data_wait", 0.5], ["forward", 0.5 + ms / 1e3]]}
    >>> beside_slowdown([{"solo": {"timeline": [it(100), it(100), it(300)]},
    ...                   "beside": {"timeline": [it(110), it(120), it(100)]}}])["ratio"]
    1.1
    >>> # 2 micro-batches a step: solo steps 100+300 twice, beside 110+330 and 100+330: the
    >>> # median step 435 over 400 ms (the median micro-batch would give 220 over 200: 1.1)
    >>> round(beside_slowdown([{"solo": {"timeline": [it(100), it(300), it(100), it(300)]},
    ...                         "beside": {"timeline": [it(110), it(330), it(100), it(330)]}}],
    ...                       grad_accum=2)["ratio"], 6)
    1.0875
    """
    def compute(timeline: list[dict]) -> float:
        return median_step([sum(v for name, v in phase_durations(it).items()
                                if name in COMPUTE_PHASES) for it in timeline], grad_accum)
    per_rank = [compute(r["beside"]["timeline"]) / compute(r["solo"]["timeline"])
                for r in ranks if "solo" in r]
    return {"ratio": statistics.fmean(per_rank), "per_rank": per_rank}
