"""A stand-in for the model's compute: a Swin block's kinds of work, fixed, not the model.

A held-out prediction times it at the target size without the model (each rank alone in turn
and every rank at once: :func:`swinkit.experiments.target_probes.stand_in_slowdown`), and in a
launch that carries the run at 1 it keeps the other ranks busy while one rank runs the
model's own step (the "beside" steps of :func:`swinkit.rank.step_switch.schedule`).
"""
from __future__ import annotations


def swin_block_work(images: int):
    """A function doing a Swin block's kinds of work on ``images`` images of 1024 tokens in
    windows of 8 x 8 (layer norm, MLP matmuls, GELU, attention softmax within each window),
    one thread, no gradients: the stand-in for the model's compute. Its own random generator:
    a rank that builds it beside the model leaves the model's random stream (dropout, drop
    path) as a rank without it has it."""
    import torch

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(images * 16, 64, 128, generator=gen)
    up = torch.randn(128, 512, generator=gen) / 12
    down = torch.randn(512, 128, generator=gen) / 24
    norm = torch.nn.LayerNorm(128)

    def work() -> None:
        with torch.no_grad():
            h = torch.nn.functional.gelu(norm(x) @ up) @ down
            (h @ h.transpose(1, 2)).softmax(-1)
    return work


def busy_until(done, work) -> int:
    """Run ``work`` again and again until ``done`` (an async collective's handle) completes,
    then wait on it; how many times it ran. A rank waiting in a gloo collective leaves its core
    idle (a neighbour's block ran as fast beside it as beside a sleeping rank, x0.89-1.00 over
    3 launches on a 2-core host), so without this that core would be free for the rank it is
    meant to share the host with."""
    count = 0
    while not done.is_completed():
        work()
        count += 1
    done.wait()
    return count
