"""SyncBN on the instrumented path: the GPU presets' heads, exercised on CPU.

On GPU the presets keep SyncBN in UPerHead and FCNHead (MMCV ConvModules: conv, SyncBN,
``ReLU(inplace=True)``). Recording it once crashed every instrumented GPU run in its first
backward (a module backward hook wraps SyncBN's output in a view that the in-place ReLU then
modifies), and booked SyncBN's compute as communication. These tests run SyncBN on CPU: torch's
own SyncBatchNorm where it does not synchronise, and swinkit's CPU stand-in
(:mod:`swinkit.model.cpu_syncbn`) where it does.
"""
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from swinkit.measure import ddp_hooks, sync_bn
from swinkit.measure.clocks import HostClock, make_clock
from swinkit.measure.timeline import Timeline
from swinkit.model.cpu_syncbn import CpuSyncBatchNorm, _CpuSyncBatchNormFunction
from swinkit.rank.step_switch import Switch, sync_batch_norms


def _conv_module(c_in: int, c_out: int, norm: nn.Module) -> nn.Sequential:
    """MMCV ConvModule's order: conv, norm, in-place ReLU on the norm's output."""
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), norm,
                         nn.ReLU(inplace=True))


class _AlwaysSync(CpuSyncBatchNorm):
    """The stand-in's synchronised path even in a world of one (the gather and the reduce run
    over one rank): the code path every rank runs at N > 1, in one process."""

    def forward(self, x):
        group = self.process_group or dist.group.WORLD
        return _CpuSyncBatchNormFunction.apply(x, self.weight, self.bias, self.running_mean,
                                               self.running_var, self.eps, self.momentum, group, 1)


def test_recording_torch_syncbn_before_an_inplace_relu_does_not_break_backward():
    """The reproduction of the GPU crash, on CPU: MMCV's ConvModule order with torch's
    SyncBatchNorm (no process group: it runs as batch norm). Failed with "Output 0 of
    BackwardHookFunctionBackward is a view and is being modified inplace" while SyncBN was
    recorded with module backward hooks."""
    pytest.importorskip("mmcv")
    from mmcv.cnn import ConvModule
    model = nn.Sequential(*[ConvModule(c, 8, 3, padding=1, norm_cfg=dict(type="SyncBN"))
                            for c in (3, 8)]).train()
    timeline = Timeline(make_clock(cuda=False))
    timeline.begin()
    assert sync_bn.record_module_collectives(timeline, model) == 2
    model(torch.randn(2, 3, 16, 16)).sum().backward()
    # no process group: SyncBN ran plain batch norm, so nothing waited and nothing is recorded
    assert timeline.current.collectives == []
    assert all(p.grad is not None for p in model.parameters())


def test_stand_in_matches_batch_norm_over_the_union_of_batches(one_rank_group):
    """Outputs, input gradients, weight gradients and running statistics of the stand-in's
    synchronised path against torch's native batch norm (a separate implementation) on the
    same batch: over one rank the union is that batch."""
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 5, dtype=torch.float64)
    ours, ref = _AlwaysSync(3).double(), nn.BatchNorm2d(3).double()
    with torch.no_grad():
        for m in (ours, ref):
            m.weight.copy_(torch.tensor([0.5, 1.5, -2.0]))
            m.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    upstream = torch.randn_like(x)
    (ours(xa) * upstream).sum().backward()
    (ref(xb) * upstream).sum().backward()
    assert torch.allclose(xa.grad, xb.grad, atol=1e-10)
    assert torch.allclose(ours.weight.grad, ref.weight.grad, atol=1e-10)
    assert torch.allclose(ours.bias.grad, ref.bias.grad, atol=1e-10)
    assert torch.allclose(ours.running_mean, ref.running_mean)
    assert torch.allclose(ours.running_var, ref.running_var)  # unbiased, as torch's
    assert torch.allclose(ours(x), F.batch_norm(x, None, None, ref.weight, ref.bias, True))


def test_stand_in_is_plain_batch_norm_in_a_world_of_one(one_rank_group):
    """torch's rule: a group of one does not synchronise (no collective, nothing recorded)."""
    model = _conv_module(3, 4, CpuSyncBatchNorm(4)).train()
    timeline = Timeline(HostClock())
    timeline.begin()
    sync_bn.record_module_collectives(timeline, model)
    model(torch.randn(2, 3, 8, 8)).sum().backward()
    assert timeline.current.collectives == []


def test_only_syncbns_collectives_are_recorded_forward_and_backward(one_rank_group):
    """With a synchronising SyncBN in ConvModule's order: one blocking ``.fwd`` (the gather)
    and one ``.bwd`` (the reduce) record per layer and iteration, and collectives outside
    SyncBN are not recorded."""
    model = nn.Sequential(_conv_module(3, 4, _AlwaysSync(4)), _conv_module(4, 4, _AlwaysSync(4)))
    timeline = Timeline(HostClock())
    assert sync_bn.record_module_collectives(timeline, model) == 2
    for _ in range(2):
        timeline.begin()
        model(torch.randn(2, 3, 8, 8)).sum().backward()
        dist.all_reduce(torch.ones(1))  # not SyncBN's: passes through unrecorded
        names = [(c.name, c.blocking) for c in timeline.current.collectives]
        assert names == [("0.1.fwd", True), ("1.1.fwd", True), ("1.1.bwd", True), ("0.1.bwd", True)]
        assert all(c.done >= c.arrive for c in timeline.current.collectives)
        assert timeline.current.collectives[0].nbytes == (2 * 4 + 1) * 4  # mean, var, count


class _LoggingClock(HostClock):
    """A clock that writes each read into a shared log, in order with the compute."""

    def __init__(self, log):
        self.log = log

    def now(self):
        self.log.append("mark")
        return float(len(self.log))


class _ComputeAroundGather(nn.SyncBatchNorm):
    """SyncBN's shape: statistics, the gather, normalisation, each logged."""

    def __init__(self, log):
        super().__init__(2)
        self.log = log

    def forward(self, x):
        self.log.append("stats")
        dist.all_gather([torch.empty(5)], torch.zeros(5))
        self.log.append("normalise")
        return x


def test_syncbn_compute_stays_outside_its_collective_record(one_rank_group):
    """The record opens after SyncBN's statistics and closes before its normalisation, so blame
    books the compute as forward, not as exposed communication (the whole module's span was
    recorded before, even at world size 1)."""
    log = []
    timeline = Timeline(_LoggingClock(log))
    timeline.begin()
    model = nn.Sequential(_ComputeAroundGather(log))
    sync_bn.record_module_collectives(timeline, model)
    log.clear()
    model(torch.zeros(2, 2, 1, 1))
    assert log == ["stats", "mark", "mark", "normalise"]
    (record,) = timeline.current.collectives
    assert (record.arrive, record.done) == (2.0, 3.0)  # the log's length at each read


def test_switch_routes_syncbn_over_the_group_of_one_in_local_steps(one_rank_group):
    """Local steps must communicate nothing: SyncBN's group is the rank's own in them, and the
    run's again in real steps."""
    alone = dist.new_group([0])
    model = nn.Sequential(_conv_module(3, 4, CpuSyncBatchNorm(4)), nn.BatchNorm2d(4))
    switch = Switch(ddp_hooks.plain_launch, alone, ddp_hooks.local_launch)
    assert switch.route_sync_batch_norm(model) == 1 == len(sync_batch_norms(model))
    (bn,) = sync_batch_norms(model)
    switch.use(local=True)
    assert bn.process_group is alone
    switch.use(local=False)
    assert bn.process_group is None  # its own: the world group


def test_every_collective_torchs_syncbn_calls_is_recorded():
    """The recorder wraps collectives by name; torch renamed SyncBN's gather before
    (all_gather_into_tensor, all_gather_single). Read the installed torch's SyncBN Function
    and check each collective it calls is one the recorder wraps."""
    import inspect
    import re

    from torch.nn.modules import _functions
    source = inspect.getsource(_functions.SyncBatchNorm)
    called = set(re.findall(r"(?:\bdist|torch\.distributed)\.(\w+)\(", source))
    assert called, "torch's SyncBatchNorm calls no collective: the recorder needs a new hook"
    assert called <= set(sync_bn._TAPPED), called - set(sync_bn._TAPPED)


def test_syncbns_gathers_are_timed_as_torchs_syncbn_makes_them(monkeypatch):
    """Its forward gathers, timed for the oracle, take the form torch's SyncBN takes on each
    backend: 4 ranks over NCCL gather 5 statistics into one flat tensor of 20, in one call per
    layer; over gloo (no flat gather) into a list of 4. The list form on NCCL adds N
    allocations and N copies: a too-large SyncBN share of the prediction on GPUs."""
    from swinkit.rank import collective_timing

    calls = []
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 4)
    monkeypatch.setattr(dist, "all_gather_into_tensor",
                        lambda out, t, group=None: calls.append(("flat", out.numel(), t.numel())))
    monkeypatch.setattr(dist, "all_gather",
                        lambda outs, t, group=None: calls.append(("list", len(outs), t.numel())))
    entry = [torch.zeros(5), torch.zeros(3)]
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    collective_timing._entry_runner("all_gather")(entry)
    assert calls == [("flat", 20, 5), ("flat", 12, 3)]
    calls.clear()
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "ucc")  # as torch: not gloo
    collective_timing._entry_runner("all_gather")(entry)
    assert calls == [("flat", 20, 5), ("flat", 12, 3)]
    calls.clear()
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "gloo")
    collective_timing._entry_runner("all_gather")(entry)
    assert calls == [("list", 4, 5), ("list", 4, 3)]


def _sync_bn_names(iteration) -> list[str]:
    return [c["name"] for c in iteration["collectives"] if c["name"].endswith((".fwd", ".bwd"))]


@pytest.mark.slow
def test_paired_run_keeps_syncbn_on_the_timeline_and_out_of_the_local_steps(data_root):
    """The test preset with SyncBN kept (its CPU stand-in), through the whole instrumented
    path at two ranks: DDP steps, local steps, the contention loop and the components. Its
    heads hold 11 ConvModules with a norm (UPerHead: 2 pooling scales, 3 laterals, 3 FPN convs,
    the bottleneck and the FPN bottleneck; FCNHead: 1), so each DDP iteration records 11
    gathers and 11 reduces; the local steps record none (SyncBN over the group of one); the
    contention loop ends on both ranks (each used to decide alone when to stop); the
    components time SyncBN's collectives for the oracle; and a world of one records none."""
    from swinkit.runs.ddp_run import DDPRunSpec, run_ddp

    def run(world_size, paired):
        spec = DDPRunSpec(preset="test", nproc_per_node=world_size, iters=4, warmup=2, workers=0,
                          data_root=str(data_root), overrides={"cpu_sync_bn": True},
                          paired=paired)
        return run_ddp(spec, progress=lambda s: None)

    two = run(2, paired=True)
    for rank in two["ranks"]:
        assert len(rank["sync_bn_channels"]) == 11
        for it in rank["timeline"]:
            names = _sync_bn_names(it)
            assert len(names) == 22 and sum(n.endswith(".fwd") for n in names) == 11
        assert all(_sync_bn_names(it) == [] for it in rank["local"]["timeline"])
        assert rank["comm"]["sync_bn_s"]["layers"] == 11
        assert rank["comm"]["sync_bn_s"]["forward"] > 0 and rank["comm"]["sync_bn_s"]["backward"] > 0
        assert len(rank["contention"]["rounds_loaded_s"]) > 0
    assert two["blame_problems"] == []
    one = run(1, paired=False)
    assert all(_sync_bn_names(it) == [] for it in one["ranks"][0]["timeline"])
