"""A stand-in for the model's compute, timed with each rank alone in turn and with every rank
at once: what the host's shared cores, caches and memory bandwidth do to compute at N ranks,
without the model. A held-out prediction reads it at the target size before its run
(:func:`swinkit.experiments.target_probes.stand_in_slowdown`) and, in a launch that carries
the run at 1 beside the DDP steps, between that launch's own steps (the "probe" steps of
:func:`swinkit.rank.step_switch.schedule`).
"""
from __future__ import annotations

import statistics
import time


def swin_block_work(images: int):
    """A function doing a Swin block's kinds of work on ``images`` images of 1024 tokens in
    windows of 8 x 8 (layer norm, MLP matmuls, GELU, attention softmax within each window),
    one thread, no gradients: the stand-in for the model's compute."""
    import torch

    x = torch.randn(images * 16, 64, 128)
    up, down = torch.randn(128, 512) / 12, torch.randn(512, 128) / 24
    norm = torch.nn.LayerNorm(128)

    def work() -> None:
        with torch.no_grad():
            h = torch.nn.functional.gelu(norm(x) @ up) @ down
            (h @ h.transpose(1, 2)).softmax(-1)
    return work


class StandInTurns:
    """Rounds of the stand-in on every rank of the default group: in each, the ranks alone in
    turn (the others sleeping through the turn), then all at once. The stand-in is a Swin
    block's kinds of work over a working set larger than a core's caches, one thread; fixed
    work, not the model. (Attention over all 1024 tokens at once, a 32 MB score matrix, read
    the sharing twice as unsteadily from call to call: sd 0.068 against 0.031 in 8 calls
    each, interleaved, at 2 ranks on a 2-core host.) Built by every rank at once: the ranks
    agree on the length of a turn."""

    def __init__(self, rank: int, world_size: int, images: int = 8):
        import torch
        import torch.distributed as dist

        self.rank, self.world_size = rank, world_size
        self.work = swin_block_work(images)
        self.block()  # warm: allocations, the first call's dispatch
        # the others sleep through a rank's turn alone: waiting in a collective is not idle
        # (the wait polls), and it would slow the turn it is meant to leave alone. One length
        # for every rank's sleep: the slowest rank's estimate (a sleeper that woke early
        # would poll in the barrier through the turn)
        longest = torch.tensor([3 * max(self.block() for _ in range(2))], dtype=torch.float64)
        dist.all_reduce(longest, op=dist.ReduceOp.MAX)
        self.turn_s = float(longest)
        self.alone: list[float] = []
        self.together: list[float] = []

    def block(self) -> float:
        start = time.perf_counter()
        self.work()
        return time.perf_counter() - start

    def round(self) -> None:
        """One round: this rank's turn alone among the others', then every rank at once."""
        import torch.distributed as dist

        for turn in range(self.world_size):
            dist.barrier()
            if turn == self.rank:
                self.alone.append(self.block())
            else:
                time.sleep(self.turn_s)
        dist.barrier()
        self.together.append(self.block())

    def ratio(self) -> float:
        """This rank's median together over its median alone."""
        return turns_ratio(self.alone, self.together)


def turns_ratio(alone: list[float], together: list[float]) -> float:
    """The median time together over the median alone: a round the host stalled in stays one
    round (the mean of each round's ratio would take it whole).

    >>> round(turns_ratio([0.010, 0.010, 0.011], [0.012, 0.500, 0.011]), 6)
    1.2
    """
    return statistics.median(together) / statistics.median(alone)
