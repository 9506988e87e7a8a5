"""What one DDP rank builds before its loop (:func:`setup_rank`): the training precision, the
model under DDP with swinkit's comm hook, the injections, the timeline and its recorders, the
optimizer, the loader; held in a :class:`RankRun` that the loop (:mod:`swinkit.rank.ddp`) steps
through.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from swinkit.config import load_config
from swinkit.data.loader import batches, build_loader
from swinkit.injection import Injection
from swinkit.measure import ddp_hooks, memory, sync_bn
from swinkit.measure.clocks import make_clock
from swinkit.measure.samplers import CpuUsage, NvmlSampler
from swinkit.measure.timeline import Timeline
from swinkit.model.precision import TrainingPrecision, training_precision
from swinkit.model.segmentor import build_optimizer, build_segmentor
from swinkit.precision import DEFAULT as DEFAULT_PRECISION
from swinkit.ddp_options import DDPOptions
from swinkit.rank.devices import rank_device
from swinkit.rank.inject import comm_launcher, install
from swinkit.rank.meet import Meet
from swinkit.rank.skeleton import seed_rank
from swinkit.rank.step_switch import Switch, sync_batch_norms
from swinkit.run_spec import RunSpec


@dataclass
class RankRun:
    """Everything one rank's loop touches, built once by :func:`setup_rank`."""
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
    injection: Injection = field(default_factory=Injection)  # what this rank receives
    switch: Switch | None = None  # a paired run's DDP/local switch
    memory_baseline: int = 0
    cpu: CpuUsage = field(default_factory=CpuUsage)
    nvml: NvmlSampler | None = None
    losses: list = field(default_factory=list)
    # iteration index -> when it ended early: at a paired run's barrier, which is in no
    # iteration (else the next start ends it)
    cut: dict = field(default_factory=dict)
    skipped: list = field(default_factory=list)
    injected: list = field(default_factory=list)
    # local steps at N > 1: meet the other ranks where DDP would (swinkit.rank.meet)
    meet: Meet | None = None
    # a gloo group over every rank for the host's own agreements (clock offsets, when to stop
    # the contention loop): CPU messages whatever the backend, off the compute stream
    control: object = None
    # injections that measure what they inject ("compute" (the forward), "backward",
    # "optimizer", "comm"), read after the run
    delays: dict = field(default_factory=dict)
    # the training precision (set by setup_rank): autocast around forward and loss, fp16's
    # loss scaling in backward and step
    amp: TrainingPrecision | None = None


def setup_rank(rank, spec: RunSpec) -> RankRun:
    """Everything ``spec`` asks this rank's loop for. ``spec.local``: DDP over this rank alone
    with a hook that communicates nothing (the component measurement: DDP's bucketing, hooks
    and buffer sync, with nothing sent to another rank). ``spec.paired``: DDP over every rank
    whose hook and buffer broadcast can be switched to the local ones (:class:`Switch`). The
    device is the backend's (gloo ranks run on CPU whatever the preset says)."""
    # Long: every object the loop touches, built in the order DDP needs them (model, groups,
    # DDP, hooks, optimizer, loader); split, they would be passed around in a long tuple.
    dev = rank_device(dist.get_backend(), rank.local_rank)
    cfg = load_config(spec.preset, spec.data_root, spec.overrides, device=dev.type)
    cuda, options, bare = dev.type == "cuda", spec.ddp, spec.bare
    # before the model exists: TF32 and cuDNN's switches are the process's (checked against
    # this rank's device; the supervisor checked the name and fp16 on CPU before launch)
    amp = training_precision(spec.precision or cfg.get("precision", DEFAULT_PRECISION), dev,
                             cudnn_benchmark=bool(cfg.get("cudnn_benchmark", False)))
    injection = spec.injection.for_rank(rank.rank)  # each --inject spec keeps its own ranks
    install("pipeline", cfg, injection, rank.rank, cuda)  # each kind's hook: inject.HOOKS
    seed_rank(spec.seed, rank.rank)
    memory_baseline = memory.rss_bytes()
    model = build_segmentor(cfg).to(dev)
    delays = install("model", model, injection, rank.rank, cuda)
    # new_group is collective: every rank makes every singleton group, each keeps its own.
    singleton = ([dist.new_group([r]) for r in range(rank.world_size)][rank.rank]
                 if spec.local or spec.paired else None)
    alone = singleton if spec.local else None
    ddp = DistributedDataParallel(model, device_ids=[dev.index] if cuda else None,
                                  process_group=alone, **options.ddp_kwargs())
    timeline = Timeline(make_clock(cuda, enabled=not bare))
    # Locally the hook still runs (a compression hook's casts are compute), over the group of
    # one; an injected comm delay belongs to the collective, so it is not in the local run.
    launcher, measured = (
        (ddp_hooks.hook_launcher(options.comm_hook, options.powersgd_rank, alone, True), {})
        if spec.local else comm_launcher(injection, rank.rank, cuda))
    delays.update(measured)
    if launcher is None and options.comm_hook:
        launcher = ddp_hooks.hook_launcher(options.comm_hook, options.powersgd_rank)
    if spec.local:  # SyncBN over the group of one too: plain batch norm, nothing sent
        for module in sync_batch_norms(model):
            module.process_group = alone
    switch = _paired_switch(ddp, model, launcher, singleton, options, dev) if spec.paired else None
    launcher = switch or launcher
    buckets = None
    if not bare or launcher is not None:  # an injected launcher must run in the bare loop too
        buckets = ddp_hooks.BucketRecorder(timeline, process_group=alone,
                                           launcher=launcher or ddp_hooks.plain_launch)
        ddp.register_comm_hook(buckets, ddp_hooks.recording_allreduce_hook)
    buffers = None if bare else ddp_hooks.record_buffer_broadcast(timeline, ddp)
    if not bare:  # SyncBN's collectives (GPU presets, or cpu_sync_bn)
        sync_bn.record_module_collectives(timeline, model)
    # DDP's runtime sampling synchronises on CUDA events every forward: on GPU only on
    # request; never in a paired run, whose running averages would mix both kinds of step.
    want_timers = (not cuda) if spec.ddp_timers is None else spec.ddp_timers
    stats = ddp_hooks.DDPStats(ddp) if want_timers and not bare and not spec.paired else None
    optim, schedulers = build_optimizer(cfg, model)
    delays.update(install("optimizer", optim, injection, rank.rank, cuda))
    loader = build_loader(cfg, rank=rank.rank, world_size=rank.world_size, workers=spec.workers,
                          seed=spec.seed,
                          timeout_s=120 if (spec.workers or cfg.loader_workers) else 0)
    meet = (Meet(dev, on=spec.local) if (spec.local or spec.paired) and rank.world_size > 1
            else None)
    return RankRun(cfg, cuda, model, ddp, optim, schedulers, loader, batches(loader), timeline,
                   buckets, buffers, stats, options=options, injection=injection, switch=switch,
                   memory_baseline=memory_baseline,
                   nvml=NvmlSampler(rank.local_rank) if cuda else None, meet=meet,
                   control=dist.new_group(backend="gloo"), delays=delays, amp=amp)


def _paired_switch(ddp, model, launcher, singleton, options: DDPOptions, dev) -> Switch:
    """A paired run's switch between its DDP and local steps, routing the buffer broadcast
    and SyncBN with the buckets."""
    switch = Switch.for_options(launcher or ddp_hooks.plain_launch, singleton, options)
    switch.route_buffer_broadcast(ddp)
    switch.route_sync_batch_norm(model)
    # NCCL makes a group's communicator on its first collective: here, not inside the
    # first measured local forward
    dist._broadcast_coalesced(singleton, [torch.zeros(1, device=dev)], 1 << 20, 0)
    return switch
