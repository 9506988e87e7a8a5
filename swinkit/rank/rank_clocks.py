"""What the ranks of one run agree on over a gloo group of their own, outside the measured
iterations: how their hosts' clocks relate (before and after the run), and when a loop whose
length each rank could decide alone ends (so no collective is left without a partner).

A gloo group because these are host matters (CPU ping-pong, a flag) whatever the backend:
on NCCL they would queue on the GPU stream behind the model's kernels.
"""
from __future__ import annotations

import socket
import time

import torch
import torch.distributed as dist

from swinkit.measure.clocks import OffsetLine, estimate_clock_offsets


def all_agree(stop: bool, group) -> bool:
    """Whether any rank wants to stop (a MAX all-reduce over the gloo ``group``): every rank
    then runs the same number of iterations, so no collective of one is left without a partner
    (SyncBN's on GPU presets, the load's)."""
    flag = torch.tensor([1 if stop else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    return bool(flag.item())


def clock_offsets(rank, group=None) -> dict:
    """This rank's clock against rank 0's, before the run: measured always, applied only across
    hosts (one host's processes share CLOCK_MONOTONIC; the measurement is then a check of the
    method). ``group``: gloo, since host clocks ping-pong on the CPU whatever the backend."""
    hosts = [None] * rank.world_size
    dist.all_gather_object(hosts, socket.gethostname())
    group = dist.new_group(backend="gloo") if group is None else group
    before = time.perf_counter()
    est = estimate_clock_offsets(rank.rank, rank.world_size, group)
    same_host = len(set(hosts)) == 1
    applied = 0.0 if same_host else est["offset_s"][rank.rank]
    return {"hosts": hosts, "same_host": same_host, "applied_offset_s": applied,
            "estimated_offset_s": est["offset_s"][rank.rank], "error_s": est["error_s"][rank.rank],
            "at_s": before}


def clock_drift(rank, group, clocks: dict) -> dict:
    """The offsets again after the run: across hosts they are applied as a straight line from
    the first estimate to this one (host clocks drift apart by parts per million, ms over a
    long run), and the drift is reported. Also the GPU event-to-host mapping's own error."""
    after = time.perf_counter()
    est = estimate_clock_offsets(rank.rank, rank.world_size, group)
    offset_after = est["offset_s"][rank.rank]
    span = max(after - clocks["at_s"], 1e-9)
    mapping = OffsetLine(clocks["at_s"], clocks["estimated_offset_s"], after, offset_after)
    applied = mapping if not clocks["same_host"] else OffsetLine.none()
    return {**clocks, "estimated_offset_after_s": offset_after, "at_after_s": after,
            "drift_ppm": (offset_after - clocks["estimated_offset_s"]) / span * 1e6,
            "error_s": max(clocks["error_s"], est["error_s"][rank.rank]),
            "applied": applied}
