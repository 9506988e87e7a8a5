"""What a held-out prediction (:func:`swinkit.predict.numbers.extrapolate.predict_at`) takes for
granted, in words: printed with every prediction (torch-free)."""
from __future__ import annotations

# what the model cannot know on CPU, said under every CPU prediction (its report, the scorecard)
CPU_LIMIT = ("on CPU the ranks share the host's cores (and its caches and memory bandwidth), "
             "which a GPU job, one rank per device, does not: the model reads that sharing "
             "from stand-ins timed without the model, not from the model's own steps, and "
             "misses what they miss")


def on_cpu(result: dict) -> bool:
    """Whether a held-out result's launches ran on CPU (their timings went over gloo)."""
    launches = result.get("launches") or [{}]
    return (launches[0].get("basis") or {}).get("probe", {}).get("backend") == "gloo"


def assumptions(costs: dict, target, host, ratio: float | None) -> list[str]:
    """What the prediction at ``target`` (a
    :class:`~swinkit.predict.numbers.extrapolate.Target`) on ``host`` (a
    :class:`~swinkit.predict.numbers.extrapolate.Host`) takes for granted, in words
    (``ratio``: the loading ratio it took,
    :func:`~swinkit.predict.numbers.extrapolate.loading_ratio`; the types are not imported
    here, as extrapolate imports this)."""
    n0 = costs["world_size"]
    out = [
        f"per-rank compute is the median rank's local phases of the run at world size {n0} "
        "(the largest measured), the same on every rank",
        f"host: {host.cores} cores, {host.threads_per_rank} thread(s) per rank and "
        f"{host.loader_workers} loader worker(s) per rank; beyond the cores compute slows by "
        "the overcommit (fluid sharing), gloo's threads not counted",
        _sharing_assumption(target) if n0 == 1 else
        "compute slows only by the overcommit of cores (the basis's own compute shares the "
        "host)",
        _wait_assumption(),
        f"communication: bucket all-reduces and buffer broadcast {target.source}",
        ("contention between backward and all-reduce: the rates measured at world size "
         f"{n0}") if n0 > 1 else (
            "contention between backward and all-reduce: the rates timed at N' with fixed "
            f"matmul work standing in for backward {target.contention}" if target.contention
            else "contention between backward and all-reduce: none (one rank was run, and "
                 "no rate was timed at N')"),
        "SyncBN collectives: none (CPU presets; GPU presets at N > 1 need them timed at N')",
    ]
    if target.supply_images_per_s is None:
        out.append("loading: the measured data wait at the largest measured size, unchanged")
    elif ratio is not None:
        out.append("loading: the run's own data wait at world size 1, times how much slower "
                   f"one loader ran with N' at once than alone, both timed at N' (x{ratio:.3f})")
    else:
        out.append("loading: the supply with N' loaders at once, measured at N'")
    return out


def _wait_assumption() -> str:
    """How the wait for the slowest rank was predicted, in words."""
    return ("per-rank, per-iteration times are independent draws from the measured samples; "
            "the slowest-of-N' wait is the median of their maximum (order statistics), or, if "
            "larger, the wait timed at N' with equal work on every rank: in the model's rhythm "
            "(iteration_wait_s) where timed, else per sync point (sync_wait_s, which holds the "
            "timing launch's own ranks' differences in speed too) times the sync points; where "
            "the ranks' threads outnumber the cores (time-sliced, not independent) the timed "
            "wait alone")


def _sharing_assumption(target) -> str:
    """How compute was slowed by the host's sharing at N', from a basis at world size 1."""
    if target.compute_slowdown:
        return ("compute slows as a stand-in for it did, timed at N' with every rank at once "
                f"against each alone (x{target.compute_slowdown:.2f}: caches, memory "
                "bandwidth), where that exceeds the overcommit; the model's own sensitivity is "
                "not measured")
    return "compute slows only by the overcommit of cores (nothing timed at N' reads the sharing)"
