"""The same workload under FSDP2 (torch's ``fully_shard``): what one rank runs.

Each backbone stage is a unit of its own and the rest of the model (patch embedding, norms, the
decode and auxiliary heads) the root unit (torchtitan's layout: a unit per block of layers; the
heads cannot be units of their own, MMSeg calls their ``loss`` method, not their forward, and
FSDP2 gathers a unit's parameters around its forward). Each rank keeps 1/N of
every parameter, gradient and optimizer state; a unit's parameters are all-gathered just before
its forward and freed after it, gathered again for its backward, and its gradients
reduce-scattered after its backward (parameters resharded after forward, ZeRO-3's traffic;
torch keeps the root unit's gathered from forward to backward).

Each optimizer step (one iteration), in the order it runs, with ``K`` = ``grad_accum``::

    K times:
        batch = next(loader); data = preprocessor(batch)   -> data_wait
        loss = model(data)                                  -> forward (every all-gather in
                                                               it: exposed_comm)
        (loss / K).backward()                               -> backward (all-gathers, and the
                                                               reduce-scatters of the last
                                                               micro-batch: exposed_comm)
    optimizer.step(); zero_grad()                           -> optimizer
    LR schedulers, heartbeat                                -> other

Micro-batches before the last skip the reduce-scatter (``set_requires_gradient_sync(False)``:
they accumulate unsharded gradients), as DDP's ``no_sync`` does. The model, data pipeline,
optimizer (the preset's AdamW with its parameter groups, built on the sharded parameters), seed
and images per device are the preset's, as in :mod:`swinkit.rank.ddp`.

The precision is applied as the DDP loop applies it (:func:`~swinkit.rank.skeleton.rank_precision`):
``torch.autocast`` around forward and loss only, TF32 switches as the precision sets them; the
weights, their gradients and the reduce-scatter stay fp32. Not FSDP2's ``MixedPrecisionPolicy``:
it casts the gathered parameters to its ``param_dtype`` (the all-gathers move bf16) and reduces
the gradients in its ``reduce_dtype``, a different training with different traffic, so the
comparison with DDP would compare precisions, not engines. fp16 is refused before launch: its
loss scaling would unscale and inf-check FSDP's sharded gradients (DTensors, each rank's inf
check agreed across ranks), which the DDP loop's GradScaler was not built or tested for.

Collectives: FSDP2 calls them through ``torch.distributed`` (all-gather and reduce-scatter,
:data:`swinkit.rank.engine_collectives.FSDP_OPS`), so the recorder wraps that module's functions
in this rank's process; SyncBN's are recorded as in the DDP loop. Memory: the rank's peak and
the model state it holds (its shards: :func:`swinkit.measure.memory.tensor_bytes` counts a
DTensor's local part); ``module_bytes`` is the whole model's, which the traffic model reads.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from swinkit.config import load_config
from swinkit.data.loader import batches, build_loader
from swinkit.measure import memory, sync_bn
from swinkit.measure.clocks import make_clock
from swinkit.measure.samplers import CpuUsage, NvmlSampler
from swinkit.measure.timeline import Timeline
from swinkit.model.segmentor import build_optimizer, build_segmentor
from swinkit.rank.devices import find_fully_shard
from swinkit.rank.dp_parts import module_bytes
from swinkit.rank.engine_collectives import FSDP_OPS, CollectiveRecorder
from swinkit.rank.errors import out_of_memory_named
from swinkit.rank.rank_clocks import clock_offsets
from swinkit.rank.skeleton import (Window, cuda_peaks, identity, loop_iterations, rank_precision,
                                   run_steps, seed_rank, timeline_fields)

ENTRY = "swinkit.rank.fsdp2:fsdp2_rank"


def shard(model: torch.nn.Module, fully_shard) -> list[str]:
    """``fully_shard`` each backbone stage, then the root; the units' names."""
    units = [f"backbone.stages.{i}" for i in range(len(model.backbone.stages))]
    for name in units:
        fully_shard(model.get_submodule(name))
    fully_shard(model)
    return units + ["(root)"]


def _build(rank, cfg, seed: int, cuda: bool):
    """The sharded model, its optimizer and schedulers, the whole model's bytes, its units,
    the device and the training precision (applied before the model exists, as DDP's rank)."""
    dev = torch.device("cuda", rank.local_rank) if cuda else torch.device("cpu")
    amp = rank_precision(cfg, dev)
    seed_rank(seed, rank.rank)
    model = build_segmentor(cfg).to(dev)
    whole = module_bytes(model)   # before sharding: what the traffic model counts
    units = shard(model, find_fully_shard())
    optim_wrapper, schedulers = build_optimizer(cfg, model)  # on the sharded parameters
    return model, optim_wrapper.optimizer, schedulers, whole, units, dev, amp


def fsdp2_rank(rank, preset: str = "test", iters: int = 10, warmup: int = 3,
               workers: int | None = None, data_root: str | None = None,
               overrides: dict | None = None, device: str | None = None, seed: int = 0,
               grad_accum: int = 1) -> dict:
    """Run ``warmup + iters`` optimizer steps of the preset's segmentor under FSDP2; return
    this rank's measurements (the shape :func:`swinkit.rank.ddp.ddp_rank` returns, plus the
    units, memory, the model state it holds and the whole model's bytes)."""
    cfg = load_config(preset, data_root, overrides, device=device)
    cuda = cfg.device == "cuda"
    baseline_rss = memory.rss_bytes()
    model, optimizer, schedulers, whole, units, dev, amp = _build(rank, cfg, seed, cuda)
    loader = build_loader(cfg, rank=rank.rank, world_size=rank.world_size, workers=workers,
                          seed=seed, timeout_s=120 if (workers or cfg.loader_workers) else 0)
    stream = batches(loader)
    timeline = Timeline(make_clock(cuda))
    recorder = CollectiveRecorder(timeline, dist, ops=FSDP_OPS)
    sync_bn_modules = sync_bn.record_module_collectives(timeline, model)
    clocks = clock_offsets(rank)
    losses = []
    step = _step(model, optimizer, schedulers, stream, timeline, recorder, grad_accum, losses,
                 amp)
    window = Window(CpuUsage(), NvmlSampler(rank.local_rank) if cuda else None, cuda_peaks(cuda))
    with out_of_memory_named(rank.rank, cfg):
        starts = run_steps(rank, warmup + iters, warmup, step, window,
                           drain=torch.cuda.synchronize if cuda else None)
        timeline.end()
    cpu_use, gpu_use = window.stop()
    kept = list(range(warmup, warmup + iters))
    return {
        **identity(rank, str(dev), losses, kept, warmup, loader.num_workers),
        "engine": "fsdp2", "grad_accum": grad_accum, "cpu": cpu_use, "gpu": gpu_use,
        "clock": dict(clocks, kind=timeline.clock.name),
        **timeline_fields(timeline.resolve(clocks["applied_offset_s"]), warmup),
        "loop_iteration": loop_iterations(starts, kept), "sync_bn_modules": sync_bn_modules,
        "memory": memory.peak_memory(cuda, baseline_rss),
        "model_state": memory.model_state(model, optimizer), "module_bytes": whole,
        "fsdp_units": units, "images_per_step": cfg.images_per_rank * grad_accum,
        "precision": amp.to_dict(),
    }


def _step(model, optimizer, schedulers, stream, timeline, recorder, grad_accum: int,
          losses: list, amp):
    """One optimizer step of K micro-batches, its phases marked (see the module doc); ``amp``
    the training precision (:class:`~swinkit.model.precision.TrainingPrecision`)."""
    def step(n):
        timeline.begin()
        micro = []
        for i in range(grad_accum):
            model.set_requires_gradient_sync(i == grad_accum - 1)  # reduce-scatter once
            data = model.data_preprocessor(next(stream), training=True)
            timeline.mark("data_wait")
            recorder.phase = "forward"
            with amp.autocast():   # forward and loss only; weights and gradients stay fp32
                loss, _ = model.parse_losses(model(**data, mode="loss"))
            timeline.mark("forward")
            recorder.phase = "backward"
            (loss / grad_accum).backward()
            timeline.mark("backward")
            recorder.phase = None
            micro.append(loss.detach())
        recorder.phase = "optimizer"
        optimizer.step()
        optimizer.zero_grad()
        timeline.mark("optimizer")
        recorder.phase = None
        for scheduler in schedulers:
            scheduler.step()
        losses.append(torch.stack(micro).mean())
    return step
