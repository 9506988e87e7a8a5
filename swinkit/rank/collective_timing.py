"""Collectives timed alone, over the run's ranks: the communication side of the components.

Each entry (one bucket's all-reduces, the module buffers' broadcast, SyncBN's gathers) is
timed hot (back to back after a barrier) or cold (as DDP meets it, right after compute), the
slowest rank's time per entry; on GPU by CUDA events on the launching stream
(:func:`~swinkit.measure.timing.event_timed`).
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from swinkit.measure.timing import event_timed, timed


COMM_REPS = 7


COMM_WARMUP = 2


# Cold collectives: more rounds, and their mean without the lowest and the highest (a 10 %
# trim of 15 rounds) rather than the median.
# Their times here are bimodal (1.3 MB with gloo: ~1.0 ms or ~3.5-4.5 ms, in either
# proportion), so a median of a few rounds lands on one mode or the other and predictions
# jumped by several percent from launch to launch; an iteration holds several collectives,
# and what they add to its time is their sum, whose expectation is the mean.
COLD_COMM_REPS = 15


COLD_TRIM = 0.1


DDP_BROADCAST_BUCKET_BYTES = 250 * 1024 * 1024  # DDP's broadcast_bucket_size


EVICT_BYTES = 64 << 20  # swept before a cold collective: more than a server CPU's last-level cache


def time_collectives(sizes: list[list[int]], dtype, device, op: str, cold: bool = False,
                     tensors: list[list[torch.Tensor]] | None = None,
                     same_host: bool = True, group=None, events=None) -> list[float]:
    """Seconds per entry of ``sizes`` (one entry: its collectives run back to back), the
    slowest rank's: the median of the rounds hot, their trimmed mean cold. ``tensors``: the
    entries themselves, instead of zeros of ``sizes``. ``op``:
    "all_reduce", "broadcast", or "broadcast_coalesced" (an entry's tensors in one call, packed
    and unpacked, as DDP broadcasts the module's buffers).

    Hot (default): after a barrier per round, the entries back to back. ``cold``: each entry
    as DDP meets it, after compute: on CPU every rank first sweeps a buffer larger than the
    caches (the backward pass has just done so) and its communication threads have idled, and
    the time counts from the last rank's arrival (the ranks' skew is not the collective's;
    ``same_host``: their clocks are one, else the skew stays in). ``group``: the process
    group the entries run over (default: every rank); over a group of one each rank times its
    own, from its own arrival.
    Measured here with gloo: an all-reduce of 0.8 MB took 0.6-1.1 ms hot and 2.5-4.6 ms right
    after 10 ms of compute or a 64 MB sweep.

    On GPU (or with ``events``, a factory of device-event stand-ins) each entry is timed by
    events on the launching stream, one synchronisation per round
    (:func:`~swinkit.measure.timing.event_timed`): what the collective takes on the device, as
    DDP pipelines the buckets on one stream, without a host launch and sync per entry."""
    if tensors is None:
        tensors = [[torch.zeros(n, dtype=dtype, device=device) for n in entry] for entry in sizes]
    run = _entry_runner(op, group)
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    if events is None and device.type == "cuda":
        events = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    sweep = (torch.empty(EVICT_BYTES // 4), torch.empty(EVICT_BYTES // 4)) if (
        cold and device.type == "cpu") else None
    one_host = cold and same_host and group is None
    rounds = []
    for _ in range(COMM_WARMUP + (COLD_COMM_REPS if cold else COMM_REPS)):
        if not cold:
            dist.barrier()
            if events is not None:
                times = event_timed([lambda entry=entry: run(entry) for entry in tensors], events,
                                    sync or (lambda: None))
            else:
                times = [timed(lambda entry=entry: run(entry), 1, sync=sync)[0] for entry in tensors]
        elif events is not None:
            flag = torch.zeros(1, device=device)
            times = [_cold_events(entry, run, sync, events, flag, group) for entry in tensors]
        else:
            times = [_cold_once(entry, run, sync, sweep, device, one_host) for entry in tensors]
        slowest = torch.tensor(times, dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        rounds.append(slowest.tolist())
    rounds = rounds[COMM_WARMUP:]
    middle = trimmed_mean if cold else statistics.median
    return [middle([r[j] for r in rounds]) for j in range(len(tensors))]


def trimmed_mean(values: list[float], trim: float = COLD_TRIM) -> float:
    """The mean of ``values`` without the lowest and highest ``trim`` share of them, rounded
    down (of fewer than ``1 / trim`` values none is dropped).

    >>> trimmed_mean([1.0, 1.0, 1.0, 4.0, 4.0, 100.0, 0.0, 1.0, 4.0, 4.0])  # 0 and 100 dropped
    2.5
    """
    ordered = sorted(values)
    cut = int(len(ordered) * trim)
    return statistics.fmean(ordered[cut:len(ordered) - cut] or ordered)


def _entry_runner(op: str, group=None):
    """``group``'s rank 0 is the source of a broadcast."""
    if op == "all_reduce":
        return lambda entry: [dist.all_reduce(t, group=group) for t in entry]
    if op == "all_gather":  # each rank's tensor to every rank, as SyncBN's statistics
        return _sync_bn_gather(group)
    group = dist.group.WORLD if group is None else group
    if op == "broadcast":
        return lambda entry: [dist.broadcast(t, group=group, group_src=0) for t in entry]
    if op == "broadcast_coalesced":
        return lambda entry: dist._broadcast_coalesced(group, entry, DDP_BROADCAST_BUCKET_BYTES, 0)
    raise ValueError(f"unknown collective {op!r}")


def _sync_bn_gather(group=None):
    """An entry's all-gathers as torch's SyncBatchNorm makes them: into one flat tensor of
    N x its size (``all_gather_into_tensor``) on every backend but gloo, into a list of N
    tensors on gloo, which has no flat gather. The list form on NCCL adds N
    allocations and N device copies to a gather of a few KB, as long as the gather itself on
    NVLink: timed so, SyncBN's share of the prediction would be too large."""
    size = dist.get_world_size(group)
    if dist.get_backend(group) == "gloo":
        def gather(entry):
            for t in entry:
                dist.all_gather([torch.empty_like(t) for _ in range(size)], t, group=group)
    else:
        def gather(entry):
            for t in entry:
                flat = torch.empty(size * t.numel(), dtype=t.dtype, device=t.device)
                dist.all_gather_into_tensor(flat, t, group=group)
    return gather


def _cold_events(entry, run, sync, events, flag=None, group=None) -> float:
    """One entry timed on the device by events (the GPU path), from the last rank's arrival:
    a one-element all-reduce queued right before the start event holds every rank's stream
    until the last rank has launched (a host barrier would leave the launches microseconds
    apart, a skew the oracle replays itself and must not find inside the collective)."""
    sync = sync or (lambda: None)
    dist.barrier()
    sync()
    if flag is not None:
        dist.all_reduce(flag, group=group)  # the stream waits: the start fires at the last arrival
    start, end = events(), events()
    start.record()
    run(entry)
    end.record()
    sync()
    return start.elapsed_time(end) / 1e3


def _cold_once(entry, run, sync, sweep, device, one_host: bool) -> float:
    """One entry after a barrier and a cache sweep: seconds from the last rank's arrival (one
    host's processes share the monotonic clock; across hosts the skew stays in)."""
    dist.barrier()
    if sweep is not None:
        sweep[1].copy_(sweep[0])
    sync and sync()
    arrive = time.perf_counter()
    run(entry)
    sync and sync()
    done = time.perf_counter()
    if not one_host:
        return done - arrive
    arrivals = torch.tensor([arrive], dtype=torch.float64, device=device)
    gathered = [torch.zeros_like(arrivals) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, arrivals)
    return done - max(float(a) for a in gathered)
