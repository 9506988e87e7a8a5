"""MFU's denominator: the peak of a square GEMM measured in the precision the model trains in,
in the same process as the model's timings.

The peak MFU divides by is the one named by the precision's plan
(:class:`swinkit.precision.PrecisionPlan` ``measured``): fp32 (TF32 off), TF32 (fp32 matrices,
TF32 on), bf16 or fp16. A model trained under bf16 autocast is held to the bf16 peak, since
that is what its matmuls could reach; an fp32 model to the fp32 peak, not to the bf16 figure
GPU spec sheets quote. On GPU the other precisions' peaks are measured beside it (seconds, on
8192 x 8192 matrices), so a table can say what each precision's ceiling is on that GPU; on CPU
only the divisor is (a 1024 GEMM per precision costs seconds there).
"""
from __future__ import annotations

import torch

from swinkit.measure.timing import timed
from swinkit.model.precision import math_switches
from swinkit.precision import PRECISIONS, PrecisionPlan

# the matrices' dtype of each peak (TF32 is fp32 matrices with TF32 switched on)
PEAK_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
               "fp16": torch.float16}


def device_syncer(device: torch.device):
    """What drains the device before a clock read: None on CPU (work is synchronous)."""
    return torch.cuda.synchronize if device.type == "cuda" else None


def matmul_peak_flops(device: torch.device, dtype: torch.dtype = torch.float32, n: int = 1024,
                      reps: int = 5) -> float:
    """Best-of-``reps`` FLOP/s of an n x n GEMM in ``dtype`` under the process's math switches
    (TF32 or not). GPUs get n = 8192, large enough to fill them."""
    n = 8192 if device.type == "cuda" else n
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = min(timed(lambda: a @ b, reps, warmup=1, sync=device_syncer(device)))
    return 2 * n ** 3 / best


def peak_flops(device: torch.device, name: str) -> float:
    """The GEMM peak of precision ``name`` (``fp32``, ``tf32``, ``bf16``, ``fp16``), with TF32
    switched on for ``tf32`` and off for the others while it is timed (then as it was)."""
    if name not in PEAK_DTYPES:
        raise ValueError(f"peak must be one of {', '.join(PEAK_DTYPES)}; got {name!r}")
    with math_switches(tf32=name == "tf32", cudnn_benchmark=torch.backends.cudnn.benchmark):
        return matmul_peak_flops(device, PEAK_DTYPES[name])


def peaks(device: torch.device, plan: PrecisionPlan) -> dict:
    """The peak MFU divides by (``matmul_peak_flops``, named in ``matmul_peak_math``), every
    precision's peak on GPU (``peaks_flops``; on CPU the divisor's only) and the bf16 peak
    (``matmul_peak_bf16_flops``, None on CPU) as earlier results had it."""
    divisor = plan.measured
    names = list(PRECISIONS) if device.type == "cuda" else [divisor]
    measured = {name: peak_flops(device, name) for name in names}
    return {"matmul_peak_flops": measured[divisor], "matmul_peak_math": divisor,
            "matmul_peak_bf16_flops": measured.get("bf16") if device.type == "cuda" else None,
            "peaks_flops": measured}


def mfu(achieved_flops: float, peak_info: dict) -> dict:
    """MFU against the divisor, and against the bf16 peak where it was measured (GPU).

    >>> mfu(20e12, {"matmul_peak_flops": 50e12, "matmul_peak_bf16_flops": 400e12})
    {'mfu': 0.4, 'mfu_of_bf16_peak': 0.05}
    """
    bf16 = peak_info.get("matmul_peak_bf16_flops")
    return {"mfu": achieved_flops / peak_info["matmul_peak_flops"],
            "mfu_of_bf16_peak": achieved_flops / bf16 if bf16 else None}
