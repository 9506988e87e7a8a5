"""The same workload under ``torch.nn.DataParallel``: one process drives N GPUs.

Each iteration the process loads N x the preset's images per device (one loader, the whole
batch, with N x the loader workers DDP gives each rank: the same worker budget for the same
images, so a DataParallel step is not starved by a loader sized for one GPU), the data
preprocessor puts it on device 0, and DataParallel splits it, replicates the
model onto every device, runs the replicas in threads and gathers their losses on device 0;
backward reduce-adds the replicas' gradients onto device 0, where the optimizer steps.

MMSeg's batches are a tensor of images plus a list of ``SegDataSample`` (labels inside), which
DataParallel's own scatter does not split: the pure-Python pieces that do are in
:mod:`swinkit.rank.dp_parts`, testable on CPU. :class:`SegDataParallel` is DataParallel with
that scatter and gather; :mod:`swinkit.rank.dp_vanilla` writes the same iteration with the
``torch.nn.parallel`` primitives and times each.

Phases: ``data_wait`` (loader + preprocessor to device 0), ``forward`` (for ``dp``: the whole
DataParallel call, copies included), ``backward`` (the replicas' backward and the gradient
reduce-add onto device 0, which runs inside autograd and is not separable from the host),
``optimizer``. ``dp-vanilla`` marks its scatter, replicate and gather as ``exposed_comm``.

The precision is the DDP loop's (:func:`~swinkit.rank.skeleton.rank_precision`): autocast
around forward and loss, entered by each replica in its own thread (:func:`dp_modules`), fp32
weights and gradients (the reduce-add onto device 0 included); fp16's GradScaler scales the
loss and unscales before the one optimizer's step, as in DDP's loop (one process, one
optimizer: it fits as it is).
"""
from __future__ import annotations

import socket

import torch
from torch import nn

from swinkit.measure import memory, sync_bn
from swinkit.measure.samplers import CpuUsage, NvmlSamplers
from swinkit.measure.clocks import make_clock
from swinkit.measure.timeline import Timeline

from swinkit.rank.dp_parts import (gather_bytes, gather_losses, module_bytes, scatter_bytes,
                                      split_batch)

ENTRY = "swinkit.rank.dp:dp_rank"


# ----------------------------------------------------------------- pure parts (CPU-testable)

def loader_workers(per_device: int, n_devices: int) -> dict:
    """The worker budget of DataParallel's one loader: ``per_device`` workers (what DDP gives
    each rank, which loads one device's images) for each of the ``n_devices`` devices it feeds.

    >>> loader_workers(4, 8)
    {'per_device': 4, 'devices': 8, 'total': 32}
    """
    if isinstance(per_device, bool) or not isinstance(per_device, int) or per_device < 0:
        raise ValueError(f"workers must be an integer >= 0, got {per_device!r}")
    if isinstance(n_devices, bool) or not isinstance(n_devices, int) or n_devices < 1:
        raise ValueError(f"n_devices must be an integer >= 1, got {n_devices!r}")
    return {"per_device": per_device, "devices": n_devices, "total": per_device * n_devices}


def device_peaks(indices, max_allocated, max_reserved) -> dict:
    """Peak memory of every device the process drives (DataParallel's replicas, and device 0
    holding the gathered outputs and the optimizer), keyed by CUDA index, and the largest.
    ``max_allocated`` / ``max_reserved``: ``torch.cuda.max_memory_*`` or stand-ins."""
    per_device = {str(i): {"peak_bytes": max_allocated(i), "peak_reserved_bytes": max_reserved(i)}
                  for i in indices}
    if not per_device:
        raise ValueError("indices is empty: no device to read")
    largest = max(per_device, key=lambda i: per_device[i]["peak_bytes"])
    return dict(per_device[largest], peak_device=int(largest), per_device=per_device)


# ----------------------------------------------------------------- DataParallel

class CopyLog:
    """Bytes of each copy of this iteration (scatter, replicate, gather); DataParallel's and
    the vanilla loop's methods add to it."""

    def __init__(self):
        self.rows: list[dict] = []
        self.current: dict = {}

    def begin(self) -> None:
        self.current = {"scatter": 0, "replicate": 0, "gather": 0, "grad_reduce": 0}
        self.rows.append(self.current)

    def add(self, kind: str, nbytes: int) -> None:
        if self.current:
            self.current[kind] += nbytes


class SegDataParallel(nn.DataParallel):
    """DataParallel that splits MMSeg batches (images and samples together) and gathers loss
    dicts (:func:`split_batch`, :func:`gather_losses`); copies are counted in ``copies``."""

    def __init__(self, module, device_ids=None, output_device=None, copies: CopyLog | None = None):
        super().__init__(module, device_ids=device_ids, output_device=output_device)
        self.copies = copies or CopyLog()
        self._weights: list[int] = []

    def scatter(self, inputs, kwargs, device_ids):
        if inputs:
            raise ValueError("SegDataParallel takes the batch as keywords (inputs=, data_samples=)")
        devices = [torch.device("cuda", d) if isinstance(d, int) else torch.device(d)
                   for d in device_ids]
        parts = split_batch(kwargs, devices)
        self._weights = [p["inputs"].shape[0] for p in parts]
        self.copies.add("scatter", scatter_bytes(parts, kwargs["inputs"].device))
        return tuple(() for _ in parts), tuple(parts)

    def replicate(self, module, device_ids):
        replicas = super().replicate(module, device_ids)
        sizes = module_bytes(module)
        self.copies.add("replicate", (sizes["params"] + sizes["buffers"]) * (len(replicas) - 1))
        self.copies.add("grad_reduce", sizes["grads"] * (len(replicas) - 1))
        return replicas

    def gather(self, outputs, output_device):
        target = torch.device("cuda", output_device) if isinstance(output_device, int) else output_device
        self.copies.add("gather", gather_bytes(outputs, target))
        return gather_losses(list(outputs), target, self._weights)


def dp_modules(model: nn.Module, amp, device_ids=None, copies: CopyLog | None = None):
    """What the DataParallel step runs: ``model`` wrapped so that its forward enters the
    precision's autocast in whichever thread runs it (:class:`~swinkit.model.precision.
    AutocastForward`: DataParallel runs each replica in a thread of its own, where the
    caller's autocast dtype does not reach), and :class:`SegDataParallel` over that. Returns
    (the wrapped module, which ``dp-vanilla`` replicates itself, and the DataParallel).
    ``device_ids`` None on a machine without GPUs: DataParallel then calls the module
    directly (the CPU seam tests drive)."""
    from swinkit.model.precision import AutocastForward
    module = AutocastForward(model, amp)
    return module, SegDataParallel(module, device_ids=device_ids, copies=copies)


# ----------------------------------------------------------------- the rank loop

def dp_rank(rank, preset: str = "test", iters: int = 10, warmup: int = 3,
            workers: int | None = None, data_root: str | None = None,
            overrides: dict | None = None, device: str | None = None, seed: int = 0,
            n_devices: int = 2, vanilla: bool = False, grad_accum: int = 1) -> dict:
    """``warmup + iters`` optimizer steps of the preset's segmentor under DataParallel on
    ``n_devices`` GPUs from this one process (``vanilla``: the primitives, each timed).
    ``workers``: loader workers per device, as DDP's are per rank (default: the preset's); the
    one loader gets ``workers x n_devices`` (``worker_budget`` in the result). Memory and NVML
    utilisation are reported for every device."""
    # Long: a run's whole course in the order it happens (set-up, the step, the measured
    # window and read-out on the shared skeleton); kept in one piece so it reads beside DDP's.
    from swinkit.config import load_config
    from swinkit.data.loader import batches, build_loader
    from swinkit.rank.dp_vanilla import vanilla_forward
    from swinkit.model.segmentor import build_optimizer, build_segmentor
    from swinkit.rank.errors import out_of_memory_named
    from swinkit.rank.skeleton import (Window, identity, loop_iterations, rank_precision,
                                       run_steps, timeline_fields)

    from swinkit.rank.devices import check_dp_devices
    check_dp_devices(n_devices)
    cfg = load_config(preset, data_root, overrides, device="cuda")
    per_device = cfg.images_per_rank
    loader_cfg = load_config(preset, data_root, dict(overrides or {},
                                                     images_per_rank=per_device * n_devices),
                             device="cuda")
    indices = list(range(n_devices))
    devices = [torch.device("cuda", i) for i in indices]
    torch.cuda.set_device(devices[0])
    baseline_rss = memory.rss_bytes()
    amp = rank_precision(cfg, devices[0])   # TF32 switches before the model, as DDP's rank
    torch.manual_seed(seed)
    model = build_segmentor(cfg).to(devices[0])
    optim, schedulers = build_optimizer(cfg, model)
    copies = CopyLog()
    module, wrapped = dp_modules(model, amp, device_ids=indices, copies=copies)
    budget = loader_workers(cfg.loader_workers if workers is None else workers, n_devices)
    loader = build_loader(loader_cfg, rank=0, world_size=1, workers=budget["total"], seed=seed,
                          timeout_s=120 if budget["total"] else 0)
    stream = batches(loader)
    timeline = Timeline(make_clock(True))
    # as the DDP loop does; under one process's gloo world of one SyncBN runs plain batch norm,
    # so nothing is recorded unless that changes
    sync_bn_modules = sync_bn.record_module_collectives(timeline, model)
    losses = []

    def step():
        timeline.begin()
        copies.begin()
        micro = []
        for _ in range(grad_accum):
            data = model.data_preprocessor(next(stream), training=True)
            timeline.mark("data_wait")
            if vanilla:
                out = vanilla_forward(module, data, devices, timeline, copies)
            else:
                out = wrapped(**data, mode="loss")
                timeline.mark("forward")
            loss, _ = model.parse_losses(out)
            amp.scaling.backward(loss / grad_accum)   # fp16: the loss scaled first
            timeline.mark("backward")
            micro.append(loss.detach())
        amp.scaling.step(optim)   # fp16: unscaled, checked for inf/NaN, skipped if any
        amp.scaling.update()
        optim.zero_grad()
        timeline.mark("optimizer")
        for scheduler in schedulers:
            scheduler.step()
        losses.append(torch.stack(micro).mean())

    def reset_peaks():
        for d in devices:  # every replica's device, not only the current one
            torch.cuda.reset_peak_memory_stats(d)
    window = Window(CpuUsage(), NvmlSamplers(indices), reset_peaks)
    with out_of_memory_named(0, cfg):
        starts = run_steps(rank, warmup + iters, warmup, lambda n: step(), window,
                           drain=lambda: [torch.cuda.synchronize(d) for d in devices])
        timeline.end()
    cpu_use, gpu_use = window.stop()
    kept = list(range(warmup, warmup + iters))
    sizes = module_bytes(model)
    return {
        **identity(rank, ",".join(map(str, devices)), losses, kept, warmup, loader.num_workers),
        "rank": 0,  # one process drives every device
        "engine": "dp-vanilla" if vanilla else "dp", "n_devices": n_devices,
        "grad_accum": grad_accum, "cpu": cpu_use, "gpu": gpu_use,
        "worker_budget": budget,
        "clock": {"kind": timeline.clock.name, "same_host": True, "hosts": [socket.gethostname()],
                  "applied_offset_s": 0.0, "estimated_offset_s": 0.0, "error_s": 0.0},
        **timeline_fields(timeline.resolve(), warmup),
        "loop_iteration": loop_iterations(starts, kept),
        "copies_bytes": copies.rows[warmup:], "module_bytes": sizes,
        "memory": dict(memory.peak_memory(True, baseline_rss), **device_peaks(
            indices, torch.cuda.max_memory_allocated, torch.cuda.max_memory_reserved)),
        "sync_bn_modules": sync_bn_modules,
        "model_state": memory.model_state(model, optim.optimizer),
        "images_per_step": per_device * n_devices * grad_accum, "precision": amp.to_dict(),
    }
