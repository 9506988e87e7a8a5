"""A paired launch: one DDP model measured both ways, real DDP steps and local ones.

Launches of one configuration here ran up to 10 % apart (where a launch's memory and threads
landed, what else the machine ran then), so components measured in one launch and a DDP run in
another cannot be held to each other closer than that. A paired launch alternates optimizer
steps of real DDP and *local* steps in one process per rank (their order:
:class:`swinkit.rank.plan.StepPlan`); :class:`Switch`, DDP's comm hook, sends each step's
buckets over the run's group or over the rank's own group of one (the local steps'
communication is left out; the oracle puts it back). Where DDP would make the ranks meet, the
local steps meet too (:mod:`swinkit.rank.meet`).
"""
from __future__ import annotations

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from swinkit.measure import ddp_hooks
from swinkit.measure.sync_bn import is_sync_batch_norm
from swinkit.ddp_options import DDPOptions


class Switch:
    """A launcher that either communicates (``real``) or runs the local one over this rank's
    group of one, as the component measurement does: one DDP model measured both ways in one
    launch (``paired``), so that whatever makes one launch faster than another (where its
    memory and threads landed, what else the machine ran then) reaches both alike."""

    def __init__(self, real, alone, local_launcher):
        self.real, self.alone, self.local_launcher = real, alone, local_launcher
        self.local = False
        self.sync_bn: list = []  # (module, its own group) of route_sync_batch_norm
        self.shapes = getattr(local_launcher, "shapes", None)  # PowerSGD's, for its payloads

    @classmethod
    def for_options(cls, real, alone, options: DDPOptions) -> "Switch":
        """The switch for these DDP options: the local side runs the options' hook over the
        group of one. Local steps start after the DDP warm-up, whose iterations have already
        rebuilt DDP's buckets, so a PowerSGD local side compresses from its first step on (its
        own state would otherwise count two uncompressed warm-up steps of its own, and those
        would be measured)."""
        local = ddp_hooks.hook_launcher(options.comm_hook, options.powersgd_rank, alone, local=True)
        if isinstance(local, ddp_hooks.PowerSGDLaunch):
            local.compress_from_now()
        return cls(real, alone, local)

    def use(self, local: bool) -> None:
        self.local = local
        for module, group in self.sync_bn:
            module.process_group = self.alone if local else group

    def route_sync_batch_norm(self, model) -> int:
        """SyncBN's statistics go over the group of one in local steps, where SyncBN is then
        plain batch norm: the local steps communicate nothing, and the SyncBN collectives of
        the real steps are timed on their own for the oracle. Returns how many modules."""
        self.sync_bn = [(m, m.process_group) for m in sync_batch_norms(model)]
        self.use(self.local)
        return len(self.sync_bn)

    def route_buffer_broadcast(self, ddp: DistributedDataParallel) -> None:
        """DDP's buffer broadcast before each forward goes over the group of one in local
        steps. They keep the rest of DDP's buffer sync, which is compute: walking the module
        for its buffers, packing them into one message and unpacking it. A local run's DDP over
        its group of one does the same, so the oracle adds only what N ranks add to it.
        Leaving the whole sync out of the local steps instead made the test preset's predicted
        forward ~1-3 ms short of DDP's at N=1, where there is nothing to communicate.

        DDP has no public way to give the buffer broadcast its own group; its
        ``_distributed_broadcast_coalesced`` is the one line that names the group, so this
        instance's copy of it is replaced by the same call with the group switched. (Not
        routed, as swinkit uses neither: DDP's Join, whose rank agreement all-reduces over
        every rank, and buffer comm hooks, which bypass this method.)"""
        def broadcast(tensors, buffer_size, authoritative_rank=0):
            if self.local:  # this rank is rank 0 of its group of one
                dist._broadcast_coalesced(self.alone, tensors, buffer_size, 0)
            else:
                dist._broadcast_coalesced(ddp.process_group, tensors, buffer_size,
                                          authoritative_rank)
        ddp._distributed_broadcast_coalesced = broadcast

    def __call__(self, bucket, group, record, clock):
        if self.local:
            return self.local_launcher(bucket, self.alone, record, clock)
        return self.real(bucket, group, record, clock)


def sync_batch_norms(model) -> list:
    """The model's SyncBatchNorm modules (torch's, and its CPU stand-in)."""
    return [m for m in model.modules() if is_sync_batch_norm(m)]
