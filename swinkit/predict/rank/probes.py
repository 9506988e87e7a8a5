"""What a prediction times at the target size N' without the model, in one launch of N' ranks
(:func:`swinkit.predict.supervisor.target_timing.measure_target` starts it): the loader's
supply with N' loaders at once (and, where ranks load themselves, rank 0's loader alone first), the model's
bucket all-reduces and buffer broadcast, and stand-ins for what the host's sharing does to
the model's work (contention of backward with the all-reduces, waiting at a sync point,
compute slowed by shared caches and memory bandwidth).
"""
from __future__ import annotations

import statistics

from swinkit.predict.rank.contention_probe import proxy_contention
from swinkit.rank.devices import rank_device
from swinkit.predict.rank.stand_in import swin_block_work


def _rank_mean(value: float, device) -> float:
    """The ranks' mean of ``value`` (a tensor on ``device``: NCCL reduces no CPU tensor)."""
    import torch
    import torch.distributed as dist
    mine = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(mine)
    return float(mine) / dist.get_world_size()


def target_rank(rank, preset: str, workers: int, elements: list[list[int]], dtype: str,
                buffer_shapes: list, batches: int = 10, segments_s: list | None = None) -> dict:
    """Rank entry: the loader's supply with every rank's loader at once (without loader
    workers rank 0's loader alone first, the others idle at a barrier), the buckets'
    all-reduces and the buffer broadcast over these ranks, the lockstep wait and the
    contention rates, with the stand-in's compute slowdown read four times in between (no
    model is built); with ``segments_s`` (:func:`meeting_segments`) the wait in the model's
    rhythm (:func:`rhythm_wait`)."""
    import torch
    import torch.distributed as dist

    from swinkit.components.loader_throughput import loader_rank
    from swinkit.rank.collective_timing import time_collectives

    # the device the run predicted from used (its backend, recorded in the basis, is ours)
    device = rank_device(dist.get_backend(), rank.local_rank)
    # the stand-in's reading moves by several per cent from one moment to the next (the host's
    # other tenants), now and then by 10 %: four readings spread over the launch, their median
    slowdowns = [stand_in_slowdown(rank.rank, rank.world_size, device)]
    # without workers, rank 0's loader alone (the others wait at the barrier), then every
    # rank's at once: how much loading slows with N' loaders, read at one moment of the host
    # (with workers the prediction takes the supply, not this)
    one_loader = (loader_rank(rank, preset=preset, data_root=None, workers=workers,
                              batches=batches) if rank.rank == 0 and workers == 0 else {})
    dist.barrier()
    supply = loader_rank(rank, preset=preset, data_root=None, workers=workers, batches=batches)
    dist.barrier()  # the loaders' workers are gone before anything else is timed
    slowdowns.append(stand_in_slowdown(rank.rank, rank.world_size, device))
    same_host = True  # one host: the launch here is single-node
    comm = time_collectives(elements, getattr(torch, dtype), device, "all_reduce", cold=True,
                            same_host=same_host)
    broadcast = 0.0
    if buffer_shapes:
        tensors = [[torch.zeros(s, dtype=getattr(torch, d), device=device)
                    for s, d in buffer_shapes]]
        world = time_collectives([], None, device, "broadcast_coalesced", cold=True,
                                 tensors=tensors, same_host=same_host)[0]
        alone_group = [dist.new_group([r]) for r in range(rank.world_size)][rank.rank]
        alone = time_collectives([], None, device, "broadcast_coalesced", cold=True,
                                 tensors=tensors, group=alone_group)[0]
        broadcast = max(world - alone, 0.0)  # what N ranks add over one, as the components
    slowdowns.append(stand_in_slowdown(rank.rank, rank.world_size, device))
    sync_wait = lockstep_wait(rank.world_size, device)
    rhythm = rhythm_wait(rank.world_size, device, segments_s) if segments_s else None
    slowdowns.append(stand_in_slowdown(rank.rank, rank.world_size, device))
    return {"rank": rank.rank, "images_per_s": supply["images_per_s"],
            "alone_images_per_s": one_loader.get("images_per_s"), "bucket_comm_s": comm,
            "broadcast_s": broadcast, "sync_wait_s": sync_wait, "iteration_wait_s": rhythm,
            "compute_slowdown": statistics.median(slowdowns), "compute_slowdowns": slowdowns,
            "contention": proxy_contention(elements, getattr(torch, dtype), device)
            if rank.world_size > 1 else {}}


def stand_in_slowdown(rank: int, world_size: int, device, reps: int = 9) -> float:
    """How much slower a stand-in for the model's compute runs with every rank running it at
    once than with each rank alone (the others waiting at a barrier): the host's shared cores,
    caches and memory bandwidth, which no timing of one rank shows. The stand-in is a Swin
    block's kinds of work (layer norm, MLP matmuls, GELU, attention softmax within windows of
    64 tokens, as Swin attends) over a working set larger than a core's caches, one thread;
    fixed work, not the model. (Attention over all 1024 tokens at once, a 32 MB score matrix,
    read the sharing twice as unsteadily from call to call: sd 0.068 against 0.031 in 8 calls
    each, interleaved, at 2 ranks on a 2-core host.) The ranks' mean of each one's median
    ratio; 1 at one rank, and 1 on GPUs: there the model computes on each rank's own device,
    and this stand-in is host work."""
    import time

    import torch
    import torch.distributed as dist

    if world_size == 1 or device.type == "cuda":
        return 1.0
    work = swin_block_work(images=8)

    def block() -> float:
        start = time.perf_counter()
        work()
        return time.perf_counter() - start

    block()  # warm: allocations, the first call's dispatch
    # the others sleep through a rank's turn alone, so that nothing of theirs can slow it (a
    # rank waiting in a gloo barrier leaves its core idle too: a neighbour's block ran as fast
    # beside it as beside a sleeping rank, x0.89-1.00 over 3 launches on a 2-core host)
    # one length for every rank's sleep: the slowest rank's estimate (a sleeper that woke
    # early would poll in the barrier through the turn)
    longest = torch.tensor([3 * max(block() for _ in range(2))], dtype=torch.float64)
    dist.all_reduce(longest, op=dist.ReduceOp.MAX)
    turn_s = float(longest)
    alone, together = [], []
    for _ in range(reps):  # interleaved, so that a drift of the host's speed cancels
        for turn in range(world_size):
            dist.barrier()
            if turn == rank:
                alone.append(block())
            else:
                time.sleep(turn_s)
        dist.barrier()
        together.append(block())
    return _rank_mean(statistics.median(together) / statistics.median(alone), device)


def lockstep_wait(world_size: int, device, reps: int = 60, work: int = 12) -> float:
    """Seconds a rank waits at a sync point for the slowest of the N' ranks when each has the
    same fixed work before it (matmuls, one thread): the host's time-sharing made visible
    (other processes' load desynchronises ranks that no per-rank sample at a smaller N shows).
    The ranks' mean of each one's trimmed mean wait; 0 at one rank. The work is host work on
    GPUs too: what it shows is the ranks' host threads sharing cores, which delays the
    launches of their device work alike."""
    import time

    import torch
    import torch.distributed as dist

    from swinkit.rank.collective_timing import trimmed_mean

    if world_size == 1:
        return 0.0
    a = torch.randn(160, 160)
    waits = []
    for _ in range(2 + reps):  # 2 warm-up rounds
        dist.barrier()
        start = time.perf_counter()
        for _ in range(work):
            a @ a
        own = time.perf_counter() - start
        dist.barrier()  # the sync point: every rank waits here for the slowest
        waits.append(time.perf_counter() - start - own)
    return _rank_mean(trimmed_mean(waits[2:]), device)


def rhythm_wait(world_size: int, device, segments_s: list[float], budget_s: float = 8.0,
                rounds: tuple[int, int] = (12, 60)) -> float | None:
    """Seconds per optimizer step a rank loses waiting for the slowest of the N' ranks when
    every rank works in the model's rhythm without the model: the stand-in's kind of work
    (:func:`stand_in_slowdown`'s block, in pieces of a few ms) for as long as each of
    ``segments_s``, every rank at once, meeting at a barrier after each. Per rank, the median
    round (its work and its waits) less the median of its own work in the rounds (beside the
    other ranks') and less a round of the barriers alone (what a meeting costs without a
    wait: the replay counts the collectives themselves): the measured iteration is a
    median. The ranks' mean, at least 0. A rhythm of 60 and 17 ms on 2 ranks of a 2-core
    host lost 3-7 ms a round where 12 matmuls of 0.2 ms between meetings lost 1.2-1.9: how
    long the ranks work between meetings sets how far they drift apart. As many rounds as
    fit in ``budget_s``, within ``rounds``. None at one rank and on GPUs, where the model's
    segments are device time and this is host work."""
    import time

    import torch
    import torch.distributed as dist

    if world_size == 1 or device.type == "cuda":
        return None
    piece = swin_block_work(images=1)  # a few ms a piece
    piece()
    start = time.perf_counter()
    for _ in range(5):
        piece()
    # one count of pieces per segment on every rank: the slowest rank's piece sets it
    each = torch.tensor([(time.perf_counter() - start) / 5], dtype=torch.float64)
    dist.all_reduce(each, op=dist.ReduceOp.MAX)
    counts = [max(1, round(s / float(each))) for s in segments_s]
    n = int(min(max(budget_s / max(sum(segments_s), 1e-6), rounds[0]), rounds[1]))
    bare = []
    for _ in range(12):
        t = time.perf_counter()
        for _ in counts:
            dist.barrier()
        bare.append(time.perf_counter() - t)
    own, whole = [], []
    for r in range(2 + n):  # 2 warm-up rounds
        work = 0.0
        dist.barrier()
        begin = time.perf_counter()
        for count in counts:
            t = time.perf_counter()
            for _ in range(count):
                piece()
            work += time.perf_counter() - t
            dist.barrier()  # a meeting point: every rank waits here for the slowest
        if r >= 2:
            own.append(work)
            whole.append(time.perf_counter() - begin)
    barriers = statistics.median(bare[2:])
    wait = statistics.median(whole) - statistics.median(own) - barriers
    return _rank_mean(max(wait, 0.0), device)


def internode_rank(rank, bucket_bytes: list[int]) -> dict:
    """Rank entry: each bucket's all-reduce (fp32, its bytes) over every rank of both nodes."""
    import torch

    from swinkit.rank.collective_timing import time_collectives

    elements = [[max(int(b) // 4, 1)] for b in bucket_bytes]
    comm = time_collectives(elements, torch.float32, torch.device("cpu"), "all_reduce",
                            cold=True, same_host=True)  # one host: one clock
    return {"rank": rank.rank, "bucket_comm_s": comm}
