"""The same workload under ``torch.nn.DataParallel``: one process drives N GPUs.

Each iteration the process loads N x the preset's images per device (one loader, the whole
batch, with N x the loader workers DDP gives each rank: the same worker budget for the same
images, so a DataParallel step is not starved by a loader sized for one GPU), the data
preprocessor puts it on device 0, and DataParallel splits it, replicates the
model onto every device, runs the replicas in threads and gathers their losses on device 0;
backward reduce-adds the replicas' gradients onto device 0, where the optimizer steps.

MMSeg's batches are a tensor of images plus a list of ``SegDataSample`` (labels inside), which
DataParallel's own scatter does not split (it would hand every device every sample), so the
pure-Python parts are here, testable on CPU: :func:`chunk_sizes` (the split torch's scatter
makes), :func:`split_batch` (images and samples together, each onto its device),
:func:`gather_losses` (the replicas' losses onto one device, weighted by their share of the
batch) and the bytes each step copies (:func:`tensor_tree_bytes`). :class:`SegDataParallel` is
DataParallel with that scatter and gather; :mod:`swinkit.engines.dp_vanilla` writes the same
iteration with the ``torch.nn.parallel`` primitives and times each.

Phases: ``data_wait`` (loader + preprocessor to device 0), ``forward`` (for ``dp``: the whole
DataParallel call, copies included), ``backward`` (the replicas' backward and the gradient
reduce-add onto device 0, which runs inside autograd and is not separable from the host),
``optimizer``. ``dp-vanilla`` marks its scatter, replicate and gather as ``exposed_comm``.
"""
from __future__ import annotations

import math
import socket
import time

import torch
from torch import nn

from swinkit.measure import ddp_hooks, memory
from swinkit.measure.phases import PHASES
from swinkit.measure.samplers import CpuUsage, NvmlSamplers
from swinkit.measure.timeline import Timeline, make_clock, phase_durations

ENTRY = "swinkit.engines.dp:dp_rank"


# ----------------------------------------------------------------- pure parts (CPU-testable)

def chunk_sizes(batch: int, n_devices: int) -> list[int]:
    """The sizes ``torch.chunk`` (and so DataParallel's scatter) cuts a batch into: chunks of
    ceil(batch / n), the last one smaller; fewer than n chunks when the batch is short."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be an integer >= 1, got {batch!r}")
    if isinstance(n_devices, bool) or not isinstance(n_devices, int) or n_devices < 1:
        raise ValueError(f"n_devices must be an integer >= 1, got {n_devices!r}")
    step = math.ceil(batch / n_devices)
    sizes = [step] * (batch // step)
    return sizes + ([batch % step] if batch % step else [])


def tensor_tree_bytes(obj) -> int:
    """Bytes of every tensor in a nest of dicts, lists, tuples and MMEngine data elements."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_tree_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_tree_bytes(v) for v in obj)
    if hasattr(obj, "all_values"):  # mmengine BaseDataElement (SegDataSample, PixelData)
        return sum(tensor_tree_bytes(v) for v in obj.all_values())
    return 0


def _to(obj, device):
    if isinstance(obj, torch.Tensor) or hasattr(obj, "to"):
        return obj.to(device)
    return obj


def split_batch(data: dict, devices) -> list[dict]:
    """One preprocessed batch ``{"inputs": (B, C, H, W), "data_samples": [B samples]}`` as
    per-device batches: consecutive chunks of :func:`chunk_sizes`, images and their samples
    together, each moved onto its device. Other keys are passed to every device unchanged."""
    inputs, samples = data["inputs"], data["data_samples"]
    if len(samples) != inputs.shape[0]:
        raise ValueError(f"data_samples has {len(samples)} entries for {inputs.shape[0]} images")
    out, start = [], 0
    for size, device in zip(chunk_sizes(inputs.shape[0], len(devices)), devices):
        part = {k: v for k, v in data.items() if k not in ("inputs", "data_samples")}
        part["inputs"] = inputs[start:start + size].to(device, non_blocking=True)
        part["data_samples"] = [_to(s, device) for s in samples[start:start + size]]
        out.append(part)
        start += size
    return out


def scatter_bytes(parts: list[dict], source) -> int:
    """Bytes the split moved off the source device (the chunks that went elsewhere)."""
    source = torch.device(source)
    return sum(tensor_tree_bytes(p) for p in parts if p["inputs"].device != source)


def gather_losses(outputs: list[dict], target, weights: list[int] | None = None) -> dict:
    """The replicas' loss dicts as one, on ``target``: each entry the mean over replicas
    weighted by ``weights`` (images per replica; equal by default), which is the full batch's
    mean when every replica's loss is the mean over its own images. Autograd flows back
    through the copies."""
    if not outputs:
        raise ValueError("outputs is empty: no replica ran")
    weights = weights or [1] * len(outputs)
    if len(weights) != len(outputs):
        raise ValueError(f"weights has {len(weights)} entries for {len(outputs)} outputs")
    total = float(sum(weights))
    keys = list(outputs[0])
    for o in outputs[1:]:
        if list(o) != keys:
            raise ValueError(f"replicas returned different keys: {keys} vs {list(o)}")
    gathered = {}
    for key in keys:
        values = [o[key] for o in outputs]
        if isinstance(values[0], (list, tuple)):  # MMSeg allows a list of losses per key
            gathered[key] = [sum(w * v.to(target) for w, v in zip(weights, vs)) / total
                             for vs in zip(*values)]
        else:
            gathered[key] = sum(w * v.to(target) for w, v in zip(weights, values)) / total
    return gathered


def gather_bytes(outputs: list[dict], target) -> int:
    """Bytes the gather copied onto ``target`` (the outputs that were elsewhere)."""
    target = torch.device(target)
    return sum(tensor_tree_bytes(o) for o in outputs
               if _first_device(o) is not None and _first_device(o) != target)


def _first_device(obj):
    if isinstance(obj, torch.Tensor):
        return obj.device
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else []
    for v in values:
        d = _first_device(v)
        if d is not None:
            return d
    return None


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


def module_bytes(module: nn.Module) -> dict:
    """Parameter, trainable-gradient and buffer bytes of a module (what replicate copies)."""
    params = list(module.parameters())
    return {"params": memory.tensor_bytes(params),
            "grads": memory.tensor_bytes(p for p in params if p.requires_grad),
            "buffers": memory.tensor_bytes(module.buffers())}


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
    from swinkit.config import load_config
    from swinkit.data.loader import batches, build_loader
    from swinkit.engines.dp_vanilla import vanilla_forward
    from swinkit.model.segmentor import build_optimizer, build_segmentor
    from swinkit.workloads.errors import out_of_memory_named

    from swinkit.engines.spec import check_dp_devices
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
    torch.manual_seed(seed)
    model = build_segmentor(cfg).to(devices[0])
    optim, schedulers = build_optimizer(cfg, model)
    copies = CopyLog()
    wrapped = SegDataParallel(model, device_ids=indices, copies=copies)
    budget = loader_workers(cfg.loader_workers if workers is None else workers, n_devices)
    loader = build_loader(loader_cfg, rank=0, world_size=1, workers=budget["total"], seed=seed,
                          timeout_s=120 if budget["total"] else 0)
    stream = batches(loader)
    timeline = Timeline(make_clock(True))
    # as the DDP loop does; under one process's gloo world of one SyncBN runs plain batch norm,
    # so nothing is recorded unless that changes
    sync_bn = ddp_hooks.record_module_collectives(timeline, model)
    cpu, nvml = CpuUsage(), NvmlSamplers(indices)
    losses, starts = [], []

    def step():
        timeline.begin()
        copies.begin()
        micro = []
        for _ in range(grad_accum):
            data = model.data_preprocessor(next(stream), training=True)
            timeline.mark("data_wait")
            if vanilla:
                out = vanilla_forward(model, data, devices, timeline, copies)
            else:
                out = wrapped(**data, mode="loss")
                timeline.mark("forward")
            loss, _ = model.parse_losses(out)
            (loss / grad_accum).backward()
            timeline.mark("backward")
            micro.append(loss.detach())
        optim.step()
        optim.zero_grad()
        timeline.mark("optimizer")
        for scheduler in schedulers:
            scheduler.step()
        losses.append(torch.stack(micro).mean())

    with out_of_memory_named(0, cfg):
        for it in range(warmup + iters):
            if it == warmup:
                cpu.start()
                nvml.start()
                for d in devices:  # every replica's device, not only the current one
                    torch.cuda.reset_peak_memory_stats(d)
            rank.heartbeat(it)
            starts.append(time.perf_counter())
            step()
        starts.append(time.perf_counter())
        timeline.end()
    resolved = timeline.resolve()
    measured = [phase_durations(i) for i in resolved[warmup:]]
    sizes = module_bytes(model)
    return {
        "rank": 0, "host": socket.gethostname(), "device": ",".join(map(str, devices)),
        "engine": "dp-vanilla" if vanilla else "dp", "n_devices": n_devices,
        "grad_accum": grad_accum, "loss": [float(v) for v in losses[warmup:]],
        "cpu": cpu.stop(), "gpu": nvml.stop(), "threads": torch.get_num_threads(),
        "loader_workers": loader.num_workers, "worker_budget": budget, "warmup": warmup,
        "clock": {"kind": timeline.clock.name, "same_host": True, "hosts": [socket.gethostname()],
                  "applied_offset_s": 0.0, "estimated_offset_s": 0.0, "error_s": 0.0},
        "timeline": resolved,
        "loop_iteration": [b - a for a, b in zip(starts[warmup:], starts[warmup + 1:])],
        "iteration": [sum(p.values()) for p in measured],
        "phases": {p: [m[p] for m in measured] for p in PHASES},
        "copies_bytes": copies.rows[warmup:], "module_bytes": sizes,
        "memory": dict(memory.peak_memory(True, baseline_rss), **device_peaks(
            indices, torch.cuda.max_memory_allocated, torch.cuda.max_memory_reserved)),
        "sync_bn_modules": sync_bn,
        "model_state": memory.model_state(model, optim.optimizer),
        "images_per_step": per_device * n_devices * grad_accum,
    }
