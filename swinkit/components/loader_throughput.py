"""Data-loader throughput of the real MMSeg ADE20K pipeline, N loaders at once.

Supply: every rank of a launch runs only its loader (DistributedSampler shard, W workers), all
at the same time on the machine's fixed cores, and counts images per second. Demand: what the
model consumes per rank at that world size, from a short DDP run (images per rank / the
iteration's non-loading time). Headroom = supply / demand per rank: below 1, loading is the
bottleneck. Stage costs time each pipeline step per sample in one process.
"""
from __future__ import annotations

import time

STAGE_NAMES = {"LoadImageFromFile": "decode", "LoadAnnotations": "decode_mask",
               "RandomResize": "resize", "RandomCrop": "crop", "RandomFlip": "flip",
               "PhotoMetricDistortion": "photometric", "PackSegInputs": "pack"}


def loader_rank(rank, preset: str, data_root: str, workers: int, batches: int = 20,
                warmup: int = 3) -> dict:
    """Rank entry point: iterate this rank's loader; images/s over ``batches`` batches."""
    from swinkit.config import load_config
    from swinkit.data.loader import batches as endless, build_loader

    cfg = load_config(preset, data_root, device="cpu")
    loader = build_loader(cfg, rank=rank.rank, world_size=rank.world_size, workers=workers,
                          timeout_s=120 if workers else 0)
    stream = endless(loader)
    for _ in range(warmup):
        next(stream)
    waits = []
    start = time.perf_counter()
    for step in range(batches):
        rank.heartbeat(step)
        t = time.perf_counter()
        next(stream)
        waits.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - start
    return {"rank": rank.rank, "images_per_s": batches * cfg.images_per_rank / elapsed,
            "batch_wait_s": waits, "images_per_batch": cfg.images_per_rank}


def loader_settings_rank(rank, preset: str, data_root: str, workers: list[int],
                         batches: int = 20) -> dict:
    """Rank entry point: :func:`loader_rank` for each of ``workers`` in turn, every rank's
    loader at once (a barrier before each). One launch for all of them: a launch costs about
    as much as the loading it measures on a small machine."""
    import torch.distributed as dist

    out = {}
    for w in workers:
        dist.barrier()  # the previous setting's workers are gone on every rank
        try:  # one setting's failure (a worker's timeout, its memory) is that setting's
            out[str(w)] = loader_rank(rank, preset=preset, data_root=data_root, workers=w,
                                      batches=batches)
        except Exception as exc:
            out[str(w)] = {"rank": rank.rank, "error": f"{type(exc).__name__}: {exc}"}
    return out


def stage_costs(cfg, samples: int = 16) -> dict[str, list[float]]:
    """Seconds per sample of each pipeline step (in this process, no workers)."""
    from swinkit.data.loader import build_dataset

    dataset = build_dataset(cfg)
    costs: dict[str, list[float]] = {}
    for i in range(samples):
        results = dataset.get_data_info(i % len(dataset))
        for transform in dataset.pipeline.transforms:
            start = time.perf_counter()
            results = transform(results)
            name = STAGE_NAMES.get(type(transform).__name__, type(transform).__name__)
            costs.setdefault(name, []).append(time.perf_counter() - start)
    return costs


def loader_sweep(preset: str, world_sizes, workers=(0, 1, 2, 4), batches: int = 20,
                 progress=print):
    """Sweep keyed by (world size, workers) for supply, ``("demand", ws)`` and ``"stages"``."""
    from swinkit.config import load_config
    from swinkit.data.loader import ensure_data
    from swinkit.launch import launch
    from swinkit.runs.ddp_run import DDPRunSpec, run_ddp
    from swinkit.runs.sweep import Sweep, plan_world_sizes, sweep_launch

    cfg = load_config(preset, device="cpu")
    ensure_data(cfg, progress=progress)
    sweep = Sweep(meta={"preset": preset, "images_per_rank": cfg.images_per_rank})
    sweep.run("stages", lambda: stage_costs(cfg), progress)
    for ws, reason in plan_world_sizes(world_sizes).items():
        lc = sweep_launch(ws, wall_timeout_s=1200)
        runnable = []
        for w in workers:
            if reason or workers_oversubscribe(ws, w):
                sweep.skipped[(ws, w)] = reason or workers_oversubscribe(ws, w)
            else:
                runnable.append(w)
        if runnable:
            progress(f"  loader supply: world size {ws}, {runnable} workers per rank")
            kwargs = dict(preset=preset, data_root=cfg.data_root, workers=runnable,
                          batches=batches)
            lc = sweep_launch(ws, wall_timeout_s=1200 * len(runnable))  # 1200 s a setting
            sweep.run(("supply", ws), lambda kw=kwargs, lc=lc: launch(
                f"{__name__}:loader_settings_rank", kw, lc, quiet=True).result["ranks"],
                progress)
            _by_workers(sweep, ws, runnable)
        if reason:
            sweep.skipped[("demand", ws)] = reason
            continue
        progress(f"  model demand: world size {ws}")
        # the median of a few iterations: demand is compute time, which varies little
        spec = DDPRunSpec(preset=preset, nproc_per_node=ws, iters=4, warmup=1, launch=lc)
        sweep.run(("demand", ws), lambda spec=spec: _demand(run_ddp(spec, progress=progress)),
                  progress)
    return sweep


def _by_workers(sweep, ws: int, workers: list[int]) -> None:
    """The one launch's ranks (``("supply", ws)``) filed under ``(ws, w)`` per setting, as the
    tracks read them; a failed launch fails every setting it held."""
    key = ("supply", ws)
    for w in workers:
        if key in sweep.results:
            ranks = [r[str(w)] for r in sweep.results[key]]
            errors = [f"rank {r['rank']}: {r['error']}" for r in ranks if "error" in r]
            if errors:
                sweep.failed[(ws, w)] = "; ".join(errors)
            else:
                sweep.results[(ws, w)] = ranks
        elif key in sweep.failed:
            sweep.failed[(ws, w)] = sweep.failed[key]
    sweep.results.pop(key, None)
    sweep.failed.pop(key, None)


def workers_oversubscribe(world_size: int, workers: int) -> str | None:
    """Why ``world_size`` loaders of ``workers`` workers each cannot be measured here, or None.

    Each loader worker decodes and augments on a core of its own (with no workers the rank's
    own process does): more of them than cores only measures the cores' time-sharing, and
    costs minutes on a small machine. Skipped like world sizes beyond the cores, unless
    $SWINKIT_OVERSUBSCRIBE=1."""
    import os

    from swinkit.runs.sweep import OVERSUBSCRIBE_ENV, oversubscribe_allowed
    need, cores = world_size * max(workers, 1), os.cpu_count() or 1
    if need <= cores or oversubscribe_allowed():
        return None
    return (f"{world_size} loaders x {workers} workers need {need} CPU cores; this machine has "
            f"{cores} (set {OVERSUBSCRIBE_ENV}=1 to run oversubscribed)")


def _demand(result: dict) -> dict:
    """Images per second one rank's model consumes: images / (iteration - loading)."""
    compute_s = result["iter_s"] - result["phases_s"]["data_wait"]
    return {"compute_s": compute_s, "images_per_s": result["images_per_rank"] / compute_s}
