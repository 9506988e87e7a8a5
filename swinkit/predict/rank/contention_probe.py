"""The backward/all-reduce contention rates at N' without the model
(:func:`proxy_contention`): fixed matmul work stands in for backward beside the model's
bucket all-reduces, on every rank of the timing launch
(:mod:`swinkit.predict.rank.probes`)."""
from __future__ import annotations

import statistics


# the matrix side of backward's stand-in: on CPU one thread's product of about 0.1 ms (a
# chunk of 40: 3.3-3.7 ms here); on a GPU one large enough that the products, not their
# launches, take the time
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

    import torch
    import torch.distributed as dist

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
    # as many loaded chunks on every rank (a rank done early would end the others' load)
    count = torch.tensor([loaded_chunks(reps, round_alone, statistics.median(alone))],
                         dtype=torch.float64, device=device)
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    load = CommLoad(elements, dtype, device)
    load.start()
    loaded = [chunk() for _ in range(int(count))]
    load.finish()
    load.join_or_raise(timeout_s=300)
    got = rates(alone, loaded, round_alone, load.rounds)
    return {k: got[k] for k in ("compute_rate", "comm_rate") if got[k] is not None}


def loaded_chunks(reps: int, round_alone_s: float, chunk_s: float, cap_s: float = 20.0) -> int:
    """How many stand-in chunks to time beside the all-reduce rounds: at least ``reps``, and
    enough for 15 rounds at 5 times their time alone (rounds beside compute ran up to 3 times
    slower here), up to about ``cap_s`` seconds of chunks (this rank's chunks alone; the
    ranks take the largest count). The comm rate is the median of the rounds less the first
    and the last, and not read at all under 5 (the replay then assumes no contention): 12
    chunks (3.3-3.7 ms each here) beside the `test` buckets' rounds (3.4 ms alone) left a
    handful of rounds (comm rates 1.0, 0.36, 0.69 in three launches), and beside 8 times
    those buckets (``comm_scale=8``, ~15 ms a round) none was read.

    >>> loaded_chunks(12, 0.0034, 0.0034)  # 15 x 5 rounds of 3.4 ms: 75 chunks of 3.4 ms
    75
    >>> loaded_chunks(12, 0.0001, 0.0034), loaded_chunks(12, 10.0, 1.0)  # reps; the cap
    (12, 20)
    """
    import math
    need = math.ceil(15 * 5 * round_alone_s / max(chunk_s, 1e-9))
    return max(reps, min(need, int(cap_s / max(chunk_s, 1e-9))))
