"""GPU-only decisions driven on CPU: the suite hiding GPUs, the self-test's devices and clock
group, the training device, the pinned-memory remedy and the overhead tool's clock (the
set-up's torch choices: tests/test_setup_plan.py). Each GPU branch is reached through the
function that chooses it, with the device, backend or machine facts passed in; real-GPU
checks carry the ``gpu`` marker.
"""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch
from conftest import requires_gpu, selects_gpu_tests


# ---------------------------------------------------------------- the suite hides the GPUs

@pytest.mark.parametrize("markexpr, selects", [
    ("", False), ("not slow", False), ("slow", False), ("not gpu", False),
    ("slow and not gpu", False), ("not (slow or gpu)", False),
    ("gpu", True), ("gpu and not slow", True), ("slow or gpu", True), ("(gpu)", True),
    ("gpu and slow", True),        # a test marked both is selected
    ("gpux", False),               # another marker's name, not gpu
])
def test_only_a_run_that_selects_gpu_tests_keeps_the_gpus(markexpr, selects):
    assert selects_gpu_tests(markexpr) is selects


def test_this_run_hides_the_gpus_unless_it_selects_gpu_tests(request):
    if selects_gpu_tests(request.config.option.markexpr):
        pytest.skip("this run selects GPU tests: the GPUs stay visible")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    assert torch.cuda.device_count() == 0


def test_requires_gpu_is_the_gpu_marker_with_its_count():
    mark = requires_gpu(2).mark
    assert (mark.name, mark.kwargs) == ("gpu", {"n": 2})
    with pytest.raises(ValueError, match="n must be"):
        requires_gpu(0)


# ---------------------------------------------------------------- self-test entries on NCCL

class FakeRank:
    """What a rank entry reads of swinkit.launch.rank.Rank."""

    def __init__(self, rank=0, world_size=1, local_rank=0):
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.beats = []

    def heartbeat(self, step, stage="step"):
        self.beats.append(step)


def test_selftest_tensors_live_where_the_backend_reduces():
    from swinkit.rank.selftest import collective_device
    assert collective_device("nccl", 3) == torch.device("cuda", 3)
    assert collective_device("gloo", 3) == torch.device("cpu")
    with pytest.raises(ValueError, match="backend must be one of"):
        collective_device("mpi", 0)


def test_selftest_allreduce_runs_on_the_worlds_device(one_rank_group):
    from swinkit.rank.selftest import allreduce_loop
    rank = FakeRank()
    out = allreduce_loop(rank, steps=2, numel=8, pause_s=0.0)
    assert out["device"] == "cpu" and len(out["allreduce_s"]) == 2 and rank.beats == [0, 1]


def test_clock_offsets_ping_pong_on_a_gloo_group_not_the_world(one_rank_group, monkeypatch):
    """On an NCCL world the default group cannot carry the CPU ping-pong: the check must pass
    its own gloo group."""
    import torch.distributed as dist

    from swinkit.measure import clocks
    from swinkit.rank.selftest import clock_offset_check
    seen = {}

    def fake_estimate(rank, world, group=None, rounds=8, now=None):
        seen["group"] = group
        seen["backend"] = dist.get_backend(group) if group is not None else None
        return {"offset_s": [0.0], "error_s": [0.0]}
    monkeypatch.setattr(clocks, "estimate_clock_offsets", fake_estimate)
    clock_offset_check(FakeRank())
    assert seen["group"] is not None and seen["group"] is not dist.group.WORLD
    assert seen["backend"] == "gloo"


@requires_gpu()
def test_selftest_entries_run_on_nccl(no_orphans):
    from swinkit.launch import LaunchConfig, launch
    lc = LaunchConfig(nproc_per_node=1, wall_timeout_s=180)
    assert lc.resolved_backend() == "nccl"
    out = launch("swinkit.rank.selftest:allreduce_loop", {"steps": 2}, lc, quiet=True)
    assert out.result["ranks"][0]["device"] == "cuda:0"
    clock = launch("swinkit.rank.selftest:clock_offset_check", {}, lc, quiet=True)
    assert clock.result["ranks"][0]["offset_s"] == [0.0]


# ---------------------------------------------------------------- swinkit train's device

class RecordingModel(torch.nn.Module):
    """Stands in for the segmentor: records where it was asked to go (no GPU needed)."""

    def __init__(self):
        super().__init__()
        self.moved_to = []

    def to(self, *args, **kwargs):
        self.moved_to.append(args[0] if args else kwargs.get("device"))
        return self


def test_train_moves_the_model_to_the_configured_device(monkeypatch):
    from swinkit.components import train
    monkeypatch.setattr(train, "build_segmentor", lambda cfg: RecordingModel())
    model = train.build_model(SimpleNamespace(device="cuda"), cuda_available=True)
    assert model.moved_to == [torch.device("cuda")]
    model = train.build_model(SimpleNamespace(device="cpu"), cuda_available=False)
    assert model.moved_to == [torch.device("cpu")]


def test_train_refuses_cuda_without_a_gpu_rather_than_falling_back():
    from swinkit.components.train import train_device
    with pytest.raises(ValueError, match="'cuda' asked for"):
        train_device(SimpleNamespace(device="cuda"), cuda_available=False)
    with pytest.raises(ValueError, match="device must be"):
        train_device(SimpleNamespace(device="meta"), cuda_available=True)


@requires_gpu()
def test_train_runs_on_the_gpu(data_root):
    from swinkit.config import load_config
    from swinkit.components.train import build_model, train
    cfg = load_config("test", data_root, device="cuda")
    model = build_model(cfg)
    assert next(model.parameters()).device.type == "cuda"
    assert model.data_preprocessor.device.type == "cuda"
    assert train(cfg, iters=2, progress=lambda _: None).summary()["iterations"] == 2


# ---------------------------------------------------------------- the pinned-memory remedy

def test_pinned_remedy_makes_the_copy_asynchronous(data_root):
    """Pinned memory only overlaps the copy with compute when the copy does not block."""
    from swinkit.config import load_config
    from swinkit.experiments.remedies import CATALOGUE
    remedy = CATALOGUE["pinned_persistent"]
    assert remedy.overrides()["config.non_blocking_copy"] is True
    assert remedy.overrides()["config.pin_memory"] is True
    assert load_config("test", data_root, remedy.config).non_blocking_copy is True


# ---------------------------------------------------------------- the overhead tool's clock

def test_overhead_compares_loop_clock_with_loop_clock(monkeypatch):
    """The instrumented run's ``iter_s`` comes from the timeline (CUDA events on a GPU), the
    bare run's from the loop clock: the ratio must use ``loop_iteration`` for both."""
    from swinkit.experiments import overhead
    from swinkit.runs.ddp_run import DDPRunSpec

    def fake_run(spec, progress=None):
        bare = [[1.0, 1.2, 1.1], [1.3, 1.1, 1.2]]
        loop = bare if spec.bare else [[1.5, 1.6, 1.4], [1.4, 1.6, 1.5]]
        return {"iter_s": 9.0 if spec.bare else 0.5,   # timeline figures: another clock
                "ranks": [{"loop_iteration": it, "iteration": [0.5] * 3} for it in loop]}
    monkeypatch.setattr(overhead, "run_ddp", fake_run)
    out = overhead.instrumentation_overhead(DDPRunSpec(preset="test", nproc_per_node=2, iters=3),
                                            repeats=2, progress=lambda _: None)
    # per rank medians: bare 1.1, 1.2 -> 1.15; instrumented 1.5, 1.5 -> 1.5
    assert out["bare_median_s"] == pytest.approx(1.15)
    assert out["instrumented_median_s"] == pytest.approx(1.5)
    assert out["overhead"] == pytest.approx(1.5 / 1.15 - 1)
