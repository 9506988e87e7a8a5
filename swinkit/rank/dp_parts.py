"""The pieces DataParallel's step is made of, pure Python and CPU-testable, shared by
:class:`swinkit.rank.dp.SegDataParallel` (torch's DataParallel with MMSeg's scatter and
gather) and :mod:`swinkit.rank.dp_vanilla` (the same step from ``torch.nn.parallel``'s
primitives).

MMSeg's batches are a tensor of images plus a list of ``SegDataSample`` (labels inside), which
DataParallel's own scatter does not split (it would hand every device every sample):
:func:`chunk_sizes` (the split torch's scatter makes), :func:`split_batch` (images and samples
together, each onto its device), :func:`gather_losses` (the replicas' losses onto one device,
weighted by their share of the batch) and the bytes each step copies
(:func:`tensor_tree_bytes`, :func:`scatter_bytes`, :func:`gather_bytes`, :func:`module_bytes`).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from swinkit.measure import memory

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


def module_bytes(module: nn.Module) -> dict:
    """Parameter, trainable-gradient and buffer bytes of a module (what replicate copies)."""
    params = list(module.parameters())
    return {"params": memory.tensor_bytes(params),
            "grads": memory.tensor_bytes(p for p in params if p.requires_grad),
            "buffers": memory.tensor_bytes(module.buffers())}
