"""DataParallel written out with the ``torch.nn.parallel`` primitives, each step timed.

``nn.DataParallel.forward`` is scatter -> replicate -> parallel_apply -> gather. Written out,
each primitive gets its own span on the timeline:

    scatter         split the batch, copy each chunk to its device    exposed_comm ("scatter")
    replicate       broadcast parameters and buffers to every device  exposed_comm ("replicate")
    parallel_apply  the replicas' forward, one thread per device      forward
    gather          the replicas' losses onto device 0                exposed_comm ("gather")

The copies are recorded as blocking collectives with their bytes (the single process waits for
them). On GPU the marks are CUDA events on device 0's current stream, so a span is the time
device 0's stream spent from the primitive's start to its end, which includes waiting for the
other devices where the primitive synchronises with them.
"""
from __future__ import annotations

import torch
from torch.nn.parallel import parallel_apply, replicate

from swinkit.rank.dp_parts import gather_bytes, gather_losses, module_bytes, scatter_bytes, split_batch


def _span(timeline, name: str, nbytes_of, fn):
    """Run ``fn`` as one blocking copy on the timeline: phase cut, record, exposed_comm."""
    clock = timeline.clock
    arrive = clock.now()
    timeline.mark("forward", arrive)   # close what came before (data_wait was already marked)
    out = fn()
    done = clock.now()
    timeline.collective(name, blocking=True, nbytes=nbytes_of(out), arrive=arrive, ready=arrive,
                        done=done)
    timeline.mark("exposed_comm", done)
    return out


def vanilla_forward(module, data: dict, devices: list, timeline, copies=None) -> dict:
    """One DataParallel forward from the primitives; returns the gathered loss dict."""
    source = data["inputs"].device
    parts = _span(timeline, "scatter", lambda p: scatter_bytes(p, source),
                  lambda: split_batch(data, devices))
    used = devices[:len(parts)]
    sizes = module_bytes(module)
    replicas = _span(timeline, "replicate",
                     lambda r: (sizes["params"] + sizes["buffers"]) * (len(r) - 1),
                     lambda: replicate(module, used, not torch.is_grad_enabled()))
    outputs = parallel_apply(replicas, [() for _ in parts], [dict(p, mode="loss") for p in parts],
                             used)
    timeline.mark("forward")
    weights = [p["inputs"].shape[0] for p in parts]
    gathered = _span(timeline, "gather", lambda _: gather_bytes(outputs, used[0]),
                     lambda: gather_losses(outputs, used[0], weights))
    if copies is not None:
        copies.add("scatter", scatter_bytes(parts, source))
        copies.add("replicate", (sizes["params"] + sizes["buffers"]) * (len(replicas) - 1))
        copies.add("gather", gather_bytes(outputs, used[0]))
        copies.add("grad_reduce", sizes["grads"] * (len(replicas) - 1))
    return gathered
