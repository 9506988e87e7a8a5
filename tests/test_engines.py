"""Engines beside DDP: the bytes arithmetic, DataParallel's pure parts, the engine switch's
validation, the collective recorder, the asv classes' shape (fast, CPU); and real runs of the
test preset under DeepSpeed ZeRO 0-2 and DDP over gloo (slow).

Expectations are computed independently of the code under test: bytes from the parameter list
or from tensor shapes by hand, splits against ``torch.chunk``, losses of DeepSpeed against
DDP's run of the same seed.
"""
import importlib
import inspect
import json

import pytest
import torch

from swinkit.attribution import traffic
from swinkit.rank.engine_collectives import CollectiveRecorder, message_bytes
from swinkit.rank.dp_parts import (chunk_sizes, gather_bytes, gather_losses, module_bytes,
                                      scatter_bytes, split_batch, tensor_tree_bytes)
from swinkit.rank.devices import check_dp_devices
from swinkit.runs.engine_spec import EngineSpec, EngineUnavailable, spec_for_key
from swinkit.measure.clocks import HostClock
from swinkit.measure.timeline import Timeline, phase_durations

HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None
needs_deepspeed = pytest.mark.skipif(not HAS_DEEPSPEED, reason="DeepSpeed is not installed "
                                     "(tools/setup.sh installs it)")


# ----------------------------------------------------------------- bytes arithmetic

@pytest.mark.parametrize("n, expected_factor", [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_ring_allreduce_sends_two_n_minus_one_over_n(n, expected_factor):
    # written out: reduce-scatter sends N-1 chunks of S/N, all-gather another N-1
    nbytes = 4 * 1_000_003
    chunks_sent = 2 * (n - 1)
    assert traffic.ring_allreduce_bytes(nbytes, n) == pytest.approx(chunks_sent * nbytes / n)
    assert traffic.ring_allreduce_bytes(nbytes, n) == pytest.approx(expected_factor * nbytes)


def test_wire_factors_of_the_other_collectives():
    assert traffic.wire_bytes("all_gather_into_tensor", 800, 4) == pytest.approx(600)
    assert traffic.wire_bytes("reduce_scatter_tensor", 800, 4) == pytest.approx(600)
    assert traffic.wire_bytes("broadcast", 800, 4) == 800
    assert traffic.wire_bytes("all_reduce", 800, 1) == 0
    with pytest.raises(ValueError, match="op must be one of"):
        traffic.wire_bytes("gossip", 8, 2)
    with pytest.raises(ValueError, match="world_size"):
        traffic.wire_bytes("all_reduce", 8, 0)


def test_ddp_traffic_is_one_allreduce_per_bucket():
    buckets = [1_048_576, 26_214_400, 3_000_000]
    t = traffic.ddp_traffic(buckets, 4)
    assert t.collectives == 3
    assert t.message_bytes == 1_048_576 + 26_214_400 + 3_000_000
    assert t.wire_bytes_per_rank == pytest.approx(1.5 * (1_048_576 + 26_214_400 + 3_000_000))


def test_zero_traffic_as_the_zero_paper_counts_it():
    psi = 4 * 10_000_000  # fp32 gradients = fp32 parameters
    n = 8
    allreduce = 2 * (n - 1) / n * psi
    # stage 1/2: reduce-scatter + all-gather = the all-reduce's volume
    for stage in (1, 2):
        t = traffic.zero_traffic(psi, psi, n, stage)
        assert t.wire_bytes_per_rank == pytest.approx(allreduce)
        assert t.message_bytes == 2 * psi
    assert traffic.zero_traffic(psi, psi, n, 0).wire_bytes_per_rank == pytest.approx(allreduce)
    # DeepSpeed's default all-reduces the bucket, then all-gathers: 3 (N-1)/N
    t = traffic.zero_traffic(psi, psi, n, 1, reduce_with_all_reduce=True)
    assert t.wire_bytes_per_rank == pytest.approx(3 * (n - 1) / n * psi)
    # stage 2 reduces at every micro-step, stage 1 once per optimizer step
    assert traffic.zero_traffic(psi, psi, n, 2, grad_accum=4).collectives == 5
    assert traffic.zero_traffic(psi, psi, n, 1, grad_accum=4).collectives == 2
    with pytest.raises(ValueError, match="zero stage"):
        traffic.zero_traffic(psi, psi, n, 3)


def test_zero_model_state_bytes_by_hand():
    params, n = 1000, 4
    s0 = traffic.zero_model_state_bytes(params, n, 0)
    assert (s0["params"], s0["grads"], s0["optimizer_states"]) == (4000, 4000, 8000)
    s1 = traffic.zero_model_state_bytes(params, n, 1)
    assert (s1["params"], s1["grads"], s1["optimizer_states"]) == (4000, 4000, 2000)
    s2 = traffic.zero_model_state_bytes(params, n, 2)
    assert (s2["params"], s2["grads"], s2["optimizer_states"]) == (4000, 1000, 2000)
    assert s2["total"] == 7000


def test_dataparallel_copy_bytes_by_hand():
    # 4 devices, 8 images of 3x64x64 fp32, 1 MB params, 1 KB buffers, 4-byte loss
    images = 8 * 3 * 64 * 64 * 4
    t = traffic.dp_traffic(images, 1_000_000, 1_000, 4 * 4, 1_000_000, 4)
    assert t["scatter"] == pytest.approx(6 * 3 * 64 * 64 * 4)          # 6 of 8 images leave
    assert t["replicate"] == 3 * 1_001_000
    assert t["gather"] == pytest.approx(3 * 4)
    assert t["grad_reduce"] == 3 * 1_000_000
    assert t["total"] == pytest.approx(sum(v for k, v in t.items() if k != "total"))
    single = traffic.dp_traffic(images, 1_000_000, 1_000, 16, 1_000_000, 1)
    assert single["total"] == 0


# ----------------------------------------------------------------- DataParallel, pure parts

@pytest.mark.parametrize("batch", [1, 2, 3, 7, 8, 16])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_chunk_sizes_are_torch_chunk(batch, n):
    assert chunk_sizes(batch, n) == [len(c) for c in torch.arange(batch).chunk(n)]


def _batch(b=4, h=8, w=8):
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    inputs = torch.arange(b, dtype=torch.float32).view(b, 1, 1, 1).expand(b, 3, h, w).clone()
    samples = []
    for i in range(b):
        s = SegDataSample(metainfo={"idx": i})
        s.gt_sem_seg = PixelData(data=torch.full((1, h, w), i, dtype=torch.int64))
        samples.append(s)
    return {"inputs": inputs, "data_samples": samples, "mode": "loss"}


def test_split_batch_keeps_images_with_their_samples():
    data = _batch(5)
    parts = split_batch(data, [torch.device("cpu")] * 3)
    assert [p["inputs"].shape[0] for p in parts] == [2, 2, 1]
    for part in parts:
        assert part["mode"] == "loss"
        for image, sample in zip(part["inputs"], part["data_samples"]):
            assert sample.metainfo["idx"] == int(image[0, 0, 0])
            assert int(sample.gt_sem_seg.data[0, 0, 0]) == sample.metainfo["idx"]
    with pytest.raises(ValueError, match="data_samples has 4 entries for 5 images"):
        split_batch(dict(data, data_samples=data["data_samples"][:4]), ["cpu"])


def test_scatter_bytes_count_what_leaves_the_source():
    """The 'meta' device stands in for a second GPU: what goes there is what a scatter copies."""
    data = _batch(4, 8, 8)
    parts = split_batch(data, [torch.device("cpu"), torch.device("meta")])
    # by hand: 2 images of 3x8x8 fp32 + 2 label maps of 1x8x8 int64 leave the source
    assert scatter_bytes(parts, "cpu") == 2 * 3 * 8 * 8 * 4 + 2 * 8 * 8 * 8
    assert tensor_tree_bytes(parts[0]) == 2 * 3 * 8 * 8 * 4 + 2 * 8 * 8 * 8


def test_gather_losses_weights_replicas_by_their_images_and_backpropagates():
    a = torch.tensor(1.0, requires_grad=True)
    b = torch.tensor(4.0, requires_grad=True)
    out = gather_losses([{"loss_ce": a * 2, "acc": torch.tensor([50.0])},
                         {"loss_ce": b * 2, "acc": torch.tensor([80.0])}], "cpu", weights=[3, 1])
    assert float(out["loss_ce"]) == pytest.approx((3 * 2 + 1 * 8) / 4)
    assert out["acc"].tolist() == pytest.approx([(3 * 50 + 80) / 4])
    out["loss_ce"].backward()
    assert float(a.grad) == pytest.approx(2 * 3 / 4) and float(b.grad) == pytest.approx(2 / 4)
    with pytest.raises(ValueError, match="different keys"):
        gather_losses([{"x": a}, {"y": b}], "cpu")
    on_meta = [{"l": torch.zeros(())}, {"l": torch.zeros((), device="meta")}]
    assert gather_bytes(on_meta, "cpu") == 4


def test_module_bytes_from_the_parameter_list():
    m = torch.nn.Sequential(torch.nn.Linear(10, 5), torch.nn.BatchNorm1d(5))
    m[0].bias.requires_grad_(False)
    sizes = module_bytes(m)
    assert sizes["params"] == 4 * (50 + 5 + 5 + 5)
    assert sizes["grads"] == 4 * (50 + 5 + 5)
    assert sizes["buffers"] == 4 * (5 + 5) + 8  # running mean/var + num_batches_tracked int64


def test_segdataparallel_scatter_and_gather_on_cpu():
    from swinkit.rank.dp import CopyLog, SegDataParallel
    copies = CopyLog()
    dp = SegDataParallel(torch.nn.Linear(2, 2), copies=copies)
    copies.begin()
    args, kwargs = dp.scatter((), _batch(4), ["cpu", "meta"])
    assert args == ((), ()) and [k["inputs"].shape[0] for k in kwargs] == [2, 2]
    assert copies.current["scatter"] == 2 * 3 * 8 * 8 * 4 + 2 * 8 * 8 * 8
    out = dp.gather([{"loss": torch.tensor(1.0)}, {"loss": torch.tensor(3.0)}], torch.device("cpu"))
    assert float(out["loss"]) == 2.0
    with pytest.raises(ValueError, match="keywords"):
        dp.scatter((torch.zeros(1),), {}, ["cpu"])


# ----------------------------------------------------------------- the engine switch

def _run_spec(world_size=1, **kw):
    from swinkit.runs.ddp_run import DDPRunSpec
    return DDPRunSpec(preset="test", nproc_per_node=world_size, **kw)


@pytest.mark.parametrize("kw, message", [
    (dict(engine="foo"), "engine must be one of"),
    (dict(engine="deepspeed", zero=3), "zero must be 0, 1 or 2"),
    (dict(engine="ddp", zero=1), "zero applies to engine deepspeed only"),
    (dict(engine="deepspeed", grad_accum=0), "grad_accum must be an integer >= 1"),
])
def test_bad_engine_specs_name_the_field(kw, message):
    with pytest.raises(ValueError, match=message):
        EngineSpec(run=_run_spec(), **kw).validate()


def test_injection_is_ddp_only():
    from swinkit.injection import Injection
    spec = EngineSpec(engine="deepspeed", run=_run_spec(injection=Injection(data_ms=5)))
    with pytest.raises(ValueError, match="inject supported with engine ddp only"):
        spec.validate()


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="this machine can run DataParallel")
@pytest.mark.parametrize("engine", ["dp", "dp-vanilla"])
def test_dataparallel_is_unavailable_without_gpus_with_the_reason(engine):
    with pytest.raises(EngineUnavailable, match="DataParallel needs CUDA GPUs"):
        EngineSpec(engine=engine, run=_run_spec(2)).validate()


def test_dataparallel_device_check():
    with pytest.raises(EngineUnavailable, match="world size 4 needs 4 GPUs; this machine has 2"):
        check_dp_devices(4, gpus=2)
    check_dp_devices(2, gpus=2)


def test_engine_keys():
    assert spec_for_key("zero2", _run_spec()).zero_stage == 2
    assert spec_for_key("dp_vanilla", _run_spec()).engine == "dp-vanilla"
    assert EngineSpec(engine="deepspeed", run=_run_spec()).key == "zero1"  # ZeRO-1 by default
    with pytest.raises(ValueError, match="engine key must be one of"):
        spec_for_key("zero3", _run_spec())


@pytest.mark.parametrize("argv, message", [
    (["--engine", "foo"], "engine must be one of"),
    (["--engine", "deepspeed", "--zero", "3"], "zero must be 0, 1 or 2"),
    (["--engine", "ddp", "--zero", "2"], "zero applies to engine deepspeed only"),
    (["--engine", "dp", "--figure", "x.png"], "--figure needs --engine all"),
    # tools/attribute.py's spelling is taken: past the engine check, to the figure's
    (["--engine", "dp_vanilla", "--figure", "x.png"], "--figure needs --engine all"),
])
def test_cli_bad_engine_input_exits_2_before_anything_starts(argv, message, capsys, data_root,
                                                              no_orphans):
    from swinkit.cli import main
    assert main(["ddp", "--preset", "test", "--world-size", "1", "--data-root", str(data_root),
                 *argv]) == 2
    assert message in capsys.readouterr().err


# ----------------------------------------------------------------- recording collectives

class _FakeBackend:
    def __init__(self):
        self.calls = []

    def all_reduce(self, tensor, op=None, group=None, async_op=False):
        self.calls.append(("all_reduce", tensor.numel()))

    def all_gather_into_tensor(self, output_tensor, input_tensor, group=None, async_op=False):
        self.calls.append(("all_gather_into_tensor", output_tensor.numel()))


def test_recorder_cuts_phases_and_records_bytes():
    backend = _FakeBackend()
    tl = Timeline(HostClock())
    rec = CollectiveRecorder(tl, backend)
    backend.all_reduce(torch.zeros(3))          # outside an iteration: passes, unrecorded
    tl.begin()
    tl.mark("data_wait")
    rec.phase = "backward"
    backend.all_reduce(torch.zeros(10))
    tl.mark("backward")
    rec.phase = "optimizer"
    backend.all_gather_into_tensor(torch.zeros(6, dtype=torch.float64), torch.zeros(3))
    tl.mark("optimizer")
    rec.phase = None
    tl.end()
    it = tl.resolve()[0]
    assert [c["name"] for c in it["collectives"]] == ["all_reduce@backward",
                                                      "all_gather_into_tensor@optimizer"]
    assert [c["bytes"] for c in it["collectives"]] == [40, 48]
    assert all(c["blocking"] for c in it["collectives"])
    names = [m[0] for m in it["marks"]]
    assert names == ["start", "data_wait", "backward", "exposed_comm", "backward", "optimizer",
                     "exposed_comm", "optimizer", "other"]
    assert sum(phase_durations(it).values()) == pytest.approx(it["marks"][-1][1] - it["marks"][0][1])
    assert backend.calls == [("all_reduce", 3), ("all_reduce", 10), ("all_gather_into_tensor", 6)]


def test_message_bytes_conventions():
    t = torch.zeros(5)
    assert message_bytes("all_reduce", (t,), {}) == 20
    assert message_bytes("reduce_scatter_tensor", (torch.zeros(2), torch.zeros(8)), {}) == 32
    assert message_bytes("all_gather", ([torch.zeros(2)] * 3, torch.zeros(2)), {}) == 24
    with pytest.raises(ValueError, match="op must be one of"):
        message_bytes("gossip", (t,), {})


def test_rounds_and_bytes_from_a_timeline():
    from swinkit.runs.engine_result import comm_rounds, gradient_collectives

    def it(marks, collectives):
        return {"marks": marks, "collectives": collectives}
    # two micro-steps; gradients reduced only in the second (ZeRO-1 / no_sync style)
    marks = [["start", 0], ["data_wait", 1], ["forward", 2], ["backward", 3], ["optimizer", 4],
             ["data_wait", 5], ["forward", 6], ["backward", 7], ["exposed_comm", 8],
             ["backward", 9], ["optimizer", 10], ["other", 11]]
    colls = [{"name": "all_reduce@backward", "arrive": 7, "done": 8, "bytes": 400},
             {"name": "all_reduce@optimizer", "arrive": 9.5, "done": 9.6, "bytes": 4},
             {"name": "all_gather_into_tensor@optimizer", "arrive": 9.7, "done": 9.8, "bytes": 400}]
    one = it(marks, colls)
    assert comm_rounds(one) == 1 and gradient_collectives(one) == 1
    both = it(marks, [dict(colls[0], arrive=2.5), *colls])
    assert comm_rounds(both) == 2
    rows = traffic.traffic_from_timeline([one], 2)["per_iteration"]
    assert rows[0]["message_bytes"] == 804
    assert rows[0]["wire_bytes_per_rank"] == pytest.approx(400 * 1.0 + 4 * 1.0 + 400 * 0.5)


# An iteration as the DeepSpeed loop marks it on GPU (seconds after resolving): its own marks
# at positions 1, 2, 5, 6; the recorder cut backward around a collective (3, 4).
DS_ITERATION = {"marks": [["start", 0.0], ["data_wait", 1.0], ["forward", 1.3],
                          ["backward", 1.5], ["exposed_comm", 1.6], ["backward", 1.8],
                          ["optimizer", 1.9], ["other", 2.0]], "collectives": []}


def test_engine_call_spans_skip_the_recorders_marks():
    from swinkit.runs.engine_result import engine_call_spans
    spans = engine_call_spans(DS_ITERATION, [[1, 2, 5, 6]])
    assert spans == pytest.approx({"forward": 0.3, "backward": 0.5, "step": 0.1})
    # two micro-steps of one optimizer step add up
    two = {"marks": [["start", 0.0], ["data_wait", 1.0], ["forward", 2.0], ["backward", 4.0],
                     ["optimizer", 4.5], ["data_wait", 5.0], ["forward", 6.0],
                     ["backward", 8.5], ["optimizer", 9.0]]}
    assert engine_call_spans(two, [[1, 2, 3, 4], [5, 6, 7, 8]]) == pytest.approx(
        {"forward": 2.0, "backward": 4.5, "step": 1.0})
    with pytest.raises(ValueError, match="call_marks entry must be 4 ascending positions"):
        engine_call_spans(DS_ITERATION, [[1, 2, 9, 10]])


def test_ds_cross_check_compares_deepspeeds_events_with_the_timeline_not_host_spans():
    """On GPU the engine calls return once their kernels are queued: host spans around them
    (10 ms here) are launch time, DeepSpeed's timers (CUDA events) device time. The check must
    set DeepSpeed's timers against the timeline's CUDA-event spans of the same calls."""
    from swinkit.runs.engine_result import ds_cross_check
    rank = {"rank": 0, "warmup": 1, "clock": {"kind": "cuda_events"},
            "timeline": [{"marks": [], "collectives": []}, DS_ITERATION],
            "ds_timers": [{"fwd": 0.30, "bwd": 0.50, "step": 0.10}],
            "engine_call_marks": [[[1, 2, 5, 6]]],
            # what a host clock around the calls read: not to be used
            "engine_calls": [{"forward": 0.01, "backward": 0.01, "step": 0.01}]}
    check = ds_cross_check([rank])
    for key, ours in (("forward", 0.3), ("backward", 0.5), ("step", 0.1)):
        assert check[key]["ours_s"] == pytest.approx(ours)
        assert check[key]["disagreement"] == pytest.approx(0.0, abs=1e-9)
        assert check[key]["clock"] == "cuda_events" and check[key]["n"] == 1


def test_dataparallel_loader_gets_the_workers_of_n_ranks():
    """DDP gives each of N ranks the preset's workers; DataParallel's one loader feeds the same
    N devices, so it gets N times as many."""
    from swinkit.rank.dp import loader_workers
    assert loader_workers(4, 4) == {"per_device": 4, "devices": 4, "total": 16}
    assert loader_workers(0, 8)["total"] == 0
    with pytest.raises(ValueError, match="workers must be an integer >= 0"):
        loader_workers(-1, 2)
    with pytest.raises(ValueError, match="n_devices must be an integer >= 1"):
        loader_workers(4, 0)


def test_engine_block_states_the_worker_budget_of_one_step():
    from swinkit.runs.engine_result import engine_block
    it = {"marks": [["start", 0.0], ["data_wait", 0.1], ["forward", 0.4], ["backward", 0.9],
                    ["optimizer", 1.0]], "collectives": []}
    dp = {"world_size": 4, "images_per_rank": 2, "warmup": 0,
          "ranks": [{"rank": 0, "timeline": [it], "loader_workers": 16, "copies_bytes": []}]}
    ddp = {"world_size": 4, "images_per_rank": 2, "warmup": 0,
           "ranks": [{"rank": r, "timeline": [it], "loader_workers": 4} for r in range(4)]}
    spec = EngineSpec(engine="dp", run=_run_spec(4))
    assert engine_block(spec, dp)["loader_workers_total"] == 16
    ddp_block = engine_block(EngineSpec(engine="ddp", run=_run_spec(4)), ddp)
    assert ddp_block["loader_workers_total"] == 16


def test_dataparallel_peak_memory_of_every_device():
    """Device 0 holds the gathered outputs and the optimizer, but a replica's device can peak
    higher; every device is reported and the largest is the engine's peak."""
    from swinkit.rank.dp import device_peaks
    allocated, reserved = {0: 5 * 2**30, 1: 7 * 2**30}, {0: 6 * 2**30, 1: 8 * 2**30}
    peaks = device_peaks([0, 1], allocated.__getitem__, reserved.__getitem__)
    assert peaks["peak_bytes"] == 7 * 2**30 and peaks["peak_reserved_bytes"] == 8 * 2**30
    assert peaks["peak_device"] == 1
    assert peaks["per_device"] == {"0": {"peak_bytes": 5 * 2**30, "peak_reserved_bytes": 6 * 2**30},
                                   "1": {"peak_bytes": 7 * 2**30, "peak_reserved_bytes": 8 * 2**30}}
    with pytest.raises(ValueError, match="indices is empty"):
        device_peaks([], allocated.__getitem__, reserved.__getitem__)


def test_compare_table_lists_rows_and_skips():
    from swinkit.report.engine_compare import compare_figure, compare_table
    row = {"engine": "zero1", "world_size": 2, "grad_accum": 1, "iter_s": 0.2, "efficiency": 0.8,
           "blame_s": {"forward": 0.1, "exposed_comm": 0.05}, "message_bytes": 2**21,
           "wire_bytes_per_rank": 2**20, "comm_rounds_per_step": 1, "comm_per_image_s": 0.01,
           "peak_memory_bytes": 2**30, "optimizer_state_bytes": 2**20}
    text = compare_table([row], {("dp", 2): "DataParallel needs CUDA GPUs"})
    assert "zero1" in text and "2.00" in text and "1024" in text
    assert "skipped: dp at world size 2: DataParallel needs CUDA GPUs" in text
    assert compare_figure([row]).startswith(b"\x89PNG")


# ----------------------------------------------------------------- asv classes

def test_bench_engines_shape_and_skips():
    from benchmarks import bench_engines
    from swinkit.runs.sweep import Sweep
    for cls in (bench_engines.Engine, bench_engines.GradAccum):
        assert len(cls.params) == len(cls.param_names)
        assert cls.params[0] == [1, 2, 4, 8]
        metrics = [m for m in dir(cls) if m.startswith("track_")]
        assert metrics
        for m in metrics:
            func = getattr(cls, m)
            assert list(inspect.signature(func).parameters)[2:] == cls.param_names
            assert getattr(func, "unit", None)
    assert bench_engines.Engine.params[1] == ["ddp", "zero1", "zero2", "dp", "dp_vanilla"]
    assert bench_engines.GradAccum.params[1] == [1, 2, 4]
    sweep = Sweep(skipped={("dp", 2): "DataParallel needs CUDA GPUs (...)"})
    cache = {"engines": sweep, "accumulation": {2: Sweep(), 4: Sweep()}}
    with pytest.raises(NotImplementedError, match="DataParallel needs CUDA GPUs"):
        bench_engines.Engine().setup(cache, 2, "dp")
    # both classes share one setup_cache (asv keys it by source location: one run, not two)
    assert bench_engines.Engine.setup_cache is bench_engines.GradAccum.setup_cache
    with pytest.raises(NotImplementedError, match="world size 1 communicates nothing"):
        bench_engines.GradAccum().setup(cache, 1, 2)
    # K = 1 reads the engines' own DDP run
    sweep.results[("ddp", 2)] = {"engine": {"step_s": 0.5}}
    assert bench_engines.GradAccum().track_step(cache, 2, 1) == 0.5


# ----------------------------------------------------------------- real runs (gloo, CPU)

ITERS, WARMUP = 4, 1
# Same seed, same shards, same initial weights and AdamW: the engines differ only in the order
# of floating-point additions in the gradient reduction. Measured on CPU: the first step's loss
# is identical, later ones agree to ~1e-6 relative.
LOSS_RTOL = 1e-4
# One loader worker: MMSeg's random crop and flip draw from numpy's global RNG, which torch
# seeds in loader workers from the loader's seeded generator (DDP's loop leaves the main
# process's unseeded, so with 0 workers two DDP runs of one seed see different crops).
WORKERS = 1


def _engine(data_root, engine, world_size, zero=None, grad_accum=1, iters=ITERS, warmup=WARMUP,
            workers=WORKERS, overrides=None):
    from swinkit.runs.engine_run import run_engine
    run = _run_spec(world_size, iters=iters, warmup=warmup, workers=workers,
                    data_root=str(data_root), overrides=dict(overrides or {}))
    spec = EngineSpec(engine=engine, zero=zero, grad_accum=grad_accum, run=run)
    return run_engine(spec, progress=lambda s: None)


@pytest.fixture(scope="module")
def ddp_runs(data_root):
    return {ws: _engine(data_root, "ddp", ws) for ws in (1, 2)}


@pytest.fixture(scope="module")
def zero_runs(data_root):
    if not HAS_DEEPSPEED:
        pytest.skip("DeepSpeed is not installed")
    # world size 2 only: at one rank ZeRO partitions nothing (its loss there is DDP's by the
    # same check at 2, and the state it would hold is written out below)
    return {(z, 2): _engine(data_root, "deepspeed", 2, zero=z) for z in (1, 2)}


@pytest.mark.slow
def test_ddp_bytes_per_iteration_are_the_models_gradient_bytes(ddp_runs, test_cfg):
    """At N=2 a ring all-reduce sends 2(N-1)/N = 1 x the buckets: the model's trainable
    parameters x 4 bytes, counted here from the parameter list."""
    from swinkit.model.segmentor import build_segmentor
    model = build_segmentor(test_cfg)
    grad_bytes = sum(p.numel() * 4 for p in model.parameters() if p.requires_grad)
    eng = ddp_runs[2]["engine"]
    by_op = eng["traffic"]["by_op"]
    assert by_op["all_reduce"]["bytes"] == grad_bytes
    # and DDP's buffer broadcast (BN statistics), by the module's buffers: a broadcast's ring
    # passes the message once along the chain, so each rank sends at most its size
    buffer_bytes = sum(b.numel() * b.element_size() for b in model.buffers())
    assert by_op["broadcast"]["bytes"] == buffer_bytes > 0
    assert eng["traffic"]["wire_bytes_per_rank"] == pytest.approx(grad_bytes + buffer_bytes)
    assert sum(ddp_runs[2]["bucket_sizes_bytes"]) == grad_bytes
    assert ddp_runs[1]["engine"]["traffic"]["wire_bytes_per_rank"] == 0
    assert eng["traffic"]["comm_rounds_per_step"] == 1


def _timed_like_ddp_with_its_losses(r, ddp_run):
    """An engine's run against DDP's of the same model, data and seed: every rank's timeline
    iteration agrees with its own loop clock, the work phases were timed, and each rank's
    losses are DDP's."""
    for rank in r["ranks"]:
        assert len(rank["iteration"]) == ITERS
        for timeline_s, loop_s in zip(rank["iteration"], rank["loop_iteration"]):
            assert timeline_s == pytest.approx(loop_s, abs=0.003, rel=0.02)
    assert all(r["phases_s"][p] > 0 for p in ("data_wait", "forward", "backward", "optimizer"))
    ours = [rk["loss"] for rk in sorted(r["ranks"], key=lambda x: x["rank"])]
    theirs = [rk["loss"] for rk in sorted(ddp_run["ranks"], key=lambda x: x["rank"])]
    for mine, ddp in zip(ours, theirs):
        assert mine == pytest.approx(ddp, rel=LOSS_RTOL)


@pytest.mark.slow
@needs_deepspeed
@pytest.mark.parametrize("zero", [1, 2])
def test_zero_runs_the_preset_and_matches_ddp_loss(zero_runs, ddp_runs, zero):
    world_size = 2
    r = zero_runs[(zero, world_size)]
    assert r["world_size"] == world_size and r["backend"] == "gloo"
    assert r["engine"]["key"] == f"zero{zero}"
    _timed_like_ddp_with_its_losses(r, ddp_runs[world_size])
    # DeepSpeed's own instruments are there and say which they are
    assert r["engine"]["comms_logger"]["ops"]
    assert r["ds_cross_check"]["forward"]["n"] == world_size * ITERS
    assert r["engine"]["peak_memory_bytes"] > 0


@pytest.mark.slow
@needs_deepspeed
def test_zero_shards_optimizer_states_and_counts_its_collectives(zero_runs, test_cfg):
    from swinkit.model.segmentor import build_segmentor
    model = build_segmentor(test_cfg)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    for zero in (1, 2):
        two = zero_runs[(zero, 2)]["engine"]["model_state"]["0"]["optimizer_states"]
        # Adam's two fp32 moments per parameter, half of them on each of 2 ranks (ZeRO pads
        # its partitions: within 1 %)
        assert two == pytest.approx(2 * 4 * n_params / 2, rel=0.01)
        eng = zero_runs[(zero, 2)]["engine"]
        ops = eng["traffic"]["by_op"]
        # the gradients are reduced (DeepSpeed all-reduces the bucket) and the updated
        # partitions all-gathered: at least the model's gradient bytes each
        assert ops["all_reduce"]["bytes"] >= 4 * n_params
        assert ops["all_gather_into_tensor"]["bytes"] >= 4 * n_params
        # its comms logger, in its own pass, saw the same collectives and bytes per step
        logged = eng["comms_logger"]["ops"]
        assert logged["all_gather_into_tensor"]["bytes_per_step"] == ops["all_gather_into_tensor"]["bytes"]
        assert logged["all_reduce"]["bytes_per_step"] == ops["all_reduce"]["bytes"]


@pytest.fixture(scope="module")
def fsdp_run(data_root):
    """FSDP2 at world size 2 (where it shards), one launch read by every FSDP2 test."""
    return _engine(data_root, "fsdp2", 2)


@pytest.mark.slow
def test_fsdp2_runs_the_preset_and_matches_ddp_loss(fsdp_run, ddp_runs):
    """The same model, data and seed as DDP's loop: the same losses (FSDP2 averages the
    reduce-scattered gradients as DDP averages the all-reduced ones), its phases timed and
    adding up to the loop's own iteration clock."""
    r, world_size = fsdp_run, 2
    assert r["engine"]["key"] == "fsdp2" and r["backend"] == "gloo"
    _timed_like_ddp_with_its_losses(r, ddp_runs[world_size])
    assert r["engine"]["peak_memory_bytes"] > 0


@pytest.mark.slow
def test_fsdp2_shards_the_model_state_and_moves_what_its_model_says(fsdp_run, test_cfg):
    """Each of 2 ranks holds half the parameters and of Adam's two fp32 moments per parameter;
    per optimizer step the gradients are reduce-scattered once (the model's gradient bytes,
    padded to a multiple of the world size) and the parameters all-gathered in forward and
    backward, within the analytic model's 2 x parameter bytes (the root unit's stay gathered
    between them)."""
    from swinkit.model.segmentor import build_segmentor
    model = build_segmentor(test_cfg)
    param_bytes = sum(p.numel() * 4 for p in model.parameters())
    two = [fsdp_run["engine"]["model_state"][r] for r in ("0", "1")]
    assert sum(s["params"] for s in two) == pytest.approx(param_bytes, rel=0.01)
    for state in two:
        assert state["params"] == pytest.approx(param_bytes / 2, rel=0.02)
        # two moments of its half (and a step counter per parameter tensor)
        assert state["optimizer_states"] == pytest.approx(param_bytes, rel=0.02)
    eng = fsdp_run["engine"]
    ops = eng["traffic"]["by_op"]
    reduced = sum(v["bytes"] for op, v in ops.items() if op.startswith("reduce_scatter"))
    gathered = sum(v["bytes"] for op, v in ops.items() if op.startswith("all_gather"))
    assert reduced == pytest.approx(param_bytes, rel=0.01)
    assert param_bytes < gathered <= 2 * param_bytes * 1.01
    assert eng["traffic"]["comm_rounds_per_step"] == 1
    assert eng["traffic"]["expected"]["message_bytes"] == 3 * param_bytes
    assert eng["fsdp_units"][-1] == "(root)"


@pytest.mark.slow
@needs_deepspeed
def test_zero_records_syncbn_collectives_like_ddp(data_root):
    """With SyncBN in the heads (its CPU stand-in, which synchronises over gloo), every
    DeepSpeed rank records each SyncBN's forward gather and backward reduce in every measured
    iteration, as DDP's loop does; the comms-logger pass after them adds none."""
    r = _engine(data_root, "deepspeed", 2, zero=1, iters=2, warmup=1,
                overrides={"cpu_sync_bn": True})
    for rank in r["ranks"]:
        modules = rank["sync_bn_modules"]
        assert modules > 0
        for it in rank["timeline"]:
            names = [c["name"] for c in it["collectives"] if c["blocking"]]
            assert len([n for n in names if n.endswith(".fwd")]) == modules
            assert len([n for n in names if n.endswith(".bwd")]) == modules
    assert r["ds_cross_check"]["forward"]["clock"] == "perf_counter"


@pytest.mark.gpu
def test_dataparallel_reports_every_device_and_its_worker_budget(data_root):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    n = torch.cuda.device_count()
    r = _engine(data_root, "dp", n, iters=2, warmup=1)
    rank = r["ranks"][0]
    assert rank["worker_budget"] == {"per_device": WORKERS, "devices": n, "total": WORKERS * n}
    assert rank["loader_workers"] == WORKERS * n == r["engine"]["loader_workers_total"]
    assert set(rank["gpu"]["devices"]) == set(rank["memory"]["per_device"]) == {
        str(i) for i in range(n)}
    for i in range(n):
        assert rank["gpu"]["devices"][str(i)]["nvml_device"]["lookup"] == "uuid"
        assert rank["memory"]["per_device"][str(i)]["peak_bytes"] > 0


@pytest.mark.slow
@needs_deepspeed
@pytest.mark.parametrize("zero, rounds", [(0, 1), (1, 1), (2, 4)])
def test_grad_accum_communicates_once_per_optimizer_step(data_root, zero_runs, zero, rounds):
    """ZeRO-0/1 reduce gradients at the accumulation boundary only: one round per optimizer
    step at K = 4, the same collectives as K = 1, so bytes per image fall as 1/K. ZeRO-2
    keeps only its gradient partition and must reduce at every micro-step (K rounds). K = 4
    tells each law from its neighbours (a constant 2 rounds, a halving) where K = 2 could not;
    the K = 1 runs of ZeRO-1 and -2 at world size 2 are the fixture's (bytes and rounds per
    step do not depend on the number of steps)."""
    k = 4
    base = (zero_runs[(zero, 2)] if zero else
            _engine(data_root, "deepspeed", 2, zero=0, iters=2, warmup=1))["engine"]
    eng = _engine(data_root, "deepspeed", 2, zero=zero, grad_accum=k, iters=2,
                  warmup=1)["engine"]
    assert base["traffic"]["comm_rounds_per_step"] == 1
    assert eng["traffic"]["comm_rounds_per_step"] == rounds
    if rounds == 1:
        assert eng["traffic"]["gradient_collectives_per_step"] == \
            base["traffic"]["gradient_collectives_per_step"] == 1
        assert eng["traffic"]["by_op"]["all_reduce"]["count"] == \
            base["traffic"]["by_op"]["all_reduce"]["count"]
        assert eng["wire_bytes_per_image"] == pytest.approx(base["wire_bytes_per_image"] / k)
    assert eng["images_per_step"] == 2 * 2 * k


@pytest.mark.slow
def test_ddp_grad_accum_one_allreduce_round_per_step(data_root, ddp_runs):
    """K = 4 against the fixture's K = 1 run at world size 2 (see the ZeRO test for why 4)."""
    base = ddp_runs[2]["engine"]
    eng = _engine(data_root, "ddp", 2, grad_accum=4, iters=2, warmup=1)["engine"]
    assert eng["traffic"]["comm_rounds_per_step"] == 1
    assert eng["traffic"]["gradient_collectives_per_step"] == \
        base["traffic"]["gradient_collectives_per_step"]
    # gradients: the same all-reduce bytes per optimizer step, so per image they fall as
    # 1/k; DDP's buffer broadcast runs once per step too: only in a forward that follows
    # a gradient-synchronising one (a no_sync forward clears DDP's flag; counted inside
    # DDP: one _broadcast_coalesced per step, in its first micro-batch)
    by_op, before = eng["traffic"]["by_op"], base["traffic"]["by_op"]
    assert by_op["all_reduce"]["bytes"] == before["all_reduce"]["bytes"]
    assert by_op["broadcast"]["bytes"] == before["broadcast"]["bytes"]


@pytest.mark.slow
@needs_deepspeed
def test_cli_deepspeed_prints_the_table_and_writes_json(data_root, tmp_path, capsys, no_orphans):
    from swinkit.cli import main
    out = tmp_path / "zero2.json"
    assert main(["ddp", "--preset", "test", "--world-size", "2", "--engine", "deepspeed",
                 "--zero", "2", "--iters", "2", "--warmup", "1", "--workers", "0",
                 "--data-root", str(data_root), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "zero2 iteration" in text and "exposed_comm" in text and "comms logger" in text
    result = json.loads(out.read_text())
    assert result["engine"]["key"] == "zero2" and result["engine"]["zero"] == 2
    assert result["engine"]["traffic"]["expected"]["formula"].startswith("ZeRO-0")
    assert set(result["engine"]["instrumentation"]) == {"phases", "collectives", "engine_timers",
                                                        "comms_log"}


def test_vanilla_forward_spans_and_bytes_with_cpu_stand_ins(monkeypatch):
    """The vanilla loop's real code with CPU stand-ins for the CUDA-only primitives (replicate
    broadcasts and parallel_apply threads need GPUs): each copy is a blocking record on the
    timeline with its bytes, marked exposed_comm; the replicas' forward is forward."""
    from swinkit.rank import dp_vanilla
    from swinkit.rank.dp import CopyLog

    class Seg(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))
            self.register_buffer("b", torch.zeros(2))

        def forward(self, inputs, data_samples, mode):
            return {"loss": (inputs.mean(dim=(0, 2, 3)) * self.w).sum()}

    monkeypatch.setattr(dp_vanilla, "replicate", lambda m, devs, detach=False: [m for _ in devs])
    monkeypatch.setattr(dp_vanilla, "parallel_apply",
                        lambda mods, ins, kws, devs: [m(**kw) for m, kw in zip(mods, kws)])
    tl = Timeline(HostClock())
    copies = CopyLog()
    tl.begin()
    copies.begin()
    data = _batch(4)
    data.pop("mode")
    tl.mark("data_wait")
    out = dp_vanilla.vanilla_forward(Seg(), data, [torch.device("cpu")] * 2, tl, copies)
    tl.mark("backward")
    tl.end()
    it = tl.resolve()[0]
    assert [c["name"] for c in it["collectives"]] == ["scatter", "replicate", "gather"]
    assert it["collectives"][1]["bytes"] == (3 * 4 + 2 * 4) * 1   # params + buffers, 1 replica
    assert all(c["blocking"] for c in it["collectives"])
    names = [m[0] for m in it["marks"]]
    assert names[:9] == ["start", "data_wait", "forward", "exposed_comm", "forward",
                         "exposed_comm", "forward", "forward", "exposed_comm"]
    # images 0..3 are constant planes of their index: mean over both halves = 1.5 per channel
    assert float(out["loss"]) == pytest.approx(3 * 1.5)
    assert copies.current == {"scatter": 0, "replicate": 20, "gather": 0, "grad_reduce": 12}


_TRACK_PROCESS = """
import json, sys
from asv_runner.run import _run
_run((sys.argv[1], sys.argv[2], "{}", "None", sys.argv[3]))
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in
                        ("torch", "mmseg", "mmcv", "mmengine", "cv2", "deepspeed"))))
"""


def test_an_engine_track_process_imports_no_torch(tmp_path):
    """asv runs each track in a process of its own that unpickles the setup_cache's result: it
    must read plain data, never import torch, MMSeg or DeepSpeed."""
    import pickle
    import subprocess
    import sys
    from pathlib import Path

    from swinkit.runs.sweep import Sweep
    pytest.importorskip("asv_runner")
    # the shape of bench_engines' shared setup_cache: plain dicts of Sweeps
    cache = {"engines": Sweep(results={("ddp", 1): {"engine": {"step_s": 0.25}}}),
             "accumulation": {2: Sweep(), 4: Sweep()}}
    (tmp_path / "cache.pickle").write_bytes(pickle.dumps(cache))
    result = tmp_path / "result.json"
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, "-c", _TRACK_PROCESS, str(root / "benchmarks"),
                          "bench_engines.Engine.track_iteration-0", str(result)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(result.read_text()) == 0.25
    assert json.loads(run.stdout.strip().splitlines()[-1]) == []


def test_deepspeed_builds_no_shm_op_on_start():
    """DeepSpeed's communication backend JIT-compiles a C++ op on CPU when it starts (minutes,
    and a build killed midway leaves a lock that the next start waits on forever). The patch
    must reach the module that calls the builder: DeepSpeed's own ``deepspeed.comm.torch``,
    not the torch package that ``import deepspeed.comm.torch as m`` would bind."""
    pytest.importorskip("deepspeed")
    import importlib

    from swinkit.rank.deepspeed import _skip_shm_op
    ds_torch = importlib.import_module("deepspeed.comm.torch")
    original = ds_torch.build_shm_op
    try:
        _skip_shm_op()
        assert ds_torch.build_shm_op is not original  # checked first: the original compiles
        assert ds_torch.build_shm_op() is None
        assert not hasattr(importlib.import_module("torch"), "build_shm_op")
    finally:
        ds_torch.build_shm_op = original
