"""SwinV2 forward/backward in one process: backbone and whole segmentor, per preset, batch and
precision.

Each configuration runs in a fresh spawned process (so its peak RSS is its own) with the
project's thread policy (1 compute thread on CPU, as one CPU 'rank'). Ops per scope:
``forward``, ``forward_backward`` and ``optimizer`` (AdamW step + zero_grad), in the training
precision (:mod:`swinkit.model.precision`: autocast around forward and loss, fp16's loss
scaling in backward and step, TF32 switched as the precision says). FLOPs come from
``torch.utils.flop_counter`` on one run of the op; achieved FLOP/s = FLOPs / median time; MFU is
that over the GEMM peak of the precision actually used, measured in the same process
(:mod:`swinkit.components.peaks`; its name in ``matmul_peak_math``): bf16 autocast against the
bf16 peak, tf32 against TF32's on GPU (fp32's on CPU, where tf32 is a no-op and labelled so).
The bf16 peak, the figure GPU spec sheets quote, is reported beside it on GPU.
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

from swinkit.components.peaks import device_syncer, mfu, peaks
from swinkit.input_checks import check_int
from swinkit.measure.timing import timed
from swinkit.model.precision import TrainingPrecision, cuda_capability, training_precision
from swinkit.precision import DEFAULT as DEFAULT_PRECISION, check_precision

SCOPES = ("backbone", "segmentor")
OPS = ("forward", "forward_backward", "optimizer")


def training_ops(model, scope: str, batch: int, crop, device, amp: TrainingPrecision):
    """{op: callable} for the scope, on random inputs of the preset's crop, in ``amp``'s
    precision (autocast around forward and loss; fp16's scaler in backward and step)."""
    from swinkit.components.allreduce import tiny_batch
    inputs, samples = tiny_batch(device, n=batch, size=crop[0])
    module = model.backbone if scope == "backbone" else model
    params = [p for p in module.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=1e-6)

    def forward():  # as in training: autograd records the graph (then it is dropped)
        with amp.autocast():
            return _loss(model, scope, inputs, samples).detach()

    def forward_backward():
        with amp.autocast():
            loss = _loss(model, scope, inputs, samples)
        amp.scaling.backward(loss)

    def optimizer():
        amp.scaling.step(optim)
        amp.scaling.update()
        optim.zero_grad(set_to_none=False)

    forward_backward()  # gradients exist, so the optimizer has state to update
    return {"forward": forward, "forward_backward": forward_backward, "optimizer": optimizer}


def _loss(model, scope, inputs, samples):
    if scope == "backbone":
        return sum(o.float().mean() for o in model.backbone(inputs))
    return model.parse_losses(model(inputs, samples, mode="loss"))[0]


def row(times: list[float], flops: float, peak_info: dict) -> dict:
    """One op's result: its times, FLOPs, achieved FLOP/s (FLOPs / median time) and MFU
    against ``peak_info``'s divisor (:func:`swinkit.components.peaks.mfu`)."""
    # Optimizer steps are elementwise: no matmul FLOPs, so no MFU (NaN, not 0).
    achieved = flops / statistics.median(times) if flops else float("nan")
    return {"seconds": times, "flops": flops, "achieved_flops": achieved,
            **mfu(achieved, peak_info)}


def measure(preset: str, batch: int, samples: int = 5, warmup: int = 1, threads: int = 1,
            precision: str | None = None) -> dict:
    """Run in a fresh process: timings, FLOPs, MFU and peak memory of every (scope, op).

    ``batch`` must be at least 2: UPerHead's pooling pyramid averages each image to one pixel
    (pool scale 1) and batch-normalises it, which in training needs two values per channel.
    ``precision`` (default: the preset's) is checked before the model is built: fp16 on CPU is
    refused, tf32 on CPU is measured as fp32 and labelled so (``out["precision"]``).
    """
    from swinkit.config import load_config

    check_int("batch", batch, minimum=2)
    from swinkit.model.segmentor import build_segmentor

    torch.set_num_threads(threads)
    overrides = {"precision": precision} if precision is not None else None
    cfg = load_config(preset, overrides=overrides,
                      device="cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(cfg.device)
    amp = training_precision(cfg.precision, device, cudnn_benchmark=cfg.cudnn_benchmark)
    model = build_segmentor(cfg).to(device)
    peak_info = peaks(device, amp.plan)
    if device.type == "cuda":  # not the peak GEMM's matrices (8192 x 8192 x 3: 768 MiB fp32)
        torch.cuda.reset_peak_memory_stats(device)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"preset": preset, "batch": batch, "device": str(device), "threads": threads,
           "precision": amp.to_dict(), **peak_info, "results": {}}
    for scope in SCOPES:
        for op, fn in training_ops(model, scope, batch, tuple(cfg.crop_size), device, amp).items():
            with FlopCounterMode(display=False) as counter:
                fn()  # also the first warm-up run: the allocator and caches are primed
            times = timed(fn, samples, warmup=warmup, sync=device_syncer(device))
            out["results"][f"{scope}/{op}"] = row(times, counter.get_total_flops(), peak_info)
    if device.type == "cuda":
        out["peak_memory_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    else:  # ru_maxrss is in KiB on Linux; the growth over the model's own footprint
        out["peak_memory_mib"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    return out


def measure_isolated(preset: str, batch: int, samples: int = 5, timeout_s: float = 1800,
                     precision: str | None = None) -> dict:
    """:func:`measure` in a fresh interpreter (its own peak memory, no state shared). A plain
    subprocess rather than multiprocessing: spawn would re-import the caller's main module,
    which under asv is asv's own runner."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", __name__, preset, str(batch), str(samples), str(out),
               precision or ""]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0:
            raise RuntimeError(f"forward/backward of preset {preset} at batch {batch} "
                               f"in {precision or 'the preset precision'} failed "
                               f"(exit {proc.returncode}): {proc.stderr[-2000:]}")
        return json.loads(out.read_text())


BATCHES = {"per_rank": 1, "double": 2}  # x images_per_rank; 1 image would break BN in the heads


def precision_skip_reason(precision: str, device_type: str, bf16_native: bool | None = None,
                          cuda_capability: tuple[int, int] | None = None) -> str | None:
    """Why a sweep leaves ``precision`` out on this device (None: it measures it): fp16 on CPU
    is refused, tf32 on CPU would be fp32 again, bf16 on a CPU without bf16 instructions
    would be slow and stand for no hardware that trains in it; on a GPU before Ampere
    (``cuda_capability`` below 8.0) tf32 and bf16 likewise."""
    try:
        plan = check_precision(precision, device_type, bf16_native,
                               cuda_capability=cuda_capability)
    except ValueError as exc:
        return str(exc)
    return f"not measured here: {plan.note}" if plan.note else None


def model_sweep(presets, batches=tuple(BATCHES), progress=print,
                precisions=(DEFAULT_PRECISION,), every_batch: bool = False):
    """Sweep keyed by (preset, batch name, precision); presets that need a GPU are skipped on
    CPU, and precisions that cannot be measured as themselves here (:func:`precision_skip_reason`).

    Batches are multiples of the preset's images per rank: a single image cannot train the
    BatchNorm of UperNet's pooled 1x1 branch. The first precision is measured at every batch,
    the others at the first batch only unless ``every_batch`` (each is a process of its own:
    about 30 s of the ``cpu`` preset on 2 cores)."""
    from swinkit.config import load_config
    from swinkit.runs.sweep import Sweep

    sweep = Sweep()
    here = "cuda" if torch.cuda.is_available() else "cpu"
    capability = cuda_capability(torch.device(here))
    for preset in presets:
        cfg = load_config(preset)
        for name in batches:
            for precision in precisions:
                key = (preset, name, precision)
                if cfg.device == "cuda" and here != "cuda":
                    sweep.skipped[key] = f"preset {preset} runs on a GPU; none here"
                    continue
                if reason := precision_skip_reason(precision, here,
                                                   cuda_capability=capability):
                    sweep.skipped[key] = reason
                    continue
                if not every_batch and precision != precisions[0] and name != batches[0]:
                    sweep.skipped[key] = (f"{precision} is measured at batch {batches[0]} only "
                                          "(SWINKIT_MODEL=all: at every batch)")
                    continue
                batch = cfg.images_per_rank * BATCHES[name]
                progress(f"  forward/backward: preset {preset}, batch {batch}, {precision}")
                sweep.run(key, lambda: measure_isolated(preset, batch, precision=precision),
                          progress)
    return sweep


if __name__ == "__main__":
    _preset, _batch, _samples, _out, _precision = (sys.argv[1:6] + [""])[:5]
    Path(_out).write_text(json.dumps(measure(_preset, int(_batch), samples=int(_samples),
                                             precision=_precision or None)))
