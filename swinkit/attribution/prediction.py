"""The iteration read off the isolated benchmarks' stored results alone, one process per
component, no launch of its own: a sum of parts with a simple overlap rule (an oracle in
the sense of Kahira et al., "An Oracle for Guiding Large-Scale Model/Hybrid Parallel Training
of Convolutional Neural Networks", HPDC 2021).

    T_pred(N) = data_stall(N) + forward + backward + exposed_comm(N) + optimizer

* forward, backward, optimizer: the segmentor at the preset's batch in one process
  (backward = forward_backward - forward);
* data_stall: one batch's loading time at the loader supply measured with N loaders at once;
  with loader workers it overlaps compute, so only the excess over compute stalls;
* exposed_comm: the all-reduce of the preset's real DDP buckets at N ranks, less what fits in
  the backward pass (the overlap window); the last bucket can never hide.

Accuracy is reported as Kahira et al. do: 100 % x (1 - |predicted - measured| / measured).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Isolated:
    """Isolated component costs for one world size (seconds; images per second)."""
    world_size: int
    forward_s: float
    forward_backward_s: float
    optimizer_s: float
    images_per_rank: int
    loader_workers: int
    supply_images_per_s: float     # per rank, N loaders at once
    allreduce_s: float             # the preset's DDP buckets, all launched, slowest rank
    last_bucket_fraction: float    # bytes of the last-reduced bucket / all bucket bytes


def predict(c: Isolated) -> dict:
    backward = max(c.forward_backward_s - c.forward_s, 0.0)
    compute = c.forward_backward_s + c.optimizer_s
    load = c.images_per_rank / c.supply_images_per_s
    stall = load if c.loader_workers == 0 else max(load - compute, 0.0)
    exposed = max(c.allreduce_s * c.last_bucket_fraction, c.allreduce_s - backward)
    if c.world_size == 1:
        exposed = min(exposed, c.allreduce_s)  # one rank: the 'all-reduce' is a local copy
    parts = {"data_wait": stall, "forward": c.forward_s, "backward": backward,
             "exposed_comm": exposed, "optimizer": c.optimizer_s, "other": 0.0}
    return {"predicted_iter_s": sum(parts.values()), "components_s": parts}


def prediction_error(predicted: float, measured: float) -> dict:
    error = (predicted - measured) / measured
    return {"prediction_error": error, "accuracy_pct": 100 * (1 - abs(error))}
