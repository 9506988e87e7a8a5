"""The paired run's switch between DDP and local steps, on one process (a gloo group of one):
what DDP itself does in a local step, seen from inside DDP rather than from swinkit's records."""
from types import SimpleNamespace

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from swinkit.measure import ddp_hooks
from swinkit.workloads.ddp import Switch
from swinkit.workloads.ddp_options import DDPOptions


class _Clock:
    def now(self):
        return 0.0


def _ddp_with_switch(model, options):
    """DDP over the world group whose comm hook is a Switch, as a paired run builds it."""
    ddp = DistributedDataParallel(model, **options.ddp_kwargs())
    switch = Switch.for_options(ddp_hooks.plain_launch, dist.new_group([0]), options)

    def hook(_, bucket):
        fut = switch(bucket, dist.group.WORLD, SimpleNamespace(arrive=None), _Clock())
        # a collective's future holds a list of tensors; DDP wants the tensor
        return fut.then(lambda f: f.value()[0] if isinstance(f.value(), list) else f.value())
    ddp.register_comm_hook(None, hook)
    run = SimpleNamespace(ddp=ddp, options=options)
    return ddp, switch, run


def _step(ddp, x):
    ddp(x).square().mean().backward()


def test_local_steps_broadcast_no_buffers_and_ddp_steps_do(one_rank_group, monkeypatch):
    """Counted inside DDP (its buffer broadcast), not by swinkit's own records."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8))
    ddp, switch, run = _ddp_with_switch(model, DDPOptions())
    calls = []
    original = ddp._default_broadcast_coalesced
    monkeypatch.setattr(ddp, "_default_broadcast_coalesced",
                        lambda *a, **k: (calls.append(switch.local), original(*a, **k))[1])
    x = torch.randn(4, 8)
    for local in (False, True, True, False):
        switch.use(run, local=local)
        _step(ddp, x)
    assert calls == [False, False]            # one broadcast per DDP step, none in local ones
    # a run configured without the broadcast gets none in DDP steps either
    ddp2, switch2, run2 = _ddp_with_switch(torch.nn.Sequential(torch.nn.BatchNorm1d(8)),
                                           DDPOptions(broadcast_buffers=False))
    switch2.use(run2, local=False)
    assert not ddp2.will_sync_module_buffers()


def test_local_powersgd_compresses_from_the_first_local_step(one_rank_group):
    """PowerSGD's state counts its own iterations and compresses only from
    ``start_powerSGD_iter`` (2) on. The local side's first step comes after DDP steps, so it
    must compress at once: PowerSGD allocates its low-rank P matrices on its first compressed
    step, so they exist after one local step (they would not after an uncompressed one)."""
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 32))
    ddp, switch, run = _ddp_with_switch(model, DDPOptions(comm_hook="powersgd"))
    x = torch.randn(4, 32)
    switch.use(run, local=False)
    _step(ddp, x)
    _step(ddp, x)
    switch.use(run, local=True)
    _step(ddp, x)
    assert switch.local_launcher.state.p_memory_dict, "the first local step was not compressed"
