"""A stand-in for the model's compute: a Swin block's kinds of work, fixed, not the model.

A held-out prediction times it at the target size without the model (each rank alone in turn
and every rank at once: :func:`swinkit.predict.rank.probes.stand_in_slowdown`), and in
the model's rhythm between meetings (:func:`swinkit.predict.rank.probes.rhythm_wait`).
"""
from __future__ import annotations


def swin_block_work(images: int):
    """A function doing a Swin block's kinds of work on ``images`` images of 1024 tokens in
    windows of 8 x 8 (layer norm, MLP matmuls, GELU, attention softmax within each window),
    one thread, no gradients: the stand-in for the model's compute. Its own random generator:
    building it leaves torch's global random stream as it was."""
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
