"""The engine registry: one record per engine, read everywhere, never an engine's name tested
outside it; the analytic traffic models the records hold, by hand."""
import ast
import importlib
import re
from pathlib import Path

import pytest

from swinkit.attribution import traffic
from swinkit.rank.devices import EngineUnavailable
from swinkit.runs.ddp_run import DDPRunSpec
from swinkit.runs.engine_records import COMPARED, ENGINES, KEYS, SHAPES, keys_named, record
from swinkit.runs.engine_spec import EngineSpec, spec_for_key

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = ROOT / "swinkit" / "runs" / "engine_records.py"
# an engine's name compared or looked up by string: `engine == "ddp"`, `spec.engine in (...)`
NAME_TEST = re.compile(r"""engine\w*(\.\w+|\[["']\w+["']\])*\s*(==|!=)\s*["']"""
                       r"""|engine\w*(\.\w+)*\s+(not\s+)?in\s*\(\s*["']""")


def _run(world_size=2, **kw):
    return DDPRunSpec(preset="test", nproc_per_node=world_size, **kw)


def test_no_engine_name_is_tested_outside_the_registry():
    offenders = []
    for path in [*(ROOT / "swinkit").rglob("*.py"), *(ROOT / "tools").glob("*.py")]:
        if path == REGISTRY:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if NAME_TEST.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == []


def test_the_name_test_pattern_finds_what_it_forbids():
    for line in ('if spec.engine == "ddp":', "engine != 'deepspeed'",
                 'if spec.engine in ("dp", "dp-vanilla"):', 'args.engine not in ("a",)'):
        assert NAME_TEST.search(line), line
    assert not NAME_TEST.search("if rec.shape == 'one_process':")


@pytest.mark.parametrize("name", list(ENGINES))
def test_every_record_names_a_rank_entry_that_exists_and_a_known_shape(name):
    e = ENGINES[name]
    module, _, function = e.entry.partition(":")
    tree = ast.parse(Path(importlib.util.find_spec(module).origin).read_text())
    assert function in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert e.shape in SHAPES and e.traffic_source in ("collectives", "copies")
    assert set(e.instrumentation) == {"phases", "collectives", "engine_timers", "comms_log"}
    assert set(e.compared) <= set(e.keys)


def test_every_key_round_trips_through_its_spec():
    for key in KEYS:
        assert spec_for_key(key, _run()).key == key
    assert EngineSpec(engine="deepspeed", run=_run()).key == "zero1"  # ZeRO-1 by default
    assert spec_for_key("dp_vanilla", _run()).engine == "dp-vanilla"
    assert record("dp_vanilla") is ENGINES["dp-vanilla"]   # the key's spelling is taken


def test_the_comparison_runs_fsdp2_and_keys_parse():
    assert "fsdp2" in COMPARED and "zero0" not in COMPARED
    assert keys_named("all") == list(COMPARED)
    assert keys_named("zero1, dp-vanilla") == ["zero1", "dp_vanilla"]
    with pytest.raises(ValueError, match=r"unknown \['zero3'\]"):
        keys_named("ddp,zero3")


def test_options_an_engine_does_not_take_are_refused_naming_who_takes_them():
    with pytest.raises(ValueError, match="zero applies to engine deepspeed only"):
        EngineSpec(engine="fsdp2", zero=1, run=_run()).validate()
    with pytest.raises(ValueError, match="ds_timers applies to engine deepspeed only"):
        EngineSpec(engine="ddp", ds_timers=True, run=_run()).validate()
    # a comparison hands DeepSpeed's timers to every key: dropped where not taken
    assert spec_for_key("fsdp2", _run(), ds_timers=True).ds_timers is None
    assert spec_for_key("zero2", _run(), ds_timers=True).ds_timers is True


@pytest.mark.parametrize("feature, run_kw", [
    ("bare", {"bare": True}), ("trace", {"trace_dir": "/tmp/t"})])
def test_run_features_only_ddp_takes_are_refused_by_the_others(feature, run_kw):
    with pytest.raises(ValueError, match=f"{feature} supported with engine ddp only"):
        EngineSpec(engine="fsdp2", run=_run(**run_kw)).validate()


def test_a_precision_an_engine_does_not_apply_is_refused_before_any_launch():
    run = _run(overrides={"precision": "fp16"})
    with pytest.raises(ValueError, match="precision 'fp16': engine 'fsdp2' runs fp32, tf32, "
                                         "bf16 only"):
        EngineSpec(engine="fsdp2", run=run).validate()


def test_fsdp2_without_fully_shard_is_unavailable_naming_where_it_looked(monkeypatch):
    import torch

    from swinkit.rank import devices
    monkeypatch.setattr(devices, "FULLY_SHARD_MODULES", ("swinkit_no_such_module",))
    with pytest.raises(EngineUnavailable, match=f"swinkit_no_such_module.fully_shard.*"
                                                f"torch {re.escape(torch.__version__)}"):
        EngineSpec(engine="fsdp2", run=_run()).validate()


def test_this_torch_has_fully_shard():
    from swinkit.rank.devices import find_fully_shard
    assert callable(find_fully_shard())


# ----------------------------------------------------------------- the analytic models

def test_fsdp_traffic_as_zero3_counts_it():
    """Per optimizer step: 2K parameter all-gathers and one gradient reduce-scatter,
    (N-1)/N of each on the wire: at K=1, 3 x psi x (N-1)/N, ZeRO-3's figure."""
    psi, n = 1000, 4
    t = traffic.fsdp_traffic(psi, psi, n)
    assert t.message_bytes == 3 * psi
    assert t.wire_bytes_per_rank == pytest.approx(3 * psi * 3 / 4)
    t4 = traffic.fsdp_traffic(psi, psi, n, grad_accum=4)
    assert t4.message_bytes == 8 * psi + psi and t4.collectives == 9
    assert traffic.fsdp_traffic(psi, psi, 1).wire_bytes_per_rank == 0
    with pytest.raises(ValueError, match="grad_accum must be an integer >= 1"):
        traffic.fsdp_traffic(psi, psi, n, grad_accum=0)


def test_reducing_collectives_are_gradient_communication_and_gathers_are_not():
    assert traffic.reduces("reduce_scatter_single") and traffic.reduces("all_reduce")
    assert not traffic.reduces("all_gather_single") and not traffic.reduces("broadcast")
    assert not traffic.reduces(None)


def _result(engine, world, module=None, buckets=None, k=1, images=2, crop=(8, 8)):
    return {"world_size": world, "crop_size": list(crop), "bucket_sizes_bytes": buckets,
            "ranks": [{"module_bytes": module, "images_per_step": images * k}]}


def test_expected_traffic_holds_each_record_to_its_model():
    from swinkit.runs.engine_result import expected_traffic
    module = {"params": 4000, "grads": 4000, "buffers": 100}
    ddp = expected_traffic(EngineSpec(engine="ddp", run=_run()),
                           _result("ddp", 2, buckets=[3000, 1000]))
    assert ddp["wire_bytes_per_rank"] == 4000        # 2 (N-1)/N = 1 at N=2
    zero2 = expected_traffic(EngineSpec(engine="deepspeed", zero=2, grad_accum=2, run=_run()),
                             _result("deepspeed", 2, module, k=2))
    # two all-reduces of the gradients (one per micro-batch) and one all-gather of parameters
    assert zero2["message_bytes"] == 2 * 4000 + 4000
    assert zero2["wire_bytes_per_rank"] == pytest.approx(2 * 4000 + 4000 / 2)
    fsdp = expected_traffic(EngineSpec(engine="fsdp2", run=_run()), _result("fsdp2", 2, module))
    assert fsdp["message_bytes"] == 3 * 4000 and "reduce-scattered" in fsdp["formula"]
    dp = expected_traffic(EngineSpec(engine="dp", run=_run()), _result("dp", 2, module))
    # 2 images x 3 x 8 x 8 x 4 bytes scattered (half leaves device 0), params + buffers
    # replicated once, gradients reduce-added once
    assert dp["message_bytes"] == 2 * 3 * 64 * 4 / 2 + 4100 + 4000
    assert expected_traffic(EngineSpec(engine="fsdp2", run=_run()), _result("fsdp2", 2)) is None
