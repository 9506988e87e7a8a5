"""A light rank workload for testing the harness itself: an all-reduce loop with heartbeats.

Used by the fault tests (a real collective for a rank to die in, without building a model) and
as a quick check that a multi-node launch works: ``swinkit.rank.selftest:allreduce_loop``.
Both entries run on either backend: on NCCL the tensors live on the rank's GPU (NCCL has no CPU
path), and host clocks are compared over a gloo group whatever the world's backend.
"""
from __future__ import annotations

import socket
import time

import torch
import torch.distributed as dist

BACKEND_DEVICES = {"gloo": "cpu", "nccl": "cuda"}


def collective_device(backend: str, local_rank: int) -> torch.device:
    """Where a collective's tensors must live on ``backend``: NCCL reduces only CUDA tensors
    (a CPU tensor fails with "No backend type associated with device type cpu"), gloo any CPU
    tensor. The NCCL device is the rank's own GPU, the one the launcher made current.
    """
    if backend not in BACKEND_DEVICES:
        raise ValueError(f"backend must be one of {sorted(BACKEND_DEVICES)}, got {backend!r}")
    if BACKEND_DEVICES[backend] == "cpu":
        return torch.device("cpu")
    return torch.device("cuda", local_rank)


def allreduce_loop(rank, steps: int = 5, numel: int = 1 << 16, pause_s: float = 0.05) -> dict:
    """All-reduce a tensor of ones ``steps`` times; check the sum; return rank and timings."""
    device = collective_device(dist.get_backend(), rank.local_rank)
    times = []
    for step in range(steps):
        rank.heartbeat(step)
        t = torch.ones(numel, device=device)
        start = time.perf_counter()
        dist.all_reduce(t)
        if device.type == "cuda":  # the call only enqueues on the GPU: wait for the result
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
        if not torch.all(t == rank.world_size):
            raise ValueError(f"rank {rank.rank}: all-reduce gave wrong values at step {step}")
        time.sleep(pause_s)
    return {"rank": rank.rank, "world_size": rank.world_size, "allreduce_s": times,
            "host": socket.gethostname(), "device": str(device)}


def clock_offset_check(rank, skew_s: float = 0.0, skewed_rank: int = 1) -> dict:
    """Estimate clock offsets with ``skewed_rank``'s clock shifted by ``skew_s`` seconds: the
    estimate must find the shift (within its error bound) on a host whose clocks agree.

    The ping-pong sends CPU tensors, so it runs on its own gloo group: on an NCCL world the
    default group cannot carry them.
    """
    from swinkit.measure.clocks import estimate_clock_offsets

    def now():
        return time.perf_counter() + (skew_s if rank.rank == skewed_rank else 0.0)
    group = dist.new_group(backend="gloo")
    try:
        return estimate_clock_offsets(rank.rank, rank.world_size, group=group, now=now)
    finally:
        dist.destroy_process_group(group)
