"""SwinV2 forward/backward in one process: backbone and whole segmentor, per preset and batch.

Each configuration runs in a fresh spawned process (so its peak RSS is its own) with the
project's thread policy (1 compute thread on CPU, as one CPU 'rank'). Ops per scope:
``forward``, ``forward_backward`` and ``optimizer`` (AdamW step + zero_grad). FLOPs come from
``torch.utils.flop_counter`` on one run of the op; achieved FLOP/s = FLOPs / median time; MFU is
that over a matmul peak measured in the same process, in the model's own dtype and math mode
(:func:`peak_math`: fp32 sgemm on CPU; on GPU fp32 GEMM, or TF32 when
``torch.backends.cuda.matmul.allow_tf32`` lets the model's matmuls use it, as
:func:`tf32_flags` reads it). A bf16 peak, the
figure GPU spec sheets quote, is reported beside it on GPU but not divided by: a model that runs
fp32 cannot reach it, and dividing by it would make GPU MFU incomparable with CPU MFU.
"""
from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from swinkit.input_checks import check_int
from swinkit.measure.timing import timed

SCOPES = ("backbone", "segmentor")
OPS = ("forward", "forward_backward", "optimizer")


MATH_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def peak_math(device_type: str, model_dtype: torch.dtype,
              allow_tf32: bool) -> tuple[torch.dtype, str]:
    """The GEMM the model's matmuls run as, so MFU divides by a peak the model could reach:
    ``(dtype to time, name)``. An fp32 model on GPU runs its matmuls as TF32 only when
    ``allow_tf32`` (off by default); on CPU there is no TF32.

    >>> peak_math("cuda", torch.float32, False)
    (torch.float32, 'fp32')
    >>> peak_math("cuda", torch.float32, True)
    (torch.float32, 'tf32')
    """
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"device_type must be 'cpu' or 'cuda', got {device_type!r}")
    if model_dtype not in MATH_NAMES:
        raise ValueError(f"model_dtype must be one of {', '.join(map(str, MATH_NAMES))}; "
                         f"got {model_dtype}")
    if model_dtype == torch.float32 and device_type == "cuda" and allow_tf32:
        return torch.float32, "tf32"
    return model_dtype, MATH_NAMES[model_dtype]


def matmul_peak_flops(device: torch.device, dtype: torch.dtype = torch.float32, n: int = 1024,
                      reps: int = 5) -> float:
    """Best-of-``reps`` FLOP/s of an n x n GEMM in ``dtype`` under the process's math flags
    (so TF32 only if the model may use it). GPUs get n = 8192, large enough to fill them."""
    n = 8192 if device.type == "cuda" else n
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    best = min(timed(lambda: a @ b, reps, warmup=1, sync=_syncer(device)))
    return 2 * n ** 3 / best


def _tf32(*precisions: str) -> bool:
    """Whether TF32 is on, from the ``fp32_precision`` settings from the most specific to the
    global one: the first that is not ``"none"`` decides; all ``"none"`` means IEEE fp32."""
    for precision in precisions:
        if precision != "none":
            return precision == "tf32"
    return False


def tf32_flags() -> dict[str, bool]:
    """Whether fp32 matmuls (cuBLAS) and convolutions (cuDNN) may run as TF32. Read through
    ``fp32_precision``: since torch 2.9, reading the legacy ``allow_tf32`` raises once the new
    API has set the flag, and the new reader reports either API's setting."""
    b = torch.backends
    return {"matmul": _tf32(b.cuda.matmul.fp32_precision, b.fp32_precision),
            "cudnn_conv": _tf32(b.cudnn.conv.fp32_precision, b.cudnn.fp32_precision,
                                b.fp32_precision)}


def peaks(device: torch.device, model: torch.nn.Module) -> dict:
    """The peak MFU divides by (the model's dtype and math mode), the bf16 peak beside it on
    GPU, and the math flags they were measured under."""
    dtype = next(model.parameters()).dtype
    flags = tf32_flags()
    peak_dtype, math = peak_math(device.type, dtype, flags["matmul"])
    peak = matmul_peak_flops(device, peak_dtype)
    bf16 = None
    if device.type == "cuda":
        bf16 = peak if peak_dtype == torch.bfloat16 else matmul_peak_flops(device, torch.bfloat16)
    # UperNet's convolutions follow cuDNN's TF32 flag (on by default), not the matmul one:
    # recorded, since on GPU that part of the segmentor may run above the fp32 matmul peak
    return {"matmul_peak_flops": peak, "matmul_peak_math": math, "matmul_peak_bf16_flops": bf16,
            "math_flags": {"model_dtype": MATH_NAMES[dtype], "matmul_tf32": flags["matmul"],
                           "cudnn_conv_tf32": flags["cudnn_conv"]}}


def _syncer(device):
    """What drains the device before a clock read: None on CPU (work is synchronous)."""
    return torch.cuda.synchronize if device.type == "cuda" else None


def _ops(model, scope: str, batch: int, crop, device):
    """{op: callable} for the scope, on random inputs of the preset's crop."""
    from swinkit.components.allreduce import tiny_batch
    inputs, samples = tiny_batch(device, n=batch, size=crop[0])
    module = model.backbone if scope == "backbone" else model
    params = [p for p in module.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=1e-6)

    def forward():  # as in training: autograd records the graph (then it is dropped)
        return _loss(model, scope, inputs, samples).detach()

    def forward_backward():
        _loss(model, scope, inputs, samples).backward()

    def optimizer():
        optim.step()
        optim.zero_grad(set_to_none=False)

    forward_backward()  # gradients exist, so the optimizer has state to update
    return {"forward": forward, "forward_backward": forward_backward, "optimizer": optimizer}


def _loss(model, scope, inputs, samples):
    if scope == "backbone":
        return sum(o.float().mean() for o in model.backbone(inputs))
    return model.parse_losses(model(inputs, samples, mode="loss"))[0]


def measure(preset: str, batch: int, samples: int = 5, warmup: int = 1, threads: int = 1) -> dict:
    """Run in a fresh process: timings, FLOPs, MFU and peak memory of every (scope, op).

    ``batch`` must be at least 2: UPerHead's pooling pyramid averages each image to one pixel
    (pool scale 1) and batch-normalises it, which in training needs two values per channel.
    """
    from swinkit.config import load_config

    check_int("batch", batch, minimum=2)
    from swinkit.model.segmentor import build_segmentor

    torch.set_num_threads(threads)
    cfg = load_config(preset, device="cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(cfg.device)
    model = build_segmentor(cfg).to(device)
    peak_info = peaks(device, model)
    if device.type == "cuda":  # not the peak GEMM's matrices (8192 x 8192 x 3: 768 MiB fp32)
        torch.cuda.reset_peak_memory_stats(device)
    peak = peak_info["matmul_peak_flops"]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"preset": preset, "batch": batch, "device": str(device), "threads": threads,
           **peak_info, "results": {}}
    for scope in SCOPES:
        for op, fn in _ops(model, scope, batch, tuple(cfg.crop_size), device).items():
            with FlopCounterMode(display=False) as counter:
                fn()  # also the first warm-up run: the allocator and caches are primed
            times = timed(fn, samples, warmup=warmup, sync=_syncer(device))
            flops = counter.get_total_flops()
            # Optimizer steps are elementwise: no matmul FLOPs, so no MFU (NaN, not 0).
            achieved = flops / statistics.median(times) if flops else float("nan")
            bf16 = peak_info["matmul_peak_bf16_flops"]
            out["results"][f"{scope}/{op}"] = {
                "seconds": times, "flops": flops, "achieved_flops": achieved,
                "mfu": achieved / peak, "mfu_of_bf16_peak": achieved / bf16 if bf16 else None}
    if device.type == "cuda":
        out["peak_memory_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    else:  # ru_maxrss is in KiB on Linux; the growth over the model's own footprint
        out["peak_memory_mib"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    return out


def measure_isolated(preset: str, batch: int, samples: int = 5, timeout_s: float = 1800) -> dict:
    """:func:`measure` in a fresh interpreter (its own peak memory, no state shared). A plain
    subprocess rather than multiprocessing: spawn would re-import the caller's main module,
    which under asv is asv's own runner."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", __name__, preset, str(batch), str(samples), str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0:
            raise RuntimeError(f"forward/backward of preset {preset} at batch {batch} failed "
                               f"(exit {proc.returncode}): {proc.stderr[-2000:]}")
        return json.loads(out.read_text())


BATCHES = {"per_rank": 1, "double": 2}  # x images_per_rank; 1 image would break BN in the heads


def model_sweep(presets, batches=tuple(BATCHES), progress=print):
    """Sweep keyed by (preset, batch name); presets that need a GPU are skipped on CPU.

    Batches are multiples of the preset's images per rank: a single image cannot train the
    BatchNorm of UperNet's pooled 1x1 branch."""
    from swinkit.config import load_config
    from swinkit.runs.sweep import Sweep

    sweep = Sweep()
    for preset in presets:
        cfg = load_config(preset)
        for name in batches:
            if cfg.device == "cuda" and not torch.cuda.is_available():
                sweep.skipped[(preset, name)] = f"preset {preset} runs on a GPU; none here"
                continue
            batch = cfg.images_per_rank * BATCHES[name]
            progress(f"  forward/backward: preset {preset}, batch {batch}")
            sweep.run((preset, name), lambda: measure_isolated(preset, batch), progress)
    return sweep


if __name__ == "__main__":
    _preset, _batch, _samples, _out = sys.argv[1:5]
    Path(_out).write_text(json.dumps(measure(_preset, int(_batch), samples=int(_samples))))
