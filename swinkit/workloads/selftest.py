"""A light rank workload for testing the harness itself: an all-reduce loop with heartbeats.

Used by the fault tests (a real collective for a rank to die in, without building a model) and
as a quick check that a multi-node launch works: ``swinkit.workloads.selftest:allreduce_loop``.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist


def allreduce_loop(rank, steps: int = 5, numel: int = 1 << 16, pause_s: float = 0.05) -> dict:
    """All-reduce a tensor of ones ``steps`` times; check the sum; return rank and timings."""
    times = []
    for step in range(steps):
        rank.heartbeat(step)
        t = torch.ones(numel)
        start = time.perf_counter()
        dist.all_reduce(t)
        times.append(time.perf_counter() - start)
        if not torch.all(t == rank.world_size):
            raise ValueError(f"rank {rank.rank}: all-reduce gave wrong values at step {step}")
        time.sleep(pause_s)
    return {"rank": rank.rank, "world_size": rank.world_size, "allreduce_s": times,
            "host": __import__("socket").gethostname()}


def clock_offset_check(rank, skew_s: float = 0.0, skewed_rank: int = 1) -> dict:
    """Estimate clock offsets with ``skewed_rank``'s clock shifted by ``skew_s`` seconds: the
    estimate must find the shift (within its error bound) on a host whose clocks agree."""
    from swinkit.measure.timeline import estimate_clock_offsets

    def now():
        return time.perf_counter() + (skew_s if rank.rank == skewed_rank else 0.0)
    return estimate_clock_offsets(rank.rank, rank.world_size, now=now)
