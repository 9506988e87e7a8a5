"""Local steps that meet where DDP would make the ranks meet.

The oracle predicts a DDP iteration from local steps: the same training loop with nothing
communicated. Left alone, those steps let the ranks drift apart: with one rank slow to load
its batch, the other computes its forward meanwhile *alone* on the shared cores and memory,
faster than it can beside the slow rank's forward. DDP does not let that happen: its buffer
broadcast before the forward and its last gradient all-reduce after backward hold every rank
until the last arrives, so the ranks' forwards, and their optimizer steps, run side by side,
contending with each other. Components measured drifting apart predicted the injected runs'
iterations several percent short, at two ranks only.

So the local steps meet at DDP's two blocking points, with a one-element all-reduce over every
rank (a barrier that queues on the stream like DDP's own collectives on GPU): before the forward
of a micro-batch whose DDP forward would sync buffers, and after the backward of one that
synchronises gradients. Each meeting is a blocking collective named :data:`MEET` on the
timeline; :func:`swinkit.measure.timeline.work_durations` takes it back out of the phase it fell
in, because the oracle replays the waits itself (from the ranks' own arrival times) and must not
count them twice.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from swinkit.measure.timeline import MEET


class Meet:
    """A barrier over every rank, recorded on a timeline. ``on``: whether this step meets (a
    paired run's DDP steps meet through DDP itself)."""

    def __init__(self, device: torch.device, on: bool = True):
        self.flag = torch.zeros(1, device=device)
        self.on = on

    def __call__(self, timeline):
        """Meet the other ranks; returns the mark when this rank left (its next arrival)."""
        record = timeline.collective(MEET, blocking=True, arrive=timeline.clock.now())
        dist.all_reduce(self.flag)  # the world group: every rank, whatever DDP's group is
        record.done = timeline.clock.now()
        return record.done
