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
import statistics
import time

import torch
import torch.distributed as dist

from swinkit.injection import Injection
from swinkit.measure import ddp_hooks, memory
from swinkit.measure.phases import PHASES  # noqa: F401  also imported from here by benchmarks/
from swinkit.measure.timeline import phase_durations
from swinkit.ddp_options import DDPOptions
from swinkit.rank.ddp_setup import RankRun, setup_rank
from swinkit.rank.delays import GATE, per_iteration
from swinkit.rank.errors import out_of_memory_named
from swinkit.rank.step_switch import schedule, sync_batch_norms
from swinkit.rank.skeleton import Window, cuda_peaks, drained_now, identity, timeline_fields
from swinkit.rank.rank_clocks import all_agree, clock_drift, clock_offsets


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
        ddp_options: :class:`~swinkit.ddp_options.DDPOptions` fields.
        local: communicate nothing (see :func:`~swinkit.rank.ddp_setup.setup_rank`); the component measurement.
        comm_load: with ``local``, ``comm_load(run)`` returns a
            :class:`~swinkit.measure.contention.CommLoad`; after the measured iterations the
            loop runs a few more with it all-reducing beside them (``result["contention"]``).
        paired: after ``warmup``, alternate optimizer steps of DDP and local iterations
            (:func:`schedule`), ``iters`` of each; the result is the DDP iterations', with the
            local ones in ``result["local"]`` (timeline, iteration, loss).
    """
    # Long: a rank's whole run in the order it happens (set-up, warm-up, measured steps with
    # the paired launch's switches, read-out); the parts every engine shares are in skeleton.py.
    if local and paired:
        raise ValueError("local and paired exclude each other")
    # what this rank receives: each --inject spec keeps its own ranks
    injection = Injection.from_dict(inject).for_rank(rank.rank)
    options = DDPOptions.from_dict(ddp_options)
    run = setup_rank(rank, preset, data_root, overrides, device, workers, injection, seed, bare,
                 ddp_timers, options, local, paired)
    clocks = clock_offsets(rank, run.control)
    profiler = _trace_context(trace_dir, rank.rank, warmup, iters)
    profiler and profiler.start()
    order = schedule(warmup, iters, options.grad_accum, paired)
    switch = run.buckets.launcher if paired else None
    window = Window(run.cpu, run.nvml, cuda_peaks(run.cuda))  # as every engine's loop
    with out_of_memory_named(rank.rank, run.cfg):
        for n, (kind, it) in enumerate(order):
            if n == warmup:
                window.start()
            rank.heartbeat(n)  # a small file write: lands in the previous iteration's tail
            GATE.on = injection.on_iteration(it)
            GATE.iteration = n  # what each measured injection is filed under
            run.injected.append(GATE.on and injection.active)  # this rank's own injection
            if switch and n >= warmup and (n == warmup or order[n - 1][0] != kind):
                # before every measured optimizer step (the same n on every rank): the ranks
                # leave their local steps at different times, so line them up outside any
                # iteration, or the DDP step would wait for a skew no DDP run has. Before the
                # local steps too, so that both kinds start from the same state (with a
                # barrier before the DDP steps only, they loaded ~1 ms slower)
                run.timeline.end()  # on GPU its end event queues behind the step's kernels
                if n:  # the host's clock read once those kernels are done, as at the loop's end
                    run.cut[n - 1] = drained_now(_drain(run))
                dist.barrier()
                run.timeline.clock.anchor()  # outside any iteration: re-map GPU events
            switch and switch.use(local=kind != "ddp")
            if switch and run.meet:
                run.meet.on = kind == "local"
            run.starts.append(time.perf_counter())
            _step(run, it)
            run.stats and run.stats.poll()
            profiler and profiler.step()
        # the last iteration's kernels, before its end is read (the bare loop's clock)
        run.starts.append(drained_now(_drain(run)))
        run.timeline.enabled and run.timeline.end()  # what follows is in no measured iteration
        cpu, gpu = window.stop()
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
    clocks = clock_drift(rank, run.control, clocks)
    GATE.iteration = None
    # once, after the run: reading a CUDA delay's events waits for them
    measured = {name: delay.take_measured() for name, delay in run.delays.items()}
    main = [n for n, (kind, _) in enumerate(order) if kind in ("main", "ddp")]
    result = _result(run, rank, main, warmup, clocks, cpu, gpu, peak)
    # seconds actually injected per measured iteration (the ground truth recovery is held to)
    result["injected_s"] = {name: per_iteration(m, main[warmup:]) for name, m in measured.items()}
    # and per injected call (a forward; a bucket's launch): what one requested delay became
    result["injected_call_s"] = {name: statistics.median(s for _, s in m) if m else None
                                 for name, m in measured.items()}
    resolved = (run.timeline.resolve(clocks["applied"])
                if run.timeline.enabled and (paired or load is not None) else [])
    for kind in ("local",) if paired else ():
        its = [n for n, (k, _) in enumerate(order) if k == kind]
        if its:
            result[kind] = {"timeline": [resolved[n] for n in its],
                            "iteration": [sum(phase_durations(resolved[n]).values()) for n in its],
                            "loss": [float(run.losses[n]) for n in its],
                            "injected_s": {name: per_iteration(m, its)
                                           for name, m in measured.items()}}
    if load is not None:
        result["contention"] = {"backward_loaded_s": [phase_durations(it)["backward"]
                                                      for it in resolved[len(order):]],
                                "rounds_loaded_s": load.rounds}
    return result


def _drain(run: RankRun):
    """What waits for this rank's queued device work: None on CPU."""
    return torch.cuda.synchronize if run.cuda else None


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
        if all_agree(enough or it - first >= max_iters, run.control):
            break
    load.finish()
    load.join_or_raise(timeout_s=600)


def _result(run: RankRun, rank, positions: list[int], warmup: int, clocks: dict, cpu: dict,
            gpu: dict | None, peak_memory: dict) -> dict:
    """The results of the iterations run at ``positions`` (the first ``warmup`` of them are the
    warm-up); the others (local ones of a paired run, the contention loop's) are left out."""
    kept = positions[warmup:]
    result = {
        **identity(rank, str(next(run.model.parameters()).device), run.losses, kept, warmup,
                   run.loader.num_workers),
        "cpu": cpu, "gpu": gpu,
        "memory": peak_memory,
        "bucket_sizes_bytes": ddp_hooks.bucket_sizes_bytes(run.ddp),
        "buffer_bytes": sum(b.numel() * b.element_size() for b in run.model.buffers()),
        "buffer_shapes": [[list(b.shape), str(b.dtype).replace("torch.", "")]
                          for b in run.model.buffers()],
        "bucket_shapes": getattr(run.buckets and run.buckets.launcher, "shapes", None),
        "skipped_samples": run.skipped,
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
    result.update(timeline_fields(timeline, warmup))
    result["ddp_timers"] = ([run.stats.per_iteration.get(n) for n in kept]
                            if run.stats else None)
    return result
