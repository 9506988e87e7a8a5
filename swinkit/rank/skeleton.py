"""The course every rank loop shares, whatever the engine (DDP, DeepSpeed, DataParallel):
warm-up, then the measured window (CPU use, NVML, the device's peak memory start at its first
step), one host clock read at the top of each step, and the same result fields read out.

The engines differ in their step and in what they add to the result; here is only what they
must agree on, so that a DDP row and a DeepSpeed row of one comparison mean the same thing
(a loop that started its samplers one step late, or read its iteration times from another
clock, would differ from the others for no reason the report could name).
"""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Callable

from swinkit.measure import memory
from swinkit.measure.phases import PHASES
from swinkit.measure.timeline import phase_durations


@dataclass
class Window:
    """The samplers of the measured window: ``cpu`` (a CpuUsage), ``nvml`` (None, one sampler
    or several), and the devices whose peak memory is reset at the window's start."""
    cpu: object
    nvml: object = None
    reset_peaks: Callable[[], None] = lambda: None

    def start(self) -> None:
        self.reset_peaks()
        self.cpu.start()
        self.nvml and self.nvml.start()

    def stop(self) -> tuple[dict, dict | None]:
        return self.cpu.stop(), self.nvml.stop() if self.nvml else None


def cuda_peaks(cuda: bool) -> Callable[[], None]:
    """Reset the current device's peak memory (nothing on CPU)."""
    return lambda: memory.reset_device_peak(cuda)


def drained_now(drain: Callable[[], None] | None) -> float:
    """The host clock, read once ``drain`` has returned (it waits for the device's queued
    work; None on CPU, where work is done when its call returns). A loop clock read at the end
    of a step on a GPU, with the step's kernels still queued, ends the step before its work
    does: the loop's own iteration times, the check of the timeline's, would read short."""
    drain and drain()
    return time.perf_counter()


def run_steps(rank, total: int, warmup: int, step: Callable[[int], None], window: Window,
              before: Callable[[int], None] | None = None,
              drain: Callable[[], None] | None = None) -> list[float]:
    """``step(n)`` for n in 0..total-1: the window starts before step ``warmup``, each step
    writes the rank's heartbeat first (a small file write, in the previous step's tail) and
    reads the host clock just before it runs. Returns the clock reads plus one after the last
    step, once ``drain`` has waited for the device (:func:`drained_now`): the loop's own
    iteration times (:func:`loop_iterations`). Inside the loop no drain is needed: in a steady
    state each step blocks on the device at the same point (a collective's wait, SyncBN's
    count), so start-to-start intervals are the period; only the last step has no successor
    to absorb its queued tail."""
    starts = []
    for n in range(total):
        if n == warmup:
            window.start()
        rank.heartbeat(n)
        before and before(n)
        starts.append(time.perf_counter())
        step(n)
    starts.append(drained_now(drain))
    return starts


def loop_iterations(starts: list[float], positions: list[int]) -> list[float]:
    """Seconds from the clock read at each step in ``positions`` to the next read."""
    return [starts[n + 1] - starts[n] for n in positions]


def identity(rank, device: str, losses: list, positions: list[int], warmup: int,
             loader_workers: int) -> dict:
    """The fields every rank's result opens with: who, where, its losses at ``positions``."""
    import torch  # the rank's process has it; this module's readers need not
    return {"rank": rank.rank, "host": socket.gethostname(), "device": device,
            "loss": [float(losses[n]) for n in positions], "warmup": warmup,
            "threads": torch.get_num_threads(), "loader_workers": loader_workers}


def timeline_fields(timeline: list[dict], warmup: int) -> dict:
    """A resolved timeline and what every report reads from it: the iteration (the sum of its
    phases) and each phase, over the measured iterations (after ``warmup``).

    >>> it = {"marks": [["start", 0.0], ["data_wait", 1.0], ["forward", 3.0]], "collectives": []}
    >>> out = timeline_fields([it, it], warmup=1)
    >>> out["iteration"], out["phases"]["forward"]
    ([3.0], [2.0])
    """
    measured = [phase_durations(it) for it in timeline[warmup:]]
    return {"timeline": timeline, "iteration": [sum(p.values()) for p in measured],
            "phases": {p: [m[p] for m in measured] for p in PHASES}}


def seed_rank(seed: int, rank: int) -> None:
    """Every engine's rank seeds alike: torch with ``seed`` (identical initial weights on every
    rank), numpy's and Python's global generators with ``seed + rank`` (MMSeg's transforms draw
    from numpy's: in loader workers torch seeds it from the loader's seeded generator; in the
    main process, with loader workers 0, from here)."""
    import random

    import numpy as np
    import torch
    np.random.seed(seed + rank)
    random.seed(seed + rank)
    torch.manual_seed(seed)


def rank_precision(cfg, device):
    """The preset's training precision applied in this rank's process, as DDP's rank applies
    it (:func:`swinkit.model.precision.training_precision`: TF32 and cuDNN switches set, the
    autocast context and loss scaling returned), from ``cfg``'s ``precision`` and
    ``cudnn_benchmark`` knobs (the supervisor put ``--precision`` among the overrides and
    checked it against the engine and the device before launch). A rank's result carries
    its ``to_dict()`` as ``"precision"``."""
    from swinkit.model.precision import training_precision
    from swinkit.precision import DEFAULT
    return training_precision(cfg.get("precision", DEFAULT), device,
                              cudnn_benchmark=bool(cfg.get("cudnn_benchmark", False)))
