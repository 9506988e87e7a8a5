"""The instrumented DDP iteration: what one rank runs (:func:`ddp_rank`).

Each iteration, in the order it runs (phases in :mod:`swinkit.measure.phases`)::

    batch = next(loader); data = preprocessor(batch)      -> data_wait
    with autocast: loss = DDP(model)(data)                 -> forward   (buffer broadcast inside)
    scaling.backward(loss)                                 -> backward until the last bucket is
                                                              ready, then exposed_comm
    scaling.step(optimizer); optimizer.zero_grad()         -> optimizer
    LR schedulers, heartbeat                               -> other

The precision is the spec's (:mod:`swinkit.model.precision`, set up by
:func:`~swinkit.rank.ddp_setup.setup_rank`): autocast around forward and loss only, fp16's
GradScaler in backward and step, every weight, gradient and all-reduce in fp32.

Every boundary and every collective goes on this rank's :class:`~swinkit.measure.timeline.Timeline`
(CUDA events on GPU, read after the run; perf_counter on CPU), so the ranks' timelines can be
laid side by side and each wait blamed on its cause. A bare run (``spec.bare``) runs the same
loop on a null clock: no marks, hooks or DDP timers, one clock read per iteration (to measure
what the instrumentation costs).

Which steps run, and what switches between them, is the rank's
:class:`~swinkit.rank.plan.StepPlan` (a plain run: DDP steps only); the loop reads top to
bottom on the skeleton every engine shares (:func:`~swinkit.rank.skeleton.run_steps`): set up,
each step of the plan, read out (:mod:`swinkit.rank.ddp_readout`).
"""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from swinkit.measure import ddp_hooks, memory
from swinkit.measure.phases import PHASES  # noqa: F401  also imported from here by benchmarks/
from swinkit.rank.ddp_readout import Usage, read_out
from swinkit.rank.ddp_setup import RankRun, setup_rank
from swinkit.rank.delays import GATE
from swinkit.rank.errors import out_of_memory_named
from swinkit.rank.plan import StepPlan
from swinkit.rank.rank_clocks import clock_drift, clock_offsets
from swinkit.rank.skeleton import Window, cuda_peaks, drained_now, run_steps
from swinkit.run_spec import RunSpec


def ddp_rank(rank, spec: RunSpec | dict, plan: StepPlan | None = None) -> dict:
    """Run ``spec``'s DDP training iterations on this rank, step by step as ``plan`` orders
    them (default: the plan ``spec`` asks for); return its measurements.

    Args:
        rank: the launch's handle (:class:`swinkit.launch.rank.Rank`): rank, world size,
            heartbeat.
        spec: a :class:`~swinkit.run_spec.RunSpec`, or its dict as it crossed the process
            hop (``job.json``).
        plan: the steps and what switches between them (:class:`StepPlan`); the component
            run passes its own, with the contention load as its tail.
    """
    spec = RunSpec.of(spec)
    plan = plan or StepPlan.for_spec(spec)
    run = setup_rank(rank, spec)
    clocks = clock_offsets(rank, run.control)
    profiler = _trace_context(spec.trace_dir, rank.rank, plan.warmup, spec.iters)
    window = Window(run.cpu, run.nvml, cuda_peaks(run.cuda))  # as every engine's loop

    def step(n: int) -> None:
        _step(run, plan.steps[n][1])
        run.stats and run.stats.poll()
        profiler and profiler.step()
    with out_of_memory_named(rank.rank, run.cfg):
        profiler and profiler.start()
        starts = run_steps(rank, len(plan), plan.warmup, step, window,
                           before=lambda n: _switch(run, plan, n), drain=_drain(run))
        run.timeline.enabled and run.timeline.end()  # what follows is in no measured step
        cpu, gpu = window.stop()
        usage = Usage(cpu, gpu, memory.peak_memory(run.cuda, run.memory_baseline))
        if plan.tail:
            plan.tail.run(run, rank, lambda it: _step(run, it), len(plan))
        profiler and profiler.stop()
    clocks = clock_drift(rank, run.control, clocks)
    GATE.iteration = None
    return read_out(run, rank, plan, starts, clocks, usage)


def _switch(run: RankRun, plan: StepPlan, n: int) -> None:
    """Before step ``n``, outside it: the injection gate for its index, the ranks lined up
    where the plan changes kind, and its kind's switches (DDP or local collectives; meeting)."""
    kind, it = plan.steps[n]
    GATE.on = run.injection.on_iteration(it)
    GATE.iteration = n  # what each measured injection is filed under
    run.injected.append(GATE.on and run.injection.active)  # this rank's own injection
    if n in plan.line_up:
        # the same n on every rank: the ranks leave one kind of step at different times, so
        # they line up outside any step, or the next would wait for a skew no run of its
        # kind has
        run.timeline.end()  # on GPU its end event queues behind the step's kernels
        if n:  # the host's clock read once those kernels are done, as at the loop's end
            run.cut[n - 1] = drained_now(_drain(run))
        dist.barrier()
        run.timeline.clock.anchor()  # outside any step: re-map GPU events
    if run.switch:
        run.switch.use(local=kind.local)
    if run.meet:
        run.meet.on = kind.meets


def _drain(run: RankRun):
    """What waits for this rank's queued device work: None on CPU."""
    return torch.cuda.synchronize if run.cuda else None


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
    amp = run.amp
    with contextlib.nullcontext() if sync else run.ddp.no_sync():
        # autocast around forward and loss only: the weights, their gradients and DDP's
        # all-reduce of them stay fp32 (autocast casts copies of the weights in the graph)
        with amp.autocast():
            loss, _ = run.model.parse_losses(run.ddp(**data, mode="loss"))
        tl.mark("forward")
        if run.buckets:
            run.buckets.reset()
        amp.scaling.backward(loss)  # fp16: the loss scaled first
    if sync and meet:  # and where DDP's last gradient all-reduce would
        meet(tl)
    if tl.enabled:
        ddp_hooks.record_grad_sync(tl, run.buckets)
    if sync:
        # torch's GradScaler around MMEngine's OptimWrapper, not its AmpOptimWrapper: that
        # asserts a CUDA (or NPU, MLU, MUSA) device at construction, so it cannot run the CPU
        # ranks, and scales the loss in bf16 too (swinkit.model.precision)
        amp.scaling.step(run.optim)  # fp16: unscaled, checked for inf/NaN, skipped if any
        amp.scaling.update()
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
