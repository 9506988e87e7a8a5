"""The same workload under DeepSpeed (ZeRO stage 0, 1 or 2): what one rank runs.

Each optimizer step (one iteration), in the order it runs, with ``K`` = ``grad_accum``::

    K times:
        batch = next(loader); data = preprocessor(batch)   -> data_wait
        loss = engine(data)                                 -> forward
        engine.backward(loss)                               -> backward; every collective the
                                                               engine runs inside it (ZeRO-2's
                                                               gradient reduction in the hooks,
                                                               ZeRO-0/1's at the boundary) is
                                                               exposed_comm
        engine.step()                                       -> optimizer (the all-gather of the
                                                               updated partitions: exposed_comm)
    LR schedulers, heartbeat                                -> other

The model, data pipeline, optimizer (the preset's AdamW with its parameter groups, handed to
DeepSpeed as a client optimizer), seed and images per device are the preset's, as in
:mod:`swinkit.rank.ddp`. The precision is applied as the DDP loop applies it (autocast around
forward and loss, fp32 weights, gradients and reductions; see :func:`deepspeed_rank`), not
through DeepSpeed's ``bf16`` / ``fp16`` configs.

Instruments, and which are DeepSpeed's own:

* phases: swinkit's timeline marks around the engine calls; collectives: wrappers on DeepSpeed's
  communication backend (:mod:`swinkit.rank.engine_collectives`), so every collective ZeRO runs is
  on the timeline with its bytes and blame can split it into waiting and transfer, and SyncBN's
  (torch.distributed's) as the DDP loop records them;
* ``engine_call_marks``: where the loop's own marks sit among the iteration's marks (per
  micro-step: data_wait, forward, backward, optimizer), so the engine calls' spans are read on
  the timeline's clock (CUDA events on GPU) when DeepSpeed's timers are checked against them;
* ``ds_timers``: DeepSpeed's ``wall_clock_breakdown`` timers (engine: fwd, bwd, bwd_inner,
  bwd_allreduce, step; ZeRO optimizer: optimizer_gradients, optimizer_step,
  optimizer_allgather), captured per optimizer step instead of printed. On GPU they are CUDA
  events read at every step (a synchronisation), so they run only when asked (``ds_timers``);
* ``comms_logger``: DeepSpeed's comms logger (every collective, its message size, count and
  latency). It synchronises after every collective, so it runs in a separate pass of
  ``comm_pass_iters`` extra optimizer steps after the measured ones; its counts are per step.
"""
from __future__ import annotations

import logging

import torch
import torch.distributed as dist

from swinkit.config import load_config
from swinkit.data.loader import batches, build_loader
from swinkit.rank.engine_collectives import CollectiveRecorder
from swinkit.measure import memory, sync_bn
from swinkit.measure.samplers import CpuUsage, NvmlSampler
from swinkit.measure.clocks import make_clock
from swinkit.measure.timeline import Timeline
from swinkit.model.precision import AutocastForward
from swinkit.model.segmentor import build_optimizer, build_segmentor
from swinkit.quiet_libraries import import_deepspeed
from swinkit.rank.dp_parts import module_bytes
from swinkit.rank.rank_clocks import clock_offsets
from swinkit.rank.errors import out_of_memory_named
from swinkit.rank.skeleton import (Window, cuda_peaks, identity, loop_iterations, rank_precision,
                                   run_steps, seed_rank, timeline_fields)

ENTRY = "swinkit.rank.deepspeed:deepspeed_rank"
DS_TIMERS = ("fwd", "bwd", "bwd_inner", "bwd_allreduce", "step",
             "optimizer_gradients", "optimizer_step", "optimizer_allgather")


def ds_config(images_per_rank: int, zero: int, grad_accum: int, timers: bool) -> dict:
    """DeepSpeed's configuration: DeepSpeed's defaults except what makes it the same workload
    (micro-batch = the preset's images per device, fp32 weights, the accumulation steps asked
    for) and what keeps it quiet (no periodic prints). Its ``bf16`` and ``fp16`` stay off in
    every precision: they keep the weights themselves in half precision (fp32 master copies in
    the optimizer) and reduce the gradients in it, a different training from the DDP loop's;
    the precision is autocast, entered by the module DeepSpeed runs (:func:`deepspeed_rank`)."""
    return {
        "train_micro_batch_size_per_gpu": images_per_rank,
        "gradient_accumulation_steps": grad_accum,
        "zero_optimization": {"stage": zero},
        "zero_allow_untested_optimizer": True,   # the preset's torch AdamW as client optimizer
        "fp16": {"enabled": False}, "bf16": {"enabled": False},
        "gradient_clipping": 0.0,
        "wall_clock_breakdown": timers,
        "steps_per_print": 2**31 - 1,
        "comms_logger": {"enabled": False},
    }


class _TimerSink:
    """DeepSpeed prints its timers (``SynchronizedWallClockTimer.log``); this keeps them,
    seconds by name, reset as DeepSpeed resets them."""

    def __init__(self):
        self.pending: dict[str, float] = {}

    def install(self) -> None:
        from deepspeed.utils.timer import SynchronizedWallClockTimer
        sink = self

        def log(timer_self, names, normalizer=1.0, reset=True, memory_breakdown=False, ranks=None):
            for name in names:
                if name in timer_self.timers and not name.endswith("_microstep"):
                    ms = timer_self.timers[name].elapsed(reset=reset) / normalizer
                    sink.pending[name] = sink.pending.get(name, 0.0) + ms / 1e3
                elif name in timer_self.timers and reset:
                    timer_self.timers[name].reset()
        SynchronizedWallClockTimer.log = log

    def take(self) -> dict[str, float]:
        out, self.pending = self.pending, {}
        return out


def _quiet_deepspeed() -> None:
    from deepspeed.utils import logger
    logger.setLevel(logging.WARNING)


def _skip_shm_op() -> None:
    """On CPU, DeepSpeed's communication backend JIT-compiles a shared-memory C++ op when it
    starts (a minute or more on 2 cores, once per machine, and again when concurrent runs race
    on its build folder). Only ``inference_all_reduce`` uses it; training's collectives go
    through torch.distributed either way, so the op is not built (its builder returning None is
    DeepSpeed's own path for a platform without it)."""
    import importlib
    # not ``import deepspeed.comm.torch as m``: deepspeed.comm has an attribute ``torch`` (the
    # torch package), which that statement binds instead of the submodule
    ds_torch = importlib.import_module("deepspeed.comm.torch")
    ds_torch.build_shm_op = lambda: None


def deepspeed_rank(rank, preset: str = "test", iters: int = 10, warmup: int = 3,
                   workers: int | None = None, data_root: str | None = None,
                   overrides: dict | None = None, device: str | None = None, seed: int = 0,
                   zero: int = 1, grad_accum: int = 1, ds_timers: bool | None = None,
                   comm_pass_iters: int = 2) -> dict:
    """Run ``warmup + iters`` optimizer steps (plus ``comm_pass_iters`` with DeepSpeed's comms
    logger on) of the preset's segmentor under DeepSpeed ZeRO ``zero``; return this rank's
    measurements (the shape :func:`swinkit.rank.ddp.ddp_rank` returns, plus DeepSpeed's
    timers, comms log, memory and model state)."""
    # Long: a rank's whole run in the order it happens (set-up, the step, the measured
    # window and read-out on the shared skeleton, DeepSpeed's comms pass); kept in one piece so
    # it reads beside the DDP loop.
    deepspeed = import_deepspeed()
    import deepspeed.comm as ds_comm
    _quiet_deepspeed()
    _skip_shm_op()
    cfg = load_config(preset, data_root, overrides, device=device)
    cuda = cfg.device == "cuda"
    dev = torch.device("cuda", rank.local_rank) if cuda else torch.device("cpu")
    want_timers = (not cuda) if ds_timers is None else ds_timers
    deepspeed.init_distributed(dist_backend=dist.get_backend(), auto_mpi_discovery=False)
    baseline_rss = memory.rss_bytes()
    amp = rank_precision(cfg, dev)   # TF32 switches before the model, as DDP's rank
    seed_rank(seed, rank.rank)
    model = build_segmentor(cfg).to(dev)
    whole = module_bytes(model)   # what the engine record's traffic model counts
    optim_wrapper, schedulers = build_optimizer(cfg, model)
    sink = _TimerSink()
    if want_timers:
        sink.install()
    config = ds_config(cfg.images_per_rank, zero, grad_accum, want_timers)
    # The precision as the DDP loop applies it: autocast around forward and loss, the weights,
    # gradients and ZeRO's reductions fp32. Entered inside the module DeepSpeed runs, not
    # around engine(): DeepSpeed's forward switches off a CUDA autocast entered outside it
    # unless its own ``torch_autocast`` section is on, and that section reduces the linears'
    # and convolutions' gradients in bf16. DeepSpeed's ``bf16`` config is not used either (bf16
    # weights, fp32 master copies, bf16 reductions): a different training, left for a
    # separate comparison. fp16 is refused before launch (its loss scaling would go through
    # engine.backward and ZeRO's partitioned gradients, not a GradScaler).
    engine, _, _, _ = deepspeed.initialize(model=AutocastForward(model, amp),
                                           optimizer=optim_wrapper.optimizer,
                                           config=config, dist_init_required=False)
    sink.take()  # nothing from start-up
    loader = build_loader(cfg, rank=rank.rank, world_size=rank.world_size, workers=workers,
                          seed=seed, timeout_s=120 if (workers or cfg.loader_workers) else 0)
    stream = batches(loader)
    timeline = Timeline(make_clock(cuda))
    recorder = CollectiveRecorder(timeline, ds_comm.comm.cdb)
    # SyncBN's collectives go through torch.distributed, not DeepSpeed's backend: recorded as
    # the DDP loop records them, so both engines' blame sees the same waits
    sync_bn_modules = sync_bn.record_module_collectives(timeline, model)
    clocks = clock_offsets(rank)
    cpu, nvml = CpuUsage(), NvmlSampler(rank.local_rank) if cuda else None
    losses, timers, calls = [], [], []

    def step(tl):
        tl.begin()
        micro, edges = [], []

        def mark(phase):  # the loop's own marks, between the recorder's, remembered by position
            tl.mark(phase)
            edges.append(len(tl.current.marks) - 1)
        for _ in range(grad_accum):
            data = model.data_preprocessor(next(stream), training=True)
            mark("data_wait")
            recorder.phase = "forward"
            loss, _ = model.parse_losses(engine(**data, mode="loss"))
            mark("forward")
            recorder.phase = "backward"
            engine.backward(loss)
            mark("backward")
            recorder.phase = "optimizer"
            engine.step()  # at the accumulation boundary: the optimizer step; else bookkeeping
            mark("optimizer")
            recorder.phase = None
            micro.append(loss.detach())
        for scheduler in schedulers:
            scheduler.step()
        losses.append(torch.stack(micro).mean())
        calls.append([edges[i:i + 4] for i in range(0, len(edges), 4)])

    window = Window(cpu, nvml, cuda_peaks(cuda))

    def one(n):
        step(timeline)
        timers.append(sink.take() if want_timers else None)
    with out_of_memory_named(rank.rank, cfg):
        starts = run_steps(rank, warmup + iters, warmup, one, window,
                           drain=torch.cuda.synchronize if cuda else None)
        timeline.end()
        cpu_use, gpu_use = window.stop()
        peak = memory.peak_memory(cuda, baseline_rss)
        inner = getattr(engine.optimizer, "optimizer", engine.optimizer)
        state = memory.model_state(model, inner)
        # resolved before the comms pass: its forwards run SyncBN, whose records would
        # otherwise land in the last measured iteration
        resolved = timeline.resolve(clocks["applied_offset_s"])
        comms = _comms_pass(engine, model, stream, schedulers, comm_pass_iters, grad_accum,
                            ds_comm, rank, warmup + iters)
    kept = list(range(warmup, warmup + iters))
    return {
        **identity(rank, str(dev), losses, kept, warmup, loader.num_workers),
        "engine": "deepspeed", "zero": zero, "grad_accum": grad_accum,
        "cpu": cpu_use, "gpu": gpu_use,
        "clock": dict(clocks, kind=timeline.clock.name),
        **timeline_fields(resolved, warmup),
        "loop_iteration": loop_iterations(starts, kept),
        "ds_timers": timers[warmup:] if want_timers else None,
        "engine_call_marks": calls[warmup:], "sync_bn_modules": sync_bn_modules,
        "comms_logger": comms,
        "memory": peak, "model_state": state, "module_bytes": whole,
        "ds_config": config, "deepspeed": deepspeed.__version__,
        "images_per_step": cfg.images_per_rank * grad_accum, "precision": amp.to_dict(),
    }


def _comms_pass(engine, model, stream, schedulers, iters, grad_accum, ds_comm, rank, step0) -> dict | None:
    """``iters`` more optimizer steps with DeepSpeed's comms logger on (it synchronises after
    each collective, so never during the measured steps): per-step count and message bytes of
    each collective DeepSpeed ran, by its record name."""
    if iters <= 0:
        return None
    logger = ds_comm.comms_logger
    ds_comm.configure(enabled=True, prof_all=True, verbose=False, debug=False)
    logger.comms_dict.clear()
    try:
        for i in range(iters):
            rank.heartbeat(step0 + i)
            for _ in range(grad_accum):
                data = model.data_preprocessor(next(stream), training=True)
                loss, _ = model.parse_losses(engine(**data, mode="loss"))
                engine.backward(loss)
                engine.step()
            for scheduler in schedulers:
                scheduler.step()
        raw = {name: {int(size): list(v) for size, v in sizes.items()}
               for name, sizes in logger.comms_dict.items()}
    finally:
        ds_comm.configure(enabled=False)
        logger.comms_dict.clear()
    ops = {}
    world = dist.get_world_size()
    for name, sizes in raw.items():
        logged = sum(size * v[0] for size, v in sizes.items()) / iters
        # The logger keeps the per-rank shard of gathers and scatters (and multiplies by N in
        # its bandwidth); the whole message, as swinkit's records count it, is N times that.
        scale = world if name.split("@")[0] in _SHARD_LOGGED else 1
        ops[name] = {
            "count_per_step": sum(v[0] for v in sizes.values()) / iters,
            "logged_bytes_per_step": logged,
            "bytes_per_step": logged * scale,
            "sizes": {str(size): v[0] / iters for size, v in sizes.items()},
            "latency_ms_median": _median([x for v in sizes.values() for x in v[1]]),
        }
    return {"source": "deepspeed.comm comms_logger (prof_all), separate pass",
            "steps": iters, "ops": ops,
            "bytes_per_step": sum(o["bytes_per_step"] for o in ops.values())}


_SHARD_LOGGED = ("all_gather", "all_gather_into_tensor", "all_gather_base", "reduce_scatter",
                 "reduce_scatter_tensor", "reduce_scatter_base")


def _median(values):
    values = sorted(values)
    return values[len(values) // 2] if values else None
