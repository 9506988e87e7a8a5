"""The forward/backward component in a training precision, and MFU's denominator: the GEMM peak
of the precision used, every precision's beside it on GPU (the GPU branch driven on CPU with a
recording stand-in for the timing)."""
from __future__ import annotations

import math

import pytest
import torch

from rank_stand_ins import switches_as_they_were  # noqa: F401 (autouse)
from swinkit.components import forward_backward as fb
from swinkit.components import peaks
from swinkit.model.precision import tf32_flags
from swinkit.precision import check_precision


def _recording_peak(monkeypatch, values):
    """peaks.peak_flops replaced by a stand-in returning ``values[name]``; the names asked."""
    asked = []

    def fake(device, name):
        asked.append((device.type, name))
        return values[name]
    monkeypatch.setattr(peaks, "peak_flops", fake)
    return asked




# Candidate peaks that all differ, so dividing by the wrong one gives another MFU.
FAKE_PEAKS = {"fp32": 50e12, "tf32": 200e12, "bf16": 400e12, "fp16": 800e12}


@pytest.mark.parametrize("precision, divisor, expected_mfu", [
    ("fp32", "fp32", 0.4), ("tf32", "tf32", 0.1), ("bf16", "bf16", 0.05), ("fp16", "fp16", 0.025),
])
def test_gpu_mfu_divides_by_the_peak_of_the_precision_used(monkeypatch, precision, divisor,
                                                           expected_mfu):
    """By hand: 10 TFLOP in a median of 0.5 s is 20 TFLOP/s achieved; against the fake peaks
    (fp32 50, TF32 200, bf16 400, fp16 800 TFLOP/s) that is an MFU of 0.4, 0.1, 0.05 and
    0.025. Dividing every precision by the fp32 peak (the code before precisions) fails the
    three others: checked by planting ``divisor = "fp32"`` in peaks(), which failed them."""
    asked = _recording_peak(monkeypatch, FAKE_PEAKS)
    info = peaks.peaks(torch.device("cuda"), check_precision(precision, "cuda"))
    assert info["matmul_peak_math"] == divisor and info["matmul_peak_flops"] == FAKE_PEAKS[divisor]
    assert sorted(name for _, name in asked) == sorted(FAKE_PEAKS)   # all four on GPU
    assert info["matmul_peak_bf16_flops"] == 400e12
    out = fb.row([0.4, 0.5, 0.6], 10e12, info)
    assert out["achieved_flops"] == pytest.approx(20e12)
    assert out["mfu"] == pytest.approx(expected_mfu)
    assert out["mfu_of_bf16_peak"] == pytest.approx(0.05)


@pytest.mark.parametrize("precision, divisor", [("fp32", "fp32"), ("bf16", "bf16"),
                                                ("tf32", "fp32")])
def test_cpu_peak_is_the_precisions_alone(monkeypatch, precision, divisor):
    """On CPU only the divisor is measured; tf32 there is fp32 math, so fp32's peak."""
    asked = _recording_peak(monkeypatch, FAKE_PEAKS)
    info = peaks.peaks(torch.device("cpu"), check_precision(precision, "cpu", bf16_native=True))
    assert asked == [("cpu", divisor)]
    assert info["matmul_peak_math"] == divisor and info["matmul_peak_bf16_flops"] is None
    assert fb.row([1.0], 1e12, info)["mfu"] == pytest.approx(1e12 / FAKE_PEAKS[divisor])


def test_the_optimizer_step_has_no_mfu():
    """Elementwise: no matmul FLOPs, so NaN rather than 0 (which would read as idle)."""
    out = fb.row([0.1], 0, {"matmul_peak_flops": 1e12})
    assert math.isnan(out["achieved_flops"]) and math.isnan(out["mfu"])


def test_a_peak_is_timed_with_tf32_on_only_for_tf32(monkeypatch):
    """The TF32 peak is the fp32 GEMM with TF32 on; every other peak with it off; the
    process's switches are as they were afterwards."""
    seen = []
    monkeypatch.setattr(peaks, "matmul_peak_flops",
                        lambda device, dtype: seen.append((dtype, tf32_flags()["matmul"])) or 1.0)
    before = tf32_flags()
    for name in ("fp32", "tf32", "bf16", "fp16"):
        peaks.peak_flops(torch.device("cpu"), name)
    assert seen == [(torch.float32, False), (torch.float32, True), (torch.bfloat16, False),
                    (torch.float16, False)]
    assert tf32_flags() == before
    with pytest.raises(ValueError, match="peak must be one of"):
        peaks.peak_flops(torch.device("cpu"), "fp8")


def test_matmul_peak_times_the_dtype_asked():
    peak = peaks.matmul_peak_flops(torch.device("cpu"), torch.float32, n=64, reps=2)
    assert peak > 0


@pytest.mark.gpu
def test_real_gpu_peaks_are_measured_in_every_precision():
    """On a GPU from Ampere on: bf16 and fp16 tensor cores beat the fp32 GEMM, and TF32 does."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    info = peaks.peaks(torch.device("cuda"), check_precision("bf16", "cuda"))
    got = info["peaks_flops"]
    assert set(got) == {"fp32", "tf32", "bf16", "fp16"} and min(got.values()) > 0
    assert info["matmul_peak_math"] == "bf16" and info["matmul_peak_flops"] == got["bf16"]
    if torch.cuda.get_device_capability() >= (8, 0):
        assert got["bf16"] > got["fp32"] and got["fp16"] > got["fp32"]
        assert got["tf32"] > got["fp32"]


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16", "fp16"])
def test_gpu_forward_backward_in_each_precision_names_its_peak(precision):
    """The test preset's forward/backward in each precision, on the GPU: the peak divided by
    is the precision's, and the label names it."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    out = fb.measure("test", batch=2, samples=1, precision=precision)
    assert out["precision"]["precision"] == precision
    assert out["matmul_peak_math"] == out["precision"]["measured"]
    step = out["results"]["segmentor/forward_backward"]
    assert step["mfu"] == pytest.approx(step["achieved_flops"] / out["matmul_peak_flops"])


def test_cpu_forward_backward_in_bf16_is_labelled_and_divided_by_the_bf16_peak():
    """The test preset in bf16 on CPU, in this process: the label, the divisor and the
    switches recorded with it."""
    out = fb.measure("test", batch=2, samples=1, precision="bf16")
    assert out["precision"]["precision"] == "bf16" and out["matmul_peak_math"] == "bf16"
    assert out["precision"]["math_flags"]["matmul"] is True   # TF32 on with bf16, as users run


@pytest.mark.parametrize("precision, dtype", [("bf16", torch.bfloat16), ("fp32", torch.float32)])
def test_the_component_forward_and_backward_run_under_autocast(test_cfg, precision, dtype):
    """The backbone's first attention output projection computes in bf16 in the bf16
    component's forward and forward+backward, in fp32 in the fp32 one. Checked to fail by
    planting a forward() without ``amp.autocast()``: its projection ran in fp32."""
    from swinkit.model.precision import training_precision
    from swinkit.model.segmentor import build_segmentor
    model = build_segmentor(test_cfg)
    amp = training_precision(precision, torch.device("cpu"), bf16_native=True)
    ops = fb.training_ops(model, "segmentor", 2, (64, 64), torch.device("cpu"), amp)
    seen = []
    proj = model.backbone.stages[0].blocks[0].attn.proj
    handle = proj.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    try:
        ops["forward"]()
        ops["forward_backward"]()
    finally:
        handle.remove()
    assert seen == [dtype, dtype]


def test_tf32_on_cpu_is_measured_as_fp32_and_says_so():
    out = fb.measure("test", batch=2, samples=1, precision="tf32")
    assert out["matmul_peak_math"] == "fp32"
    assert out["precision"]["label"] == "tf32 (a no-op on CPU: fp32)"
    assert "no-op" in out["precision"]["note"]


def test_fp16_on_cpu_is_refused_naming_the_field_before_the_model_is_built(monkeypatch):
    import swinkit.model.segmentor as segmentor
    monkeypatch.setattr(segmentor, "build_segmentor", lambda cfg: pytest.fail("model built"))
    with pytest.raises(ValueError, match="precision fp16 is refused on CPU"):
        fb.measure("test", batch=2, samples=1, precision="fp16")


@pytest.mark.parametrize("precision, native, skipped", [
    ("fp32", False, None), ("bf16", True, None), ("bf16", False, "slow"),
    ("tf32", True, "no-op"), ("fp16", True, "refused"),
])
def test_the_sweep_skips_what_cpu_cannot_measure_as_itself(precision, native, skipped):
    reason = fb.precision_skip_reason(precision, "cpu", bf16_native=native)
    assert (reason is None) if skipped is None else (skipped in reason)
    assert fb.precision_skip_reason(precision, "cuda") is None


@pytest.mark.gpu
def test_gpu_peak_memory_is_the_models_not_the_peak_gemms():
    """The peak GEMM runs first, on three 8192 x 8192 fp32 matrices (768 MiB); the `test`
    model's ops at batch 2 need a small fraction of that. Before the peak counter was reset
    after the GEMM, every model benchmark reported at least 768 MiB."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    out = fb.measure("test", batch=2, samples=1)
    assert out["device"].startswith("cuda")
    assert 0 < out["peak_memory_mib"] < 3 * 8192 ** 2 * 4 / 2 ** 20


def test_batch_one_is_refused_naming_the_field_before_the_model_is_built():
    """At batch 1 training UPerHead fails deep inside batch norm ("Expected more than 1 value
    per channel"), naming neither the field nor the value; found on an H200, where the GPU
    peak-memory test used batch 1."""
    with pytest.raises(ValueError, match=r"batch must be an integer >= 2, got 1"):
        fb.measure("test", batch=1, samples=1)


def test_the_default_sweep_measures_fp32_everywhere_and_bf16_once_where_it_is_fast(monkeypatch):
    """On a CPU with bf16 instructions: fp32 at both batches, bf16 at the per-rank batch only
    (SWINKIT_MODEL=all: both), tf32 and fp16 skipped with their reasons."""
    import swinkit.precision as precision
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: True)
    ran = []
    monkeypatch.setattr(fb, "measure_isolated",
                        lambda preset, batch, precision: ran.append((batch, precision)) or {})
    names = ("fp32", "tf32", "bf16", "fp16")
    sweep = fb.model_sweep(["test"], ["per_rank", "double"], progress=lambda _: None,
                           precisions=names)
    assert ran == [(2, "fp32"), (2, "bf16"), (4, "fp32")]
    assert "no-op" in sweep.skipped[("test", "per_rank", "tf32")]
    assert "refused" in sweep.skipped[("test", "double", "fp16")]
    assert "SWINKIT_MODEL=all" in sweep.skipped[("test", "double", "bf16")]
    ran.clear()
    fb.model_sweep(["test"], ["per_rank", "double"], progress=lambda _: None, precisions=names,
                   every_batch=True)
    assert ran == [(2, "fp32"), (2, "bf16"), (4, "fp32"), (4, "bf16")]
