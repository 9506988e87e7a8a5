"""Peak memory of one rank, and the model-state bytes it holds (what ZeRO shards).

On GPU: the CUDA caching allocator's peak (``max_memory_allocated``) since the counter was
reset at the start of the measured iterations. On CPU: the process's peak resident set
(``ru_maxrss``, the high-water mark since the process started) and the resident set just before
the model was built, so ``peak_rss_bytes - baseline_rss_bytes`` is what the model, its
optimizer and the iterations added. Loader workers are separate processes, not counted.
"""
from __future__ import annotations

import resource

import psutil


def rss_bytes() -> int:
    return psutil.Process().memory_info().rss


def peak_rss_bytes() -> int:
    """Peak resident set of this process (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_device_peak(cuda: bool) -> None:
    if cuda:
        import torch
        torch.cuda.reset_peak_memory_stats()


def peak_memory(cuda: bool, baseline_rss: int | None = None) -> dict:
    """This rank's peak memory now (see the module doc); ``kind`` says which counter."""
    out = {"peak_rss_bytes": peak_rss_bytes(), "baseline_rss_bytes": baseline_rss,
           "rss_added_bytes": None if baseline_rss is None else peak_rss_bytes() - baseline_rss}
    if cuda:
        import torch
        out.update(kind="cuda_max_memory_allocated",
                   peak_bytes=torch.cuda.max_memory_allocated(),
                   peak_reserved_bytes=torch.cuda.max_memory_reserved())
    else:
        out.update(kind="ru_maxrss", peak_bytes=out["peak_rss_bytes"])
    return out


def tensor_bytes(tensors) -> int:
    """Bytes the tensors hold on this rank: a sharded tensor (a DTensor, FSDP2's parameters
    and their optimizer states) counts its local shard, not the whole it stands for."""
    local = [t.to_local() if hasattr(t, "to_local") else t for t in tensors]
    return sum(t.numel() * t.element_size() for t in local)


def optimizer_state_bytes(optimizer) -> int:
    """Bytes of every tensor in a torch optimizer's state (Adam's moments, step counters)."""
    import torch
    total = 0
    for state in optimizer.state.values():
        total += tensor_bytes(v for v in state.values() if isinstance(v, torch.Tensor))
    return total


def model_state(model, optimizer, grads=None) -> dict:
    """Model-state bytes held by this rank, measured from its tensors: parameters, gradients
    (``grads``: the tensors holding them; None = not measured) and optimizer states. Under
    ZeRO the optimizer is the engine's inner one, holding only this rank's partition."""
    return {"params": tensor_bytes(model.parameters()),
            "grads": None if grads is None else tensor_bytes(grads),
            "optimizer_states": optimizer_state_bytes(optimizer)}
