"""The paired run's switch between DDP and local steps, on one process (a gloo group of one):
what DDP itself does in a local step, seen from inside DDP rather than from swinkit's records."""
from types import SimpleNamespace

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from swinkit.measure import ddp_hooks
from swinkit.rank.step_switch import Switch
from swinkit.ddp_options import DDPOptions


class _Clock:
    def now(self):
        return 0.0


def _ddp_with_switch(model, options):
    """DDP over the world group whose comm hook is a Switch, as a paired run builds it."""
    ddp = DistributedDataParallel(model, **options.ddp_kwargs())
    switch = Switch.for_options(ddp_hooks.plain_launch, dist.new_group([0]), options)
    switch.route_buffer_broadcast(ddp)

    def hook(_, bucket):
        fut = switch(bucket, dist.group.WORLD, SimpleNamespace(arrive=None), _Clock())
        # a collective's future holds a list of tensors; DDP wants the tensor
        return fut.then(lambda f: f.value()[0] if isinstance(f.value(), list) else f.value())
    ddp.register_comm_hook(None, hook)
    run = SimpleNamespace(ddp=ddp, options=options)
    return ddp, switch, run


def _step(ddp, x):
    ddp(x).square().mean().backward()


def test_local_steps_sync_buffers_over_their_group_of_one_and_ddp_steps_over_all(
        one_rank_group, monkeypatch):
    """Seen from inside DDP (the group its buffer broadcast is given), not from swinkit's
    records: every step runs DDP's buffer sync, so its compute (packing, unpacking) is in the
    local steps too; only the DDP steps send it over the run's group."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8))
    ddp, switch, run = _ddp_with_switch(model, DDPOptions())
    groups = []
    original = dist._broadcast_coalesced
    monkeypatch.setattr(dist, "_broadcast_coalesced",
                        lambda group, *a: (groups.append(group), original(group, *a))[1])
    x = torch.randn(4, 8)
    for local in (False, True, True, False):
        switch.use(local=local)
        _step(ddp, x)
    world, alone = ddp.process_group, switch.alone
    assert world is not alone
    assert groups == [world, alone, alone, world]   # one broadcast per step, each kind its group
    # a run configured without the broadcast gets none in either kind of step
    ddp2, switch2, run2 = _ddp_with_switch(torch.nn.Sequential(torch.nn.BatchNorm1d(8)),
                                           DDPOptions(broadcast_buffers=False))
    groups.clear()
    for local in (False, True):
        switch2.use(local=local)
        _step(ddp2, torch.randn(4, 8))
    assert groups == []


def test_local_powersgd_compresses_from_the_first_local_step(one_rank_group):
    """PowerSGD's state counts its own iterations and compresses only from
    ``start_powerSGD_iter`` (2) on. The local side's first step comes after DDP steps, so it
    must compress at once: PowerSGD allocates its low-rank P matrices on its first compressed
    step, so they exist after one local step (they would not after an uncompressed one)."""
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 32))
    ddp, switch, run = _ddp_with_switch(model, DDPOptions(comm_hook="powersgd"))
    x = torch.randn(4, 32)
    switch.use(local=False)
    _step(ddp, x)
    _step(ddp, x)
    switch.use(local=True)
    _step(ddp, x)
    assert switch.local_launcher.state.p_memory_dict, "the first local step was not compressed"
