"""The instrumented DDP iteration: what one rank runs (:func:`ddp_rank`).

Each iteration, in the order it runs (phases in :mod:`swinkit.measure.phases`)::

    batch = next(loader); data = preprocessor(batch)      -> data_wait
    loss = DDP(model)(data)                                -> forward   (buffer broadcast inside)
    loss.backward()                                        -> backward until the last bucket is
                                                              ready, then exposed_comm
    optimizer.step(); optimizer.zero_grad()                -> optimizer
    LR schedulers, heartbeat                               -> other

Every boundary and every collective goes on this rank's :class:`~swinkit.measure.timeline.Timeline`
(CUDA events on GPU, read after the run; perf_counter on CPU), so the ranks' timelines can be
laid side by side and each wait blamed on its cause. ``bare=True`` runs the same loop on a null
clock: no marks, hooks or DDP timers, one clock read per iteration (to measure what the
instrumentation costs).
"""
from __future__ import annotations

import contextlib
import random
import socket
import statistics
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from swinkit.config import load_config
from swinkit.data.loader import batches, build_loader
from swinkit.measure import memory
from swinkit.measure import ddp_hooks
from swinkit.measure.phases import PHASES  # noqa: F401  also imported from here by benchmarks/
from swinkit.measure.samplers import CpuUsage, NvmlSampler
from swinkit.measure.timeline import (OffsetLine, Timeline, estimate_clock_offsets, make_clock,
                                      phase_durations)
from swinkit.model.segmentor import build_optimizer, build_segmentor
from swinkit.workloads.ddp_options import DDPOptions
from swinkit.workloads.errors import out_of_memory_named
from swinkit.workloads.inject import (GATE, Injection, MeasuredDelay, add_compute_delay,
                                      add_data_delay, comm_launcher, per_iteration)
from swinkit.workloads.meet import Meet
from swinkit.workloads.paired_launch import Switch, schedule, sync_batch_norms


@dataclass
class RankRun:
    """Everything one rank's loop touches, built once by :func:`_setup`."""
    cfg: object
    cuda: bool
    model: torch.nn.Module
    ddp: DistributedDataParallel
    optim: object
    schedulers: list
    loader: object
    stream: object
    timeline: Timeline
    buckets: ddp_hooks.BucketRecorder | None
    buffers: ddp_hooks.ModuleCollective | None
    stats: ddp_hooks.DDPStats | None
    options: DDPOptions = field(default_factory=DDPOptions)
    memory_baseline: int = 0
    cpu: CpuUsage = field(default_factory=CpuUsage)
    nvml: NvmlSampler | None = None
    losses: list = field(default_factory=list)
    starts: list = field(default_factory=list)
    # iteration index -> when it ended early: at a paired run's barrier, which is in no
    # iteration (else the next start ends it)
    cut: dict = field(default_factory=dict)
    skipped: list = field(default_factory=list)
    injected: list = field(default_factory=list)
    # local steps at N > 1: meet the other ranks where DDP would (swinkit.workloads.meet)
    meet: Meet | None = None
    # a gloo group over every rank for the host's own agreements (clock offsets, when to stop
    # the contention loop): CPU messages whatever the backend, off the compute stream
    control: object = None
    # injections that measure what they inject ("compute", "comm"), read after the run
    delays: dict = field(default_factory=dict)


def _setup(rank, preset, data_root, overrides, device, workers, injection: Injection, seed,
           bare: bool, ddp_timers: bool | None, options: DDPOptions, local: bool,
           paired: bool = False) -> RankRun:
    """``local``: DDP over this rank alone with a hook that communicates nothing (the component
    measurement: DDP's bucketing, hooks and buffer sync, with nothing sent to another rank). ``paired``: DDP
    over every rank whose hook and buffer broadcast can be switched to the local ones
    (:class:`Switch`)."""
    cfg = load_config(preset, data_root, overrides, device=device)
    cuda = cfg.device == "cuda"
    dev = torch.device("cuda", rank.local_rank) if cuda else torch.device("cpu")
    add_data_delay(cfg, injection, rank.rank)
    # MMSeg's random crop and flip draw from numpy's global generator: seeded per rank, so a
    # run with loader workers 0 (augmenting in this process) is reproducible too.
    np.random.seed(seed + rank.rank)
    random.seed(seed + rank.rank)
    memory_baseline = memory.rss_bytes()
    torch.manual_seed(seed)  # identical initial weights on every rank
    model = build_segmentor(cfg).to(dev)
    compute_delay = add_compute_delay(model, injection, rank.rank, cuda)
    # new_group is collective: every rank makes every singleton group, each keeps its own.
    singleton = ([dist.new_group([r]) for r in range(rank.world_size)][rank.rank]
                 if local or paired else None)
    alone = singleton if local else None
    ddp = DistributedDataParallel(model, device_ids=[dev.index] if cuda else None,
                                  process_group=alone, **options.ddp_kwargs())
    timeline = Timeline(make_clock(cuda, enabled=not bare))
    # Locally the hook still runs (a compression hook's casts are compute), over the group of
    # one; an injected comm delay belongs to the collective, so it is not in the local run.
    launcher = (ddp_hooks.hook_launcher(options.comm_hook, options.powersgd_rank, alone, local)
                if local else comm_launcher(injection, rank.rank, cuda))
    delays = {name: d for name, d in (("compute", compute_delay), ("comm", launcher))
              if isinstance(d, MeasuredDelay)}
    if launcher is None and options.comm_hook:
        launcher = ddp_hooks.hook_launcher(options.comm_hook, options.powersgd_rank)
    if local:  # SyncBN over the group of one too: plain batch norm, nothing sent
        for module in sync_batch_norms(model):
            module.process_group = alone
    if paired:
        launcher = Switch.for_options(launcher or ddp_hooks.plain_launch, singleton, options)
        launcher.route_buffer_broadcast(ddp)
        launcher.route_sync_batch_norm(model)
        # NCCL makes a group's communicator on its first collective: here, not inside the
        # first measured local forward
        dist._broadcast_coalesced(singleton, [torch.zeros(1, device=dev)], 1 << 20, 0)
        ddp_timers = False  # DDP's running averages would mix both kinds of iteration
    buckets = None
    if not bare or launcher is not None:  # an injected launcher must run in the bare loop too
        buckets = ddp_hooks.BucketRecorder(timeline, process_group=alone,
                                           launcher=launcher or ddp_hooks.plain_launch)
        ddp.register_comm_hook(buckets, ddp_hooks.recording_allreduce_hook)
    buffers = None if bare else ddp_hooks.record_buffer_broadcast(timeline, ddp)
    if not bare:  # SyncBN's collectives (GPU presets, or cpu_sync_bn)
        ddp_hooks.record_module_collectives(timeline, model)
    # DDP's runtime sampling synchronises on CUDA events every forward: on GPU only on request.
    want_timers = (not cuda) if ddp_timers is None else ddp_timers
    stats = ddp_hooks.DDPStats(ddp) if want_timers and not bare else None
    optim, schedulers = build_optimizer(cfg, model)
    loader = build_loader(cfg, rank=rank.rank, world_size=rank.world_size, workers=workers,
                          seed=seed, timeout_s=120 if (workers or cfg.loader_workers) else 0)
    meet = Meet(dev, on=local) if (local or paired) and rank.world_size > 1 else None
    return RankRun(cfg, cuda, model, ddp, optim, schedulers, loader, batches(loader), timeline,
                   buckets, buffers, stats, options=options, memory_baseline=memory_baseline,
                   nvml=NvmlSampler(rank.local_rank) if cuda else None, meet=meet,
                   control=dist.new_group(backend="gloo"), delays=delays)


def _step(run: RankRun, it: int) -> None:
    """One training iteration (one micro-batch with gradient accumulation), marked on the
    timeline (marks are free on the null clock). With ``grad_accum`` k, iterations k-1, 2k-1, ...
    synchronise gradients and step the optimizer; the others run under ``no_sync``."""
    sync = (it + 1) % run.options.grad_accum == 0
    tl = run.timeline
    tl.begin()
    batch = next(run.stream)
    if run.cfg.get("skip_bad_samples", 0):
        run.skipped += [s for d in batch["data_samples"] for s in d.metainfo.get("skipped_samples", [])]
    data = run.model.data_preprocessor(batch, training=True)
    tl.mark("data_wait")
    meet = run.meet if run.meet and run.meet.on else None
    if run.ddp.will_sync_module_buffers():  # not after a no_sync forward
        # a local step meets where DDP's buffer broadcast would hold the ranks
        arrival = meet(tl) if meet else tl.current.marks[-1][1]
        run.buffers and run.buffers.start(arrival)  # arrival at the buffer broadcast
    with contextlib.nullcontext() if sync else run.ddp.no_sync():
        loss, _ = run.model.parse_losses(run.ddp(**data, mode="loss"))
        tl.mark("forward")
        if run.buckets:
            run.buckets.reset()
        loss.backward()
    if sync and meet:  # and where DDP's last gradient all-reduce would
        meet(tl)
    if tl.enabled:
        ddp_hooks.record_grad_sync(tl, run.buckets)
    if sync:
        run.optim.step()
        run.optim.zero_grad()
    tl.mark("optimizer")
    if sync:
        for scheduler in run.schedulers:
            scheduler.step()
    run.losses.append(loss.detach())


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
             seed: int = 0, ddp_timers: bool | None = None, ddp_options: dict | None = None,
             local: bool = False, comm_load=None, paired: bool = False) -> dict:
    """Run ``warmup + iters`` DDP training iterations on this rank; return its measurements.

    Args:
        ddp_timers: sample DDP's own reducer timers for the cross-check (default: on CPU only,
            since on GPU the sampling synchronises inside the step).
        ddp_options: :class:`~swinkit.workloads.ddp_options.DDPOptions` fields.
        local: communicate nothing (see :func:`_setup`); the component measurement.
        comm_load: with ``local``, ``comm_load(run)`` returns a
            :class:`~swinkit.measure.contention.CommLoad`; after the measured iterations the
            loop runs a few more with it all-reducing beside them (``result["contention"]``).
        paired: after ``warmup``, alternate optimizer steps of DDP and local iterations
            (:func:`schedule`), ``iters`` of each; the result is the DDP iterations', with the
            local ones in ``result["local"]`` (timeline, iteration, loss).
    """
    if local and paired:
        raise ValueError("local and paired exclude each other")
    injection = Injection(**(inject or {}))
    options = DDPOptions.from_dict(ddp_options)
    run = _setup(rank, preset, data_root, overrides, device, workers, injection, seed, bare,
                 ddp_timers, options, local, paired)
    clocks = _clock_offsets(rank, run.control)
    profiler = _trace_context(trace_dir, rank.rank, warmup, iters)
    profiler and profiler.start()
    order = schedule(warmup, iters, options.grad_accum, paired)
    switch = run.buckets.launcher if paired else None
    with out_of_memory_named(rank.rank, run.cfg):
        for n, (kind, it) in enumerate(order):
            if n == warmup:
                memory.reset_device_peak(run.cuda)
                run.cpu.start()
                run.nvml and run.nvml.start()
            rank.heartbeat(n)  # a small file write: lands in the previous iteration's tail
            GATE.on = injection.on_iteration(it)
            GATE.iteration = n  # what each measured injection is filed under
            run.injected.append(GATE.on and injection.active and injection.applies_to(rank.rank))
            if switch and n >= warmup and (n == warmup or order[n - 1][0] != kind):
                # before every measured optimizer step (the same n on every rank): the ranks
                # leave their local steps at different times, so line them up outside any
                # iteration, or the DDP step would wait for a skew no DDP run has. Before the
                # local steps too, so that both kinds start from the same state (with a
                # barrier before the DDP steps only, they loaded ~1 ms slower)
                if n:
                    run.cut[n - 1] = time.perf_counter()
                run.timeline.end()
                dist.barrier()
                run.timeline.clock.anchor()  # outside any iteration: re-map GPU events
            switch and switch.use(local=kind == "local")
            if switch and run.meet:
                run.meet.on = kind == "local"
            run.starts.append(time.perf_counter())
            _step(run, it)
            run.stats and run.stats.poll()
            profiler and profiler.step()
        if run.cuda:  # the last iteration's kernels, before its end is read (the bare loop's clock)
            torch.cuda.synchronize()
        run.starts.append(time.perf_counter())
        run.timeline.enabled and run.timeline.end()  # what follows is in no measured iteration
        cpu, gpu = run.cpu.stop(), run.nvml.stop() if run.nvml else None
        peak = memory.peak_memory(run.cuda, run.memory_baseline)
        load = comm_load(run) if comm_load is not None else None
        if load is not None:
            switch and switch.use(local=True)
            # no meetings beside the load: the ranks may run different numbers of these
            # iterations (each stops when its own thread has timed enough rounds)
            run.meet = None
            _beside_comm_load(run, rank, load, first=len(order))
        run.timeline.enabled and run.timeline.end()
    profiler and profiler.stop()
    clocks = _clock_drift(rank, run.control, clocks)
    GATE.iteration = None
    # once, after the run: reading a CUDA delay's events waits for them
    measured = {name: delay.take_measured() for name, delay in run.delays.items()}
    main = [n for n, (kind, _) in enumerate(order) if kind != "local"]
    result = _result(run, rank, main, warmup, clocks, cpu, gpu, peak)
    # seconds actually injected per measured iteration (the ground truth recovery is held to)
    result["injected_s"] = {name: per_iteration(m, main[warmup:]) for name, m in measured.items()}
    # and per injected call (a forward; a bucket's launch): what one requested delay became
    result["injected_call_s"] = {name: statistics.median(s for _, s in m) if m else None
                                 for name, m in measured.items()}
    resolved = (run.timeline.resolve(clocks["applied"])
                if run.timeline.enabled and (paired or load is not None) else [])
    if paired:
        local_its = [n for n, (kind, _) in enumerate(order) if kind == "local"]
        result["local"] = {"timeline": [resolved[n] for n in local_its],
                           "iteration": [sum(phase_durations(resolved[n]).values())
                                         for n in local_its],
                           "loss": [float(run.losses[n]) for n in local_its],
                           "injected_s": {name: per_iteration(m, local_its)
                                          for name, m in measured.items()}}
    if load is not None:
        result["contention"] = {"backward_loaded_s": [phase_durations(it)["backward"]
                                                      for it in resolved[len(order):]],
                                "rounds_loaded_s": load.rounds}
    return result


def _beside_comm_load(run: RankRun, rank, load, first: int, max_iters: int = 20) -> None:
    """Training iterations (communicating nothing) while ``load`` all-reduces beside them,
    until it has timed enough rounds (at least 3 iterations, at most ``max_iters``)."""
    from swinkit.measure.contention import MIN_ROUNDS

    dist.barrier()  # every rank's load starts together
    GATE.iteration = None  # no main iteration's: not filed as one
    load.start()
    it = first
    while True:
        rank.heartbeat(it)
        _step(run, it)
        it += 1
        enough = not load.is_alive() or (it - first >= 3 and len(load.rounds) >= MIN_ROUNDS + 2)
        if _all_agree(enough or it - first >= max_iters, run.control):
            break
    load.finish()
    load.join_or_raise(timeout_s=600)


def _all_agree(stop: bool, group) -> bool:
    """Whether any rank wants to stop (a MAX all-reduce over the gloo ``group``): every rank
    then runs the same number of iterations, so no collective of one is left without a partner
    (SyncBN's on GPU presets, the load's)."""
    flag = torch.tensor([1 if stop else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    return bool(flag.item())


def _clock_offsets(rank, group=None) -> dict:
    """This rank's clock against rank 0's, before the run: measured always, applied only across
    hosts (one host's processes share CLOCK_MONOTONIC; the measurement is then a check of the
    method). ``group``: gloo, since host clocks ping-pong on the CPU whatever the backend."""
    hosts = [None] * rank.world_size
    dist.all_gather_object(hosts, socket.gethostname())
    group = dist.new_group(backend="gloo") if group is None else group
    before = time.perf_counter()
    est = estimate_clock_offsets(rank.rank, rank.world_size, group)
    same_host = len(set(hosts)) == 1
    applied = 0.0 if same_host else est["offset_s"][rank.rank]
    return {"hosts": hosts, "same_host": same_host, "applied_offset_s": applied,
            "estimated_offset_s": est["offset_s"][rank.rank], "error_s": est["error_s"][rank.rank],
            "at_s": before}


def _clock_drift(rank, group, clocks: dict) -> dict:
    """The offsets again after the run: across hosts they are applied as a straight line from
    the first estimate to this one (host clocks drift apart by parts per million, ms over a
    long run), and the drift is reported. Also the GPU event-to-host mapping's own error."""
    after = time.perf_counter()
    est = estimate_clock_offsets(rank.rank, rank.world_size, group)
    offset_after = est["offset_s"][rank.rank]
    span = max(after - clocks["at_s"], 1e-9)
    mapping = OffsetLine(clocks["at_s"], clocks["estimated_offset_s"], after, offset_after)
    applied = mapping if not clocks["same_host"] else OffsetLine.none()
    return {**clocks, "estimated_offset_after_s": offset_after, "at_after_s": after,
            "drift_ppm": (offset_after - clocks["estimated_offset_s"]) / span * 1e6,
            "error_s": max(clocks["error_s"], est["error_s"][rank.rank]),
            "applied": applied}


def _result(run: RankRun, rank, positions: list[int], warmup: int, clocks: dict, cpu: dict,
            gpu: dict | None, peak_memory: dict) -> dict:
    """The results of the iterations run at ``positions`` (the first ``warmup`` of them are the
    warm-up); the others (local ones of a paired run, the contention loop's) are left out."""
    kept = positions[warmup:]
    result = {
        "rank": rank.rank, "host": socket.gethostname(), "device": str(next(run.model.parameters()).device),
        "loss": [float(run.losses[n]) for n in kept],
        "cpu": cpu, "gpu": gpu,
        "memory": peak_memory,
        "bucket_sizes_bytes": ddp_hooks.bucket_sizes_bytes(run.ddp),
        "buffer_bytes": sum(b.numel() * b.element_size() for b in run.model.buffers()),
        "buffer_shapes": [[list(b.shape), str(b.dtype).replace("torch.", "")]
                          for b in run.model.buffers()],
        "bucket_shapes": getattr(run.buckets and run.buckets.launcher, "shapes", None),
        "threads": torch.get_num_threads(), "loader_workers": run.loader.num_workers,
        "skipped_samples": run.skipped, "warmup": warmup,
        "clock": {k: v for k, v in clocks.items() if k != "applied"},
        "sync_bn_channels": [m.num_features for m in sync_batch_norms(run.model)],
        "injected": [run.injected[n] for n in kept],
    }
    # One clock read per iteration at the top of the loop: the bare loop's only measurement, and
    # an independent check of the timeline's iteration times.
    result["loop_iteration"] = [run.cut.get(n, run.starts[n + 1]) - run.starts[n] for n in kept]
    if not run.timeline.enabled:
        result["iteration"] = result["loop_iteration"]
        return result
    resolved = run.timeline.resolve(clocks["applied"])
    timeline = [resolved[n] for n in positions]
    result["clock"]["kind"] = run.timeline.clock.name
    # what the GPU event-to-host mapping may be off by (0 on the host clock), beside the
    # cross-host offsets' error: together blame's resolution
    result["clock"]["alignment_error_s"] = run.timeline.clock.error_s()
    result["timeline"] = timeline
    measured = [phase_durations(it) for it in timeline[warmup:]]
    result["iteration"] = [sum(p.values()) for p in measured]
    result["phases"] = {p: [m[p] for m in measured] for p in PHASES}
    result["ddp_timers"] = ([run.stats.per_iteration.get(n) for n in kept]
                            if run.stats else None)
    return result
