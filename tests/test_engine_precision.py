"""The engines beside DDP in a training precision, each applied the DDP loop's way: autocast
around forward and loss (a backbone linear computes in bf16), fp32 weights, and fp32 gradients
into every reduction. DeepSpeed and FSDP2 run in this process at world size 1 (the test preset,
2 steps); DataParallel, CUDA-only, through its CPU seam (the modules its step runs); the
records' refusals and the CLI's --precision for the engines and the attribution. A real
two-rank FSDP2 run in bf16 holds its reduce-scatters to fp32 gradient bytes (slow); the CUDA
branches are in tests/test_gpu.py."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import threading

import pytest
import torch
from torch import nn

from rank_stand_ins import OneRank, switches_as_they_were  # noqa: F401 (autouse)
from swinkit.cli import main
from swinkit.model import precision as mp

HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None






def _watching_a_backbone_linear(build, seen: dict):
    """``build_segmentor`` that also records the dtype a backbone attention projection (an
    nn.Linear) outputs in each forward, and keeps the model."""
    def built(cfg):
        model = build(cfg)
        linear = next(m for name, m in model.backbone.named_modules()
                      if isinstance(m, nn.Linear) and name.endswith("attn.proj"))
        linear.register_forward_hook(lambda m, i, out: seen["forward"].append(out.dtype))
        seen["model"] = model
        return model
    return built


def _tensor_dtypes(args, kwargs) -> list:
    values = list(args) + list(kwargs.values())
    flat = [t for v in values for t in (v if isinstance(v, (list, tuple)) else [v])]
    return [t.dtype for t in flat if isinstance(t, torch.Tensor)]


def _rank_kwargs(data_root, precision, device):
    return dict(preset="test", iters=2, warmup=0, workers=0, data_root=str(data_root),
                overrides={"precision": precision}, device=device)


def deepspeed_seen(data_root, monkeypatch, zero: int, precision: str, device: str = "cpu"):
    """DeepSpeed's rank run in this process (a world of one already initialised): what a
    backbone linear output in forward, the dtypes of every tensor DeepSpeed's comm backend
    reduced, the model; and the rank's result."""
    from deepspeed.utils import groups

    from swinkit.rank import deepspeed as rank_ds
    from swinkit.rank.engine_collectives import OPS
    monkeypatch.setenv("DS_ACCELERATOR", device)
    monkeypatch.setenv("LOCAL_RANK", "0")   # DeepSpeed asks its launcher's variable
    for cached in ("_WORLD_GROUP", "_DATA_PARALLEL_GROUP", "_ZERO_PARAM_INTRA_PARALLEL_GROUP"):
        monkeypatch.setattr(groups, cached, None)   # a group of an earlier test's world
    seen = {"forward": [], "reduced": []}
    monkeypatch.setattr(rank_ds, "build_segmentor",
                        _watching_a_backbone_linear(rank_ds.build_segmentor, seen))
    recorder = rank_ds.CollectiveRecorder

    def watching(timeline, backend, *args, **kwargs):  # under the rank's own recorder
        for op in OPS:
            original = getattr(backend, op, None)
            if original is not None and "reduce" in op:
                def call(*a, _original=original, **kw):
                    seen["reduced"] += _tensor_dtypes(a, kw)
                    return _original(*a, **kw)
                monkeypatch.setattr(backend, op, call)
        return recorder(timeline, backend, *args, **kwargs)
    monkeypatch.setattr(rank_ds, "CollectiveRecorder", watching)
    result = rank_ds.deepspeed_rank(OneRank(), **_rank_kwargs(data_root, precision, device),
                                    zero=zero, ds_timers=False, comm_pass_iters=0)
    return seen, result


@pytest.mark.skipif(not HAS_DEEPSPEED, reason="DeepSpeed is not installed")
@pytest.mark.parametrize("zero, precision, forward_dtype", [
    (2, "bf16", torch.bfloat16), (1, "bf16", torch.bfloat16), (2, "fp32", torch.float32)])
def test_deepspeed_autocasts_forward_and_reduces_fp32(data_root, one_rank_group, monkeypatch,
                                                      zero, precision, forward_dtype):
    """ZeRO's rank in bf16: the backbone's linears compute in bf16 (fails if autocast is not
    entered); every tensor DeepSpeed's comm backend reduces is fp32 (fails under DeepSpeed's
    bf16 or torch_autocast configs, which reduce in bf16); the weights stay fp32; the result
    names the precision. (An autocast entered around engine() passes on CPU: DeepSpeed's
    forward switches off only CUDA's; tests/test_gpu.py runs this on CUDA.)"""
    seen, r = deepspeed_seen(data_root, monkeypatch, zero, precision)
    assert seen["forward"] and set(seen["forward"]) == {forward_dtype}
    assert seen["reduced"] and set(seen["reduced"]) == {torch.float32}
    assert {p.dtype for p in seen["model"].parameters()} == {torch.float32}
    assert r["precision"]["precision"] == precision and r["ds_config"]["bf16"] == {"enabled": False}
    assert all(v == v for v in r["loss"])


def fsdp2_seen(data_root, monkeypatch, precision: str, device: str = "cpu"):
    """FSDP2's rank run in this process (a world of one already initialised): what a backbone
    linear output in forward, the dtypes of the gradients the optimizer stepped with, the
    model; and the rank's result."""
    from swinkit.rank import fsdp2 as rank_fsdp
    seen = {"forward": [], "grads": set()}
    monkeypatch.setattr(rank_fsdp, "build_segmentor",
                        _watching_a_backbone_linear(rank_fsdp.build_segmentor, seen))
    build_optimizer = rank_fsdp.build_optimizer

    def watched_optimizer(cfg, model):
        wrapper, schedulers = build_optimizer(cfg, model)
        inner = wrapper.optimizer
        step = inner.step

        def stepping(*args, **kwargs):
            seen["grads"] |= {p.grad.dtype for g in inner.param_groups for p in g["params"]
                              if p.grad is not None}
            return step(*args, **kwargs)
        inner.step = stepping
        return wrapper, schedulers
    monkeypatch.setattr(rank_fsdp, "build_optimizer", watched_optimizer)
    return seen, rank_fsdp.fsdp2_rank(OneRank(), **_rank_kwargs(data_root, precision, device))


@pytest.mark.parametrize("precision, forward_dtype", [("bf16", torch.bfloat16),
                                                      ("fp32", torch.float32)])
def test_fsdp2_autocasts_forward_and_keeps_fp32_gradients(data_root, one_rank_group, monkeypatch,
                                                          precision, forward_dtype):
    """FSDP2's rank in bf16: the backbone's linears compute in bf16 (fails if autocast is not
    entered); the sharded parameters and the gradients the optimizer steps with are fp32; the
    result names it. At world size 1 FSDP2 gathers and reduces nothing, so a
    MixedPrecisionPolicy (bf16 gathers and reductions, gradients cast back to fp32) would pass
    here: the slow two-rank test holds its collectives' bytes to fp32."""
    seen, r = fsdp2_seen(data_root, monkeypatch, precision)
    assert seen["forward"] and set(seen["forward"]) == {forward_dtype}
    assert seen["grads"] == {torch.float32}
    assert {p.dtype for p in seen["model"].parameters()} == {torch.float32}
    assert r["precision"]["precision"] == precision
    assert r["precision"]["autocast"] == ("bfloat16" if precision == "bf16" else None)


def _output_dtype_in_a_thread(module, x) -> torch.dtype:
    """The dtype ``module`` outputs when called in a thread of its own (as DataParallel's
    parallel_apply runs each replica), with no autocast entered by the caller."""
    out = {}
    worker = threading.Thread(target=lambda: out.update(dtype=module(x).dtype))
    worker.start()
    worker.join()
    return out["dtype"]


def test_dataparallel_step_runs_modules_that_enter_the_precision_in_their_thread():
    """The modules dp_rank's step runs (dp_modules): DataParallel over a module whose forward
    enters the precision's autocast itself, so each replica's thread computes in bf16. Fails
    if the wrap is missing (a replica's thread would compute in fp32, or on CUDA in autocast's
    default fp16). On CPU DataParallel has no devices and calls its module directly."""
    from swinkit.rank.dp import SegDataParallel, dp_modules
    amp = mp.training_precision("bf16", torch.device("cpu"), bf16_native=True)
    linear, x = nn.Linear(4, 4), torch.randn(2, 4)
    module, wrapped = dp_modules(linear, amp)
    assert isinstance(wrapped, SegDataParallel) and wrapped.module is module
    assert wrapped(x).dtype == torch.bfloat16
    assert _output_dtype_in_a_thread(module, x) == torch.bfloat16   # what dp-vanilla replicates
    assert _output_dtype_in_a_thread(linear, x) == torch.float32    # unwrapped: no autocast
    assert {p.dtype for p in module.parameters()} == {torch.float32}
    fp32 = mp.training_precision("fp32", torch.device("cpu"))
    assert dp_modules(linear, fp32)[1](x).dtype == torch.float32


# ----------------------------------------------------------------- refused before launch

def _run(**kw):
    from swinkit.runs.ddp_run import DDPRunSpec
    return DDPRunSpec(preset="test", nproc_per_node=1, **kw)


@pytest.mark.parametrize("engine, applied", [
    ("deepspeed", ("fp32", "tf32", "bf16")), ("fsdp2", ("fp32", "tf32", "bf16")),
    ("dp", ("fp32", "tf32", "bf16", "fp16")), ("dp-vanilla", ("fp32", "tf32", "bf16", "fp16"))])
def test_each_engine_takes_what_it_applies_and_refuses_fp16_naming_both(engine, applied):
    """Checked on the spec (the record), before the device: fp16 under DeepSpeed or FSDP2 is
    refused naming the engine and the precision, from the spec's field or the preset knob."""
    from swinkit.runs.engine_records import record
    from swinkit.runs.engine_spec import EngineSpec, EngineUnavailable
    assert record(engine).precisions == applied
    for precision in applied:
        try:
            EngineSpec(engine=engine, run=_run(precision=precision)).validate()
        except EngineUnavailable:
            pass   # DataParallel without GPUs: the precision was taken first
    if "fp16" not in applied:
        for run in (_run(precision="fp16"), _run(overrides={"precision": "fp16"})):
            with pytest.raises(ValueError, match=f"precision 'fp16': engine '{engine}' runs "
                                                 "fp32, tf32, bf16 only"):
                EngineSpec(engine=engine, run=run).validate()


def test_fully_shard_refuses_a_channels_last_convolution_weight(one_rank_group):
    """The premise of refusing ``channels_last_heads`` under FSDP2, in torch itself: a 3x3
    convolution's weight in channels_last is not contiguous, and fully_shard will not shard
    it (if a torch lifts that, this fails and the refusal below can go)."""
    from swinkit.rank.devices import find_fully_shard
    conv = torch.nn.Conv2d(4, 4, 3).to(memory_format=torch.channels_last)
    assert not conv.weight.is_contiguous()
    with pytest.raises(NotImplementedError, match="non-contiguous"):
        find_fully_shard()(conv)


def test_channels_last_heads_is_refused_for_fsdp2_alone_before_launch(monkeypatch):
    """Named with the engine before any rank starts; the other engines take the knob, and a
    comparison runs them and skips FSDP2 with the reason (the runs faked here)."""
    from swinkit.runs import engine_run
    from swinkit.runs.engine_spec import EngineSpec, EngineUnavailable
    knob = {"channels_last_heads": True}
    with pytest.raises(EngineUnavailable, match="channels_last_heads: engine 'fsdp2' cannot run "
                                                "with it .*contiguous"):
        EngineSpec(engine="fsdp2", run=_run(overrides=knob)).validate()
    EngineSpec(engine="fsdp2", run=_run(overrides={"channels_last_heads": False})).validate()
    EngineSpec(engine="ddp", run=_run(overrides=knob)).validate()
    ran = []
    monkeypatch.setattr(engine_run, "run_engine",
                        lambda spec, **kw: ran.append(spec.key) or {"engine": {}})
    out = engine_run.run_engines(["ddp", "fsdp2"], [2], _run(overrides=knob),
                                 progress=lambda *a: None)
    assert ran == ["ddp"] and out["skipped"][("fsdp2", 2)].startswith("channels_last_heads")


def test_a_comparison_in_fp16_runs_the_engines_that_apply_it_and_skips_the_rest(monkeypatch):
    """``--engine all --precision fp16`` (a GPU user's): DDP runs, ZeRO and FSDP2 are skipped
    naming the precision rather than the whole comparison refused (the runs faked here)."""
    from swinkit.runs import engine_run
    ran = []
    monkeypatch.setattr(engine_run, "run_engine",
                        lambda spec, **kw: ran.append(spec.key) or {"engine": {}})
    out = engine_run.run_engines(["ddp", "zero1", "zero2", "fsdp2"], [2], _run(precision="fp16"),
                                 progress=lambda *a: None)
    assert ran == ["ddp"] and set(out["results"]) == {("ddp", 2)}
    for key in ("zero1", "zero2", "fsdp2"):
        assert out["skipped"][(key, 2)].startswith("precision 'fp16': engine "), out["skipped"]


def test_an_engine_applying_no_precision_still_refuses_one_and_cudnn_benchmark(monkeypatch):
    """The refusal of an engine whose rank applies fp32 alone (none today) still holds."""
    from swinkit.runs import engine_spec
    from swinkit.runs.engine_records import ENGINES
    fp32_only = dataclasses.replace(ENGINES["fsdp2"], precisions=("fp32",))
    monkeypatch.setitem(engine_spec.ENGINES, "fsdp2", fp32_only)
    monkeypatch.setattr(engine_spec, "record", lambda name: fp32_only)
    with pytest.raises(ValueError, match="precision 'bf16': engine 'fsdp2' runs fp32 only"):
        engine_spec.EngineSpec(engine="fsdp2", run=_run(precision="bf16")).validate()
    with pytest.raises(ValueError, match="cudnn_benchmark: engine 'fsdp2' does not apply it"):
        engine_spec.EngineSpec(engine="fsdp2",
                               run=_run(overrides={"cudnn_benchmark": True})).validate()


def test_the_engine_ranks_receive_the_specs_precision_as_the_preset_knob(monkeypatch, test_cfg):
    """``DDPRunSpec.precision`` (what --precision sets for the engines) reaches a non-DDP
    rank among its overrides; fails if the ranks ran the preset's fp32 instead."""
    from swinkit.runs import engine_run
    from swinkit.runs.engine_spec import EngineSpec
    got = {}
    monkeypatch.setattr(engine_run, "launch", lambda entry, kwargs, *a, **k: got.update(kwargs))
    spec = EngineSpec(engine="fsdp2", run=_run(precision="bf16", overrides={"crop_size": (64, 64)}))
    engine_run._launch_ranks(spec, test_cfg, spec.run.launch_config(), True, None)
    assert got["overrides"] == {"crop_size": (64, 64), "precision": "bf16"}


def test_the_comparison_table_names_the_precision():
    from swinkit.report.engine_compare import compare_table
    row = {"engine": "zero1", "world_size": 1, "iter_s": 1.0, "efficiency": 1.0, "blame_s": {},
           "message_bytes": 0, "wire_bytes_per_rank": 0, "comm_rounds_per_step": 0,
           "comm_per_image_s": 0.0, "peak_memory_bytes": 1, "optimizer_state_bytes": 1,
           "precision": "bf16"}
    assert compare_table([row]).splitlines()[0].endswith("; precision bf16")
    del row["precision"]   # a row from before precisions were applied ran fp32
    assert compare_table([row]).splitlines()[0].endswith("; precision fp32")


# ----------------------------------------------------------------- the attribution's --precision

def test_attribute_run_takes_precision_and_hands_it_to_every_launch(monkeypatch, capsys):
    """``swinkit attribute --run --precision bf16`` and ``tools/attribute.py`` (which delegates)
    run the attribution's launches in bf16; refused before launch without --run, for the
    what-ifs, and (fp16) on CPU."""
    from swinkit.attribution.inputs import InputError
    from swinkit.cli import attribute_compat
    from swinkit.experiments import attribution_run
    asked = []

    def from_run(*args, precision=None, **kwargs):
        asked.append(precision)
        raise InputError("stop here: nothing launched")
    monkeypatch.setattr(attribution_run, "from_run", from_run)
    assert main(["attribute", "--run", "--preset", "test", "--precision", "bf16"]) == 3
    assert attribute_compat.main(["--run", "--preset", "test", "--precision", "bf16"]) == 3
    assert attribute_compat.main(["--run", "--preset", "test"]) == 3
    assert asked == ["bf16", "bf16", None]
    capsys.readouterr()
    for argv, message in (
            (["attribute", "--precision", "bf16"], "--precision bf16 applies to the attribution "
                                                   "measured now"),
            (["attribute", "--run", "--precision", "fp16"], "--precision fp16 is refused on CPU")):
        if torch.cuda.is_available() and "CPU" in message:
            continue
        assert main([*argv, "--preset", "test"]) == 2
        assert message in capsys.readouterr().err
    # tools/attribute.py takes --what-if and --precision in one parser: refused together; the
    # what-if subcommand has no --precision at all
    assert attribute_compat.main(["--what-if", "amp_bf16", "--run", "--preset", "test",
                                  "--precision", "bf16"]) == 2
    assert "what-ifs run the preset's" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["what-if", "amp_bf16", "--run", "--preset", "test", "--precision", "bf16"])
    assert exit_.value.code == 2 and "--precision" in capsys.readouterr().err
    assert asked == ["bf16", "bf16", None]


def test_the_thesis_projection_reads_the_one_precision_option_of_tools_attribute(capsys):
    from swinkit.cli import attribute_compat
    assert attribute_compat.main(["--preset", "thesis", "--predict", "1,2",
                                  "--precision", "bf16"]) == 0
    assert "thesis projection in bf16" in capsys.readouterr().out
    assert attribute_compat.main(["--preset", "thesis", "--predict", "1,2"]) == 0
    assert "thesis projection in fp32" in capsys.readouterr().out


# ----------------------------------------------------------------- a real launch

@pytest.mark.slow
def test_fsdp2_bf16_at_two_ranks_reduces_fp32_gradients_and_names_it(data_root, tmp_path,
                                                                     capsys, no_orphans):
    """``swinkit ddp --engine fsdp2 --world-size 2 --precision bf16``: the table's header and
    every rank's result name bf16; FSDP2's reduce-scatters move the model's fp32 gradient bytes
    and its all-gathers its fp32 parameter bytes (half of each under a MixedPrecisionPolicy
    in bf16)."""
    from swinkit.model.segmentor import build_segmentor
    from swinkit.config import load_config
    out = tmp_path / "r.json"
    assert main(["ddp", "--engine", "fsdp2", "--preset", "test", "--world-size", "2",
                 "--iters", "2", "--warmup", "1", "--workers", "0", "--data-root",
                 str(data_root), "--precision", "bf16", "--json", str(out)]) == 0
    assert "; precision bf16" in capsys.readouterr().out.splitlines()[0]
    r = json.loads(out.read_text())
    assert r["precision"]["precision"] == "bf16"
    assert [k["precision"]["autocast"] for k in r["ranks"]] == ["bfloat16", "bfloat16"]
    model = build_segmentor(load_config("test", data_root))
    fp32_bytes = sum(p.numel() * 4 for p in model.parameters())
    ops = r["engine"]["traffic"]["by_op"]   # per optimizer step (padded to the world size)
    reduced = sum(v["bytes"] for op, v in ops.items() if op.startswith("reduce_scatter"))
    gathered = sum(v["bytes"] for op, v in ops.items() if op.startswith("all_gather"))
    assert reduced == pytest.approx(fp32_bytes, rel=0.01)
    assert fp32_bytes < gathered <= 2 * fp32_bytes * 1.01
