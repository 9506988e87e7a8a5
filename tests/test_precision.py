"""The training precision at the configuration boundary: the names, what each
means, what a CPU or an older GPU can measure, the preset knob and its refusals, and the
thesis projection's device compute per precision; the command line that takes it."""
from __future__ import annotations

import pytest

from swinkit.precision import (PRECISIONS, bf16_fast_on_cpu, check_precision, cpu_has_bf16,
                               parse_precision)


def test_each_precision_is_applied_as_users_train_in_it():
    """Written out from the issue's definition, not from the table under test: autocast only
    for bf16/fp16, TF32 with tf32 and bf16, a GradScaler with fp16 alone."""
    expected = {"fp32": (None, False, False), "tf32": (None, True, False),
                "bf16": ("bfloat16", True, False), "fp16": ("float16", False, True)}
    assert {n: (p.autocast, p.tf32, p.loss_scaling) for n, p in PRECISIONS.items()} == expected


@pytest.mark.parametrize("bad", ["amp", "FP32", "", None, 16])
def test_an_unknown_precision_is_refused_naming_the_field(bad):
    with pytest.raises(ValueError, match=r"^--precision must be one of fp32, tf32, bf16, fp16"):
        parse_precision(bad, field="--precision")


def test_fp16_on_cpu_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="precision fp16 is refused on CPU: fp16 exists for "
                                         "GPU tensor cores"):
        check_precision("fp16", "cpu")
    assert check_precision("fp16", "cuda").measured == "fp16"


def test_tf32_on_cpu_runs_but_is_never_presented_as_a_tf32_measurement():
    plan = check_precision("tf32", "cpu")
    assert plan.measured == "fp32" and plan.precision.tf32   # the switches are still set
    assert plan.label == "tf32 (a no-op on CPU: fp32)" and "no TF32" in plan.note
    assert plan.to_dict()["measured"] == "fp32"
    on_gpu = check_precision("tf32", "cuda")
    assert on_gpu.measured == "tf32" and on_gpu.note is None and on_gpu.label == "tf32"


@pytest.mark.parametrize("native, slow", [(True, False), (False, True), (None, True)])
def test_bf16_on_a_cpu_without_bf16_instructions_is_labelled_slow(native, slow, monkeypatch):
    import swinkit.precision as precision
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: native)   # None: unreadable
    plan = check_precision("bf16", "cpu")
    assert plan.measured == "bf16"
    assert (plan.note is not None and "slow" in plan.note) is slow
    assert plan.label == ("bf16 (slow: no bf16 instructions)" if slow else "bf16")
    assert bf16_fast_on_cpu()[0] is not slow


@pytest.mark.parametrize("text, native", [
    ("processor : 0\nflags\t\t: fpu avx512f avx512_bf16 amx_tile\n", True),
    ("flags : fpu sse4_2 avx2 amx_bf16\n", True),
    ("Features\t: fp asimd bf16 i8mm\n", True),                        # Arm
    ("flags : fpu sse4_2 avx2 avx512f\nmodel name : avx512_bf16 in a name\n", False),
    ("", False),
])
def test_bf16_instructions_are_read_from_the_flags_line(text, native):
    assert cpu_has_bf16(text) is native


def test_this_machines_cpuinfo_agrees_with_torch():
    """The two sources the issue names: /proc/cpuinfo and torch's own CPU probe."""
    torch = pytest.importorskip("torch")
    probe = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    found = cpu_has_bf16()
    if probe is None or found is None:
        pytest.skip("no /proc/cpuinfo or no torch probe here")
    if probe():
        assert found is True


@pytest.mark.parametrize("name, capability, measured, tagged", [
    ("tf32", (7, 0), "fp32", "a no-op on this GPU: fp32"),
    ("bf16", (7, 0), "bf16", "slow: no bf16 tensor cores"),
    ("tf32", (9, 0), "tf32", None), ("bf16", (8, 0), "bf16", None), ("fp16", (7, 0), "fp16", None),
])
def test_a_gpu_before_ampere_has_no_tf32_and_slow_bf16(name, capability, measured, tagged):
    plan = check_precision(name, "cuda", cuda_capability=capability)
    assert plan.measured == measured and plan.tag == tagged


def test_the_preset_knob_defaults_to_fp32_and_takes_cfg_options(data_root):
    from swinkit.config import load_config
    assert load_config("test", data_root).precision == "fp32"
    assert load_config("thesis", data_root).precision == "fp32"
    assert load_config("test", data_root, {"precision": "bf16"}).precision == "bf16"
    assert load_config("test", data_root, {"precision": "tf32"}).precision == "tf32"
    # fp16 on a GPU preset is the GPU's question: accepted at the config boundary
    assert load_config("thesis", data_root, {"precision": "fp16"}).precision == "fp16"


@pytest.mark.parametrize("overrides, message", [
    ({"precision": "amp"}, "precision must be one of fp32, tf32, bf16, fp16; got 'amp'"),
    ({"precision": "fp16"}, "precision fp16 is refused on CPU"),
    ({"fused_adamw": "yes"}, "fused_adamw must be True or False, got 'yes'"),
    ({"channels_last_heads": 1}, "channels_last_heads must be True or False, got 1"),
    ({"cudnn_benchmark": None}, "cudnn_benchmark must be True or False, got None"),
])
def test_bad_precision_knobs_are_refused_naming_the_field(data_root, overrides, message):
    from swinkit.config import load_config
    with pytest.raises(ValueError, match=message):
        load_config("test", data_root, overrides)


def test_train_refuses_fp16_on_cpu_before_anything_starts(data_root, capsys):
    from swinkit.cli.commands import main
    argv = ["train", "--preset", "test", "--data-root", str(data_root), "--precision", "fp16"]
    assert main(argv) == 2
    out = capsys.readouterr()
    assert "swinkit train: error: precision fp16 is refused on CPU" in out.err
    assert "iter" not in out.out


def test_train_in_bf16_names_the_precision(data_root, capsys):
    from swinkit.cli.commands import main
    from swinkit.model import precision
    before = precision._switch_state(precision.torch.backends)
    try:
        assert main(["train", "--preset", "test", "--data-root", str(data_root), "--iters", "2",
                     "--precision", "bf16"]) == 0
    finally:
        precision._set_switch_state(precision.torch.backends, before)
    assert "in bf16" in capsys.readouterr().out.splitlines()[-1]


@pytest.mark.parametrize("name, dtype", [("bf16", "torch.bfloat16"), ("fp32", "torch.float32")])
def test_a_training_step_runs_its_forward_in_the_precision_asked(test_cfg, name, dtype):
    """The label alone proves nothing: an fp32 step labelled bf16 passed the test above. A
    hook on a backbone Linear reads the dtype its output really has (removing the autocast
    from train_step makes the bf16 case fail)."""
    import torch

    from swinkit.data.loader import build_loader
    from swinkit.model.precision import training_precision
    from swinkit.model.segmentor import build_optimizer, build_segmentor, train_step
    model = build_segmentor(test_cfg)
    optim, _ = build_optimizer(test_cfg, model)
    amp = training_precision(name, torch.device("cpu"), bf16_native=True)
    seen = []
    proj = model.backbone.stages[0].blocks[0].attn.proj
    handle = proj.register_forward_hook(lambda m, i, out: seen.append(str(out.dtype)))
    try:
        train_step(model, optim, next(iter(build_loader(test_cfg, workers=0))), amp)
    finally:
        handle.remove()
    assert seen == [dtype]
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())


def test_converge_refuses_fp16_naming_the_field():
    """fp16's loss scaling would reach the gradients the noise scale reads."""
    from swinkit.experiments.converge_spec import ConvergeSpec
    with pytest.raises(ValueError, match="precision: fp16 is not supported by converge"):
        ConvergeSpec(preset="thesis", target_loss=1.0, max_steps=10,
                     overrides={"precision": "fp16"}).validate()   # a GPU preset: fp16 is valid there


def test_ddp_and_dataparallel_apply_every_precision_deepspeed_and_fsdp2_all_but_fp16():
    """What each engine's rank applies (tests/test_ddp_precision.py runs DDP's in bf16,
    tests/test_engine_precision.py the others')."""
    from swinkit.precision import PRECISIONS
    from swinkit.runs.engine_records import ENGINES
    every, autocast_only = tuple(PRECISIONS), ("fp32", "tf32", "bf16")
    assert {name: e.precisions for name, e in ENGINES.items()} == {
        "ddp": every, "dp": every, "dp-vanilla": every,
        "deepspeed": autocast_only, "fsdp2": autocast_only}


def test_the_thesis_projection_in_fp32_is_the_stated_one():
    """thesis_devices("fp32") at the stated MFU reproduces links.THESIS_DEVICES, whose
    figures were written out independently (14.4 TFLOP at half of 15.7 and 19.5 TFLOP/s)."""
    from swinkit.predict.numbers.device_compute import thesis_devices
    from swinkit.predict.numbers.links import THESIS_DEVICES
    devices, left_out = thesis_devices("fp32")
    assert left_out == {}
    for key, stated in THESIS_DEVICES.items():
        assert devices[key].iter_s == pytest.approx(stated.iter_s, rel=1e-12)
        assert devices[key].link == stated.link
        assert devices[key].backward_share == stated.backward_share


def test_the_thesis_projection_in_bf16_shrinks_compute_not_the_all_reduce():
    """By hand, A100 in bf16 at a measured MFU of 0.3: 14.4e12 / (0.3 x 312e12) = 0.1538 s
    (fp32 at 0.5: 1.4769 s). The ring all-reduce of the fp32 gradient is the same in both
    (PCIe 4.0, 20 GB/s, 2 ranks: 485.7 MB / 20 GB/s = 24.3 ms), so its share of the
    iteration grows 9.6-fold: from 1.6 % to 15.8 %."""
    from swinkit.predict.numbers.device_compute import thesis_devices
    from swinkit.predict.numbers.links import THESIS_GRADIENT_BYTES, project
    devices, left_out = thesis_devices("bf16", mfu=0.3)
    a100 = devices["CRC A100 (PCIe)"]
    assert a100.iter_s == pytest.approx(14.4e12 / (0.3 * 312e12))
    assert set(left_out) == {"CRC V100 (PCIe)"} and "no bf16" in left_out["CRC V100 (PCIe)"]
    fp32 = thesis_devices("fp32")[0]["CRC A100 (PCIe)"]
    rows16, rows32 = (project(d, THESIS_GRADIENT_BYTES, (2,)) for d in (a100, fp32))
    assert rows16[2]["allreduce_s"] == pytest.approx(rows32[2]["allreduce_s"])
    assert rows16[2]["allreduce_s"] / a100.iter_s > 5 * rows32[2]["allreduce_s"] / fp32.iter_s


def test_a_measured_mfu_is_taken_only_from_a_run_in_that_precision():
    from swinkit.predict.numbers.device_compute import compute_s, measured_mfu
    result = {"matmul_peak_math": "fp32",
              "results": {"segmentor/forward_backward": {"mfu": 0.42}}}
    assert measured_mfu(result, "fp32") == 0.42
    with pytest.raises(ValueError, match="measured against the fp32 peak, not tf32's"):
        measured_mfu(result, "tf32")    # tf32 on CPU: fp32 math
    with pytest.raises(ValueError, match="mfu must be in"):
        compute_s(1e12, 1e12, 1.5)


def test_attribution_reads_the_model_benchmark_in_fp32_with_or_without_a_precision_axis():
    """bench_model's time gained a precision axis: the prediction from asv's results reads
    its fp32 rows (results stored before the axis are fp32)."""
    from swinkit.attribution.inputs import _in_precision
    new = {("cpu", "per_rank", "segmentor", "forward", "fp32"): {"value": 2.0},
           ("cpu", "per_rank", "segmentor", "forward", "bf16"): {"value": 1.0}}
    old = {("cpu", "per_rank", "segmentor", "forward"): {"value": 3.0}}
    assert _in_precision(new) == {("cpu", "per_rank", "segmentor", "forward"): {"value": 2.0}}
    assert _in_precision(old) == old
    assert _in_precision(new, "bf16")[("cpu", "per_rank", "segmentor", "forward")]["value"] == 1.0
