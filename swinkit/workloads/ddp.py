"""The instrumented DDP iteration: what one rank runs (:func:`ddp_rank`).

Per iteration the phases, in order, each closed by a mark (CUDA events on GPU, read after the
run; perf_counter on CPU), so they add up to the iteration exactly:

    data_wait     next(loader) + data preprocessor (host->device copy, normalise, pad)
    forward       DDP forward + loss
    backward      loss.backward() until the last gradient bucket is ready (from the comm hook)
    exposed_comm  the rest of loss.backward(): all-reduce time not hidden under compute
    optimizer     AdamW step + zero_grad
    other         the tail until the next iteration starts (LR schedule, bookkeeping)
"""
from __future__ import annotations

import socket
import time

import torch
from torch.nn.parallel import DistributedDataParallel

from swinkit.config import load_config
from swinkit.data.loader import batches, build_loader
from swinkit.measure.ddp_timing import BucketClock, DDPStats, timed_allreduce_hook
from swinkit.measure.samplers import CpuUsage, NvmlSampler
from swinkit.measure.clocks import PhaseClock
from swinkit.measure.phases import PHASES  # noqa: F401  also imported from here by benchmarks/
from swinkit.model.segmentor import build_optimizer, build_segmentor
from swinkit.workloads.errors import out_of_memory_named
from swinkit.workloads.inject import Injection, add_compute_delay, add_data_delay



def _setup(rank, preset, data_root, overrides, device, workers, injection, seed):
    cfg = load_config(preset, data_root, overrides, device=device)
    cuda = cfg.device == "cuda"
    device = torch.device("cuda", rank.local_rank) if cuda else torch.device("cpu")
    add_data_delay(cfg, injection, rank.rank)
    torch.manual_seed(seed)  # identical initial weights on every rank
    model = build_segmentor(cfg).to(device)
    add_compute_delay(model, injection, rank.rank, cuda)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    ddp._set_ddp_runtime_logging_sample_rate(1)
    optim, schedulers = build_optimizer(cfg, model)
    loader = build_loader(cfg, rank=rank.rank, world_size=rank.world_size, workers=workers,
                          seed=seed, timeout_s=120 if workers else 0)
    return cfg, cuda, model, ddp, optim, schedulers, loader


def _trace_context(trace_dir, rank, warmup, iters):
    if not trace_dir:
        return None
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    return profile(activities=activities,
                   schedule=schedule(wait=0, warmup=warmup, active=min(iters, 5), repeat=1),
                   on_trace_ready=tensorboard_trace_handler(trace_dir, worker_name=f"rank{rank}"))


def ddp_rank(rank, preset: str = "test", iters: int = 10, warmup: int = 3, workers: int | None = None,
             inject: dict | None = None, data_root: str | None = None, overrides: dict | None = None,
             device: str | None = None, trace_dir: str | None = None, bare: bool = False,
             seed: int = 0) -> dict:
    """Run ``warmup + iters`` DDP training iterations on this rank; return its measurements.

    ``bare=True`` runs the same loop with no instrumentation but one clock read per iteration
    (no phase marks, comm hook, DDP stats or heartbeats), to measure what instrumentation costs.
    """
    injection = Injection(**(inject or {}))
    cfg, cuda, model, ddp, optim, schedulers, loader = _setup(
        rank, preset, data_root, overrides, device, workers, injection, seed)
    clock = PhaseClock(cuda)
    hooked = not bare or injection.comm_ms > 0
    bucket_clock = BucketClock(clock.new_mark, comm_delay_s=injection.comm_ms / 1e3
                               if injection.applies_to(rank.rank) else 0.0)
    if hooked:
        ddp.register_comm_hook(bucket_clock, timed_allreduce_hook)
    stats, cpu = DDPStats(ddp), CpuUsage()
    nvml = NvmlSampler(rank.local_rank) if cuda else None
    stream = batches(loader)
    clocks, losses, starts, skipped = [], [], [], []
    skip_mode = cfg.get("skip_bad_samples", 0) > 0
    profiler = _trace_context(trace_dir, rank.rank, warmup, iters)
    if profiler:
        profiler.start()
    with out_of_memory_named(rank.rank, cfg):
        for it in range(warmup + iters):
            if it == warmup:
                cpu.start()
                nvml and nvml.start()
            if bare:
                starts.append(time.perf_counter())
            else:
                rank.heartbeat(it)  # counted in the previous iteration's tail ("other")
                boundary = clock.new_mark()
                if clocks:
                    clocks[-1].append("other", boundary)
                clock = PhaseClock(cuda)
                clock.start(boundary)
            batch = next(stream)
            if skip_mode:
                skipped += [s for d in batch["data_samples"] for s in d.metainfo.get("skipped_samples", [])]
            data = model.data_preprocessor(batch, training=True)
            bare or clock.mark("data_wait")
            loss, _ = model.parse_losses(ddp(**data, mode="loss"))
            bare or clock.mark("forward")
            bucket_clock.reset()
            loss.backward()
            if not bare:
                clock.append("backward", bucket_clock.last_ready or clock.new_mark())
                clock.mark("exposed_comm")
            optim.step()
            optim.zero_grad()
            bare or clock.mark("optimizer")
            for scheduler in schedulers:
                scheduler.step()
            if not bare:
                clocks.append(clock)
                stats.poll()
            losses.append(loss.detach())
            if profiler:
                profiler.step()
    if bare:
        starts.append(time.perf_counter())
    else:
        clocks[-1].mark("other")
    cuda and torch.cuda.synchronize()
    usage = cpu.stop()
    if profiler:
        profiler.stop()
    measured = clocks[warmup:]
    result = {
        "rank": rank.rank, "host": socket.gethostname(), "device": str(next(model.parameters()).device),
        "loss": [float(v) for v in losses[warmup:]],
        "cpu": usage, "gpu": nvml.stop() if nvml else None,
        "bucket_sizes_bytes": stats.bucket_sizes_bytes(),
        "threads": torch.get_num_threads(), "loader_workers": loader.num_workers,
        "skipped_samples": skipped,
    }
    if bare:
        result["iteration"] = [b - a for a, b in zip(starts[warmup:], starts[warmup + 1:])]
        return result
    phases = [c.phases() for c in measured]
    result["iteration"] = [c.total() for c in measured]
    result["phases"] = {p: [ph.get(p, 0.0) for ph in phases] for p in PHASES}
    result["ddp_timers"] = [stats.per_iteration.get(i) for i in range(warmup, warmup + iters)]
    return result
