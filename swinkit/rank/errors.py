"""Failures of a workload, named so the report says what ran out and where."""
from __future__ import annotations

from contextlib import contextmanager

import torch

OOM_HINTS = ("can't allocate memory", "out of memory", "cannot allocate memory")


class OutOfMemory(RuntimeError):
    """A rank ran out of host or device memory; the message names rank and batch size."""


@contextmanager
def out_of_memory_named(rank: int, cfg):
    """Turn MemoryError / torch.OutOfMemoryError / allocator RuntimeErrors into OutOfMemory."""
    try:
        yield
    except (MemoryError, torch.OutOfMemoryError) as exc:
        raise OutOfMemory(_message(rank, cfg, exc)) from exc
    except RuntimeError as exc:
        if any(h in str(exc).lower() for h in OOM_HINTS):
            raise OutOfMemory(_message(rank, cfg, exc)) from exc
        raise


def _message(rank: int, cfg, exc: BaseException) -> str:
    crop = "x".join(map(str, cfg.crop_size))
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    return (f"rank {rank}: out of memory at batch size {cfg.images_per_rank} per rank "
            f"({crop} crops, preset {cfg.preset}, {cfg.device}): {first}")
