"""A device's compute per iteration in a training precision: the iteration's FLOPs over the
model FLOP utilisation (MFU) times the GEMM peak of that precision. The thesis projection's
devices (:data:`swinkit.predict.numbers.links.THESIS_DEVICES`) in any precision, from stated peaks
and a stated or measured MFU. Numbers only: no torch.

    compute_s = FLOPs / (MFU x peak[precision])

The gradient all-reduce does not change with the precision (the weights, gradients and DDP's
all-reduce stay fp32), so a precision that shrinks the compute leaves the same bytes to hide in
a shorter backward: the projection's question in the precision users train in.

Example (the thesis's A100, half of each peak used):
    >>> round(compute_s(14.4e12, STATED_PEAKS_TFLOPS["A100"]["fp32"] * 1e12, 0.5), 3)
    1.477
    >>> round(compute_s(14.4e12, STATED_PEAKS_TFLOPS["A100"]["bf16"] * 1e12, 0.5), 4)
    0.0923
"""
from __future__ import annotations

from dataclasses import replace

from swinkit.predict.numbers.links import THESIS_DEVICES, Device
from swinkit.precision import parse_precision

# Dense GEMM peaks from the vendors' data sheets, TFLOP/s (no sparsity); None: the device has
# no such math (TF32 and bf16 tensor cores came with Ampere). The V100's are the SXM2 part's,
# as the projection's fp32 figure always was; its fp16 is the tensor cores'.
STATED_PEAKS_TFLOPS = {
    "V100": {"fp32": 15.7, "tf32": None, "bf16": None, "fp16": 125.0},
    "A100": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
}
# which stated peaks each thesis system's device has
THESIS_DEVICE_PEAKS = {"CRC V100 (PCIe)": "V100", "CRC A100 (PCIe)": "A100",
                       "CRC A100_NVLINK": "A100"}
# An iteration of the thesis workload (8 images at 512x512): 3 x 2 x 2407.5 GMAC of forward
# (forward, and backward at twice the forward), as the projection has always stated it.
THESIS_ITERATION_FLOPS = 14.4e12
# The projection's stated MFU where none is measured: half the peak, as before precisions.
STATED_MFU = 0.5


def compute_s(flops: float, peak_flops: float, mfu: float) -> float:
    """Seconds of ``flops`` on a device whose GEMM peak is ``peak_flops`` at utilisation
    ``mfu`` (0 < mfu <= 1)."""
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu must be in (0, 1], got {mfu!r}")
    if not peak_flops > 0:
        raise ValueError(f"peak_flops must be > 0, got {peak_flops!r}")
    return flops / (mfu * peak_flops)


def measured_mfu(forward_backward: dict, precision: str) -> float:
    """The segmentor's forward+backward MFU from a forward/backward result
    (:func:`swinkit.components.forward_backward.measure`'s JSON), if it was measured as
    ``precision``; ValueError otherwise (a tf32 run on CPU is fp32 math, and its MFU is
    fp32's)."""
    parse_precision(precision)
    math = forward_backward.get("matmul_peak_math")
    if math != precision:
        raise ValueError(f"the forward/backward result was measured against the {math} peak, "
                         f"not {precision}'s: its MFU is no {precision} MFU")
    return forward_backward["results"]["segmentor/forward_backward"]["mfu"]


def mfu_measured_in(report: dict, precision: str) -> tuple[float, str]:
    """(the segmentor's forward+backward MFU measured as ``precision``, the device it ran on)
    from a saved result: ``tools/gpu_check.py``'s JSON (its precision table's NCHW-heads
    variant, else its measure part) or a forward/backward result. ValueError when it holds
    none measured as ``precision`` (a CPU's tf32 was fp32 math: no tf32 MFU).

    >>> table = {"device": "NVIDIA H200", "parts": {"precision": {"variants": {
    ...     "device_name": "NVIDIA H200", "forward_backward": [
    ...         {"precision": "bf16", "channels_last_heads": True, "matmul_peak_math": "bf16",
    ...          "mfu": 0.35},
    ...         {"precision": "bf16", "channels_last_heads": False, "matmul_peak_math": "bf16",
    ...          "mfu": 0.3}]}}}}
    >>> mfu_measured_in(dict(table, device="cuda"), "bf16")     # the variants' device name
    (0.3, 'NVIDIA H200')
    >>> fb = {"matmul_peak_math": "fp32", "device": "cuda",
    ...       "results": {"segmentor/forward_backward": {"mfu": 0.2}}}
    >>> mfu_measured_in(fb, "fp32")                             # a forward/backward result
    (0.2, 'cuda')
    >>> old_gpu = {"parts": {"precision": {"variants": {"forward_backward": [
    ...     {"precision": "tf32", "channels_last_heads": False, "matmul_peak_math": "fp32",
    ...      "mfu": 0.4}]}}}}
    >>> mfu_measured_in(old_gpu, "tf32")                  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ValueError: no segmentor forward+backward measured in tf32 in it (measured: fp32); ...
    """
    parse_precision(precision)
    parts = report.get("parts") or {}
    variants = (parts.get("precision") or {}).get("variants") or {}
    for v in variants.get("forward_backward", []):
        if (v["precision"], v["channels_last_heads"], v["matmul_peak_math"]) == (
                precision, False, precision):
            return v["mfu"], variants.get("device_name") or report.get("device", "?")
    fb = (parts.get("measure") or {}).get("forward_backward") or (
        report if "results" in report else None)
    if fb and fb.get("matmul_peak_math") == precision:
        return measured_mfu(fb, precision), report.get("device") or fb.get("device", "?")
    measured = sorted({v["matmul_peak_math"] for v in variants.get("forward_backward", [])}
                      | ({fb.get("matmul_peak_math")} if fb else set()))
    raise ValueError(f"no segmentor forward+backward measured in {precision} in it (measured: "
                     f"{', '.join(map(str, measured)) or 'none'}); tools/gpu_check.py "
                     "--parts precision measures fp32, tf32 and bf16 on a GPU")


def thesis_devices(precision: str = "fp32", mfu: float = STATED_MFU,
                   flops: float = THESIS_ITERATION_FLOPS) -> tuple[dict[str, Device], dict[str, str]]:
    """The thesis systems' :class:`~swinkit.predict.numbers.links.Device` figures with the
    iteration's compute in ``precision`` at ``mfu`` (links and backward share as stated), and
    the systems left out with the reason: a device with no such math (TF32 or bf16 on a V100).

    >>> devices, left_out = thesis_devices("bf16")
    >>> sorted(devices), left_out
    (['CRC A100 (PCIe)', 'CRC A100_NVLINK'], {'CRC V100 (PCIe)': 'a V100 has no bf16 math (it came with Ampere GPUs); project it in fp32 or fp16'})
    """
    parse_precision(precision)
    devices, left_out = {}, {}
    for key, device in THESIS_DEVICES.items():
        part = THESIS_DEVICE_PEAKS[key]
        peak = STATED_PEAKS_TFLOPS[part][precision]
        if peak is None:
            has = [p for p, v in STATED_PEAKS_TFLOPS[part].items() if v]
            left_out[key] = (f"a {part} has no {precision} math (it came with Ampere GPUs); "
                             f"project it in {' or '.join(has)}")
            continue
        devices[key] = replace(device, iter_s=compute_s(flops, peak * 1e12, mfu))
    return devices, left_out
