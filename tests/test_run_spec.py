"""The run spec that crosses the process hop: checked before launch, written once, read back
whole in the rank; and the step plan it asks for."""
from __future__ import annotations

import json

import pytest

from swinkit.ddp_options import DDPOptions
from swinkit.injection import parse_injections
from swinkit.rank.plan import StepPlan
from swinkit.run_spec import RunSpec
from swinkit.runs.ddp_run import DDPRunSpec


def test_the_spec_crosses_the_hop_as_json_and_comes_back_equal():
    """Every field the rank needs, through JSON (what job.json holds) and back: two --inject
    specs with their own ranks, DDP options, overrides; the launch settings stay behind."""
    spec = DDPRunSpec(preset="test", nproc_per_node=2, iters=4, warmup=2, workers=0, seed=3,
                      injection=parse_injections(["data_ms=60,ranks=0", "backward_ms=50,ranks=1"]),
                      overrides={"images_per_rank": 1}, ddp=DDPOptions(grad_accum=2),
                      paired=True, precision="bf16")
    cfg, _ = spec.validate()
    crossed = json.loads(json.dumps(spec.for_ranks(cfg)))
    assert "launch" not in crossed and "world_size" not in crossed
    back = RunSpec.of(crossed)
    assert back.injection.for_rank(0).describe() == "data_ms=60"
    assert back.injection.for_rank(1).describe() == "backward_ms=50"
    assert (back.ddp, back.overrides, back.seed, back.paired) == (
        DDPOptions(grad_accum=2), {"images_per_rank": 1}, 3, True)
    assert back.data_root == str(cfg.data_root)  # the folder the supervisor wrote
    assert back.precision == "bf16"  # flows to the rank (the loop applies none yet)
    assert RunSpec.of(back) is back
    with pytest.raises(ValueError, match="unknown run spec field"):
        RunSpec.from_dict({**crossed, "world_size": 2})


def test_the_precision_is_resolved_and_checked_before_launch():
    """None is the preset's (fp32 here); a name is checked against the device the backend
    decides (gloo: CPU, where fp16 is refused), before any process starts."""
    cfg, _ = DDPRunSpec(preset="test", nproc_per_node=1).validate()
    assert DDPRunSpec(preset="test", nproc_per_node=1).for_ranks(cfg)["precision"] == "fp32"
    with pytest.raises(ValueError, match="precision must be one of"):
        DDPRunSpec(preset="test", nproc_per_node=1, precision="amp").validate()
    with pytest.raises(ValueError, match="fp16 is refused on CPU"):
        DDPRunSpec(preset="test", nproc_per_node=1, precision="fp16").validate()


@pytest.mark.parametrize("fields, message", [
    ({"iters": 0}, "iters"), ({"warmup": -1}, "warmup"), ({"seed": -1}, "seed"),
    ({"local": True, "paired": True}, "local and paired"), ({"workers": -1}, "workers"),
    ({"paired": True, "bare": True}, "paired needs the timeline"),
    ({"iters": 3, "ddp": DDPOptions(grad_accum=2)}, "whole optimizer steps")])
def test_a_bad_spec_names_its_field_without_a_preset_or_a_launch(fields, message):
    with pytest.raises(ValueError, match=message):
        RunSpec(**fields).check()


def test_the_spec_asks_for_its_plan():
    """Paired: DDP and local steps alternating; local: all local; else all DDP steps."""
    assert {k for k, _ in StepPlan.for_spec(RunSpec(paired=True, iters=2, warmup=1)).kinds()
            } == {"ddp", "local"}
    assert StepPlan.for_spec(RunSpec(local=True, iters=2, warmup=1)).main == "local"
    plain = StepPlan.for_spec(RunSpec(iters=2, warmup=1))
    assert plain.kinds() == [("ddp", 0), ("ddp", 1), ("ddp", 2)] and plain.tail is None
