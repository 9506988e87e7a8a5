"""MFU's denominator: a matmul peak in the model's own dtype and math mode, with the bf16 peak
beside it on GPU (the GPU branch driven on CPU with a recording stand-in for the timing)."""
from __future__ import annotations

import pytest
import torch

from swinkit.components import forward_backward as fb


@pytest.mark.parametrize("device, dtype, tf32, expected", [
    ("cuda", torch.float32, False, (torch.float32, "fp32")),   # torch's default on GPU
    ("cuda", torch.float32, True, (torch.float32, "tf32")),
    ("cpu", torch.float32, True, (torch.float32, "fp32")),     # no TF32 on CPU
    ("cuda", torch.bfloat16, False, (torch.bfloat16, "bf16")),
])
def test_peak_math_is_the_models(device, dtype, tf32, expected):
    assert fb.peak_math(device, dtype, tf32) == expected


@pytest.mark.parametrize("kw, message", [
    (dict(device_type="mps", model_dtype=torch.float32, allow_tf32=False), "device_type must be"),
    (dict(device_type="cuda", model_dtype=torch.float64, allow_tf32=False), "model_dtype must be"),
])
def test_peak_math_names_the_bad_field(kw, message):
    with pytest.raises(ValueError, match=message):
        fb.peak_math(**kw)


def _recording_peak(monkeypatch, values):
    """matmul_peak_flops replaced by a stand-in returning ``values[dtype]``; the dtypes asked."""
    asked = []

    def fake(device, dtype=torch.float32, n=1024, reps=5):
        asked.append((device.type, dtype))
        return values[dtype]
    monkeypatch.setattr(fb, "matmul_peak_flops", fake)
    return asked


def test_gpu_mfu_divides_by_the_fp32_peak_and_reports_bf16_beside(monkeypatch):
    """An fp32 model on GPU with TF32 off: the peak MFU divides by is an fp32 GEMM's, not a
    bf16 one (which made GPU MFU several times too low)."""
    asked = _recording_peak(monkeypatch, {torch.float32: 50e12, torch.bfloat16: 800e12})
    monkeypatch.setattr(fb, "tf32_flags", lambda: {"matmul": False, "cudnn_conv": True})
    out = fb.peaks(torch.device("cuda"), torch.nn.Linear(4, 4))
    assert out["matmul_peak_flops"] == 50e12 and out["matmul_peak_math"] == "fp32"
    assert out["matmul_peak_bf16_flops"] == 800e12
    assert asked == [("cuda", torch.float32), ("cuda", torch.bfloat16)]
    assert out["math_flags"] == {"model_dtype": "fp32", "matmul_tf32": False,
                                 "cudnn_conv_tf32": True}


def test_gpu_peak_follows_tf32_when_the_model_may_use_it(monkeypatch):
    _recording_peak(monkeypatch, {torch.float32: 400e12, torch.bfloat16: 800e12})
    monkeypatch.setattr(fb, "tf32_flags", lambda: {"matmul": True, "cudnn_conv": True})
    out = fb.peaks(torch.device("cuda"), torch.nn.Linear(4, 4))
    assert out["matmul_peak_math"] == "tf32" and out["matmul_peak_flops"] == 400e12


def test_cpu_peak_is_sgemm_with_no_bf16_figure(monkeypatch):
    asked = _recording_peak(monkeypatch, {torch.float32: 1e11})
    out = fb.peaks(torch.device("cpu"), torch.nn.Linear(4, 4))
    assert out["matmul_peak_math"] == "fp32" and out["matmul_peak_bf16_flops"] is None
    assert asked == [("cpu", torch.float32)]


@pytest.mark.parametrize("precisions, on", [
    (("tf32", "none"), True), (("none", "tf32"), True), (("ieee", "tf32"), False),
    (("none", "none"), False),
])
def test_tf32_the_most_specific_setting_decides(precisions, on):
    assert fb._tf32(*precisions) is on


def test_tf32_flags_read_the_new_api_without_raising():
    """torch 2.9+ raises on reading the legacy ``allow_tf32`` once ``fp32_precision`` set it;
    the reader must not."""
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    try:
        matmul.fp32_precision = "tf32"
        assert fb.tf32_flags()["matmul"] is True
        matmul.fp32_precision = "ieee"
        assert fb.tf32_flags()["matmul"] is False
    finally:
        matmul.fp32_precision = before


def test_matmul_peak_times_the_dtype_asked():
    peak = fb.matmul_peak_flops(torch.device("cpu"), torch.float32, n=64, reps=2)
    assert peak > 0


@pytest.mark.gpu
def test_real_gpu_peaks_are_measured_in_fp32_and_bf16():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    out = fb.peaks(torch.device("cuda"), torch.nn.Linear(4, 4).cuda())
    assert out["matmul_peak_math"] == ("tf32" if fb.tf32_flags()["matmul"] else "fp32")
    assert out["matmul_peak_flops"] > 0 and out["matmul_peak_bf16_flops"] > 0


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
