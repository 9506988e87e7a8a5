"""What a prediction times at the target size N' without the model, in one launch of N' ranks
(:func:`swinkit.experiments.predict_run.measure_target` starts it): the loader's supply with N'
loaders at once, the model's bucket all-reduces and buffer broadcast, and stand-ins for what the
host's sharing does to the model's work (contention of backward with the all-reduces, waiting
at a sync point, compute slowed by shared caches and memory bandwidth).
"""
from __future__ import annotations

import statistics

from swinkit.rank.devices import rank_device


def _rank_mean(value: float, device) -> float:
    """The ranks' mean of ``value`` (a tensor on ``device``: NCCL reduces no CPU tensor)."""
    import torch
    import torch.distributed as dist
    mine = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(mine)
    return float(mine) / dist.get_world_size()


def target_rank(rank, preset: str, workers: int, elements: list[list[int]], dtype: str,
                buffer_shapes: list, batches: int = 10) -> dict:
    """Rank entry: the loader's supply with every rank's loader at once, the buckets'
    all-reduces and the buffer broadcast over these ranks, the lockstep wait and the
    contention rates, with the stand-in's compute slowdown read four times in between (no
    model is built)."""
    import torch
    import torch.distributed as dist

    from swinkit.components.loader_throughput import loader_rank
    from swinkit.rank.collective_timing import time_collectives

    # the device the run predicted from used (its backend, recorded in the basis, is ours)
    device = rank_device(dist.get_backend(), rank.local_rank)
    # the stand-in's reading moves by several per cent from one moment to the next (the host's
    # other tenants), now and then by 10 %: four readings spread over the launch, their median
    slowdowns = [stand_in_slowdown(rank.rank, rank.world_size, device)]
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
    slowdowns.append(stand_in_slowdown(rank.rank, rank.world_size, device))
    return {"rank": rank.rank, "images_per_s": supply["images_per_s"], "bucket_comm_s": comm,
            "broadcast_s": broadcast, "sync_wait_s": sync_wait,
            "compute_slowdown": statistics.median(slowdowns), "compute_slowdowns": slowdowns,
            "contention": proxy_contention(elements, getattr(torch, dtype), device)
            if rank.world_size > 1 else {}}


# the matrix side of backward's stand-in: on CPU a one-thread chunk of about 1 ms per product;
# on a GPU one large enough that the products, not their launches, take the time
STAND_IN_SIDE = {"cpu": 160, "cuda": 2048}


def backward_stand_in(device, randn=None):
    """(a square matrix on ``device``, a wait for the products queued on it): on a GPU they
    are queued, so a chunk is timed between two waits; on CPU nothing is queued. The wait is
    for this thread's stream alone: torch.cuda.synchronize would also wait for the
    all-reduces the load thread runs beside the chunk on a stream of its own, and read them
    as slowed compute."""
    import torch
    randn = randn or torch.randn
    a = randn(STAND_IN_SIDE[device.type], STAND_IN_SIDE[device.type], device=device)
    if device.type != "cuda":
        return a, lambda: None
    return a, torch.cuda.current_stream(device).synchronize


def proxy_contention(elements: list[list[int]], dtype, device, reps: int = 12,
                     work: int = 40) -> dict:
    """The contention rates (:mod:`swinkit.measure.contention`) with fixed matmul work standing
    in for backward, on the rank's device: that work alone, then beside the buckets'
    all-reduces running round after round on a thread (every rank at once), and the rounds
    alone (hot) against beside it."""
    import time

    from swinkit.measure.contention import CommLoad, rates
    from swinkit.rank.collective_timing import time_collectives

    a, wait = backward_stand_in(device)

    def chunk() -> float:
        wait()
        start = time.perf_counter()
        for _ in range(work):
            a @ a
        wait()
        return time.perf_counter() - start

    alone = [chunk() for _ in range(reps)]
    round_alone = sum(time_collectives(elements, dtype, device, "all_reduce"))
    load = CommLoad(elements, dtype, device)
    load.start()
    loaded = [chunk() for _ in range(reps)]
    load.finish()
    load.join_or_raise(timeout_s=300)
    got = rates(alone, loaded, round_alone, load.rounds)
    return {k: got[k] for k in ("compute_rate", "comm_rate") if got[k] is not None}


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
    x = torch.randn(8 * 16, 64, 128)  # 8 images of 1024 tokens, in windows of 8 x 8
    up, down = torch.randn(128, 512) / 12, torch.randn(512, 128) / 24
    norm = torch.nn.LayerNorm(128)

    def block() -> float:
        start = time.perf_counter()
        with torch.no_grad():
            h = torch.nn.functional.gelu(norm(x) @ up) @ down
            (h @ h.transpose(1, 2)).softmax(-1)
        return time.perf_counter() - start

    block()  # warm: allocations, the first call's dispatch
    # the others sleep through a rank's turn alone: waiting in a collective is not idle (the
    # wait polls), and it would slow the turn it is meant to leave alone
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
