"""SwinV2 forward/backward in one process: backbone and whole segmentor, per preset and batch.

Each configuration runs in a fresh spawned process (so its peak RSS is its own) with the
project's thread policy (1 compute thread on CPU, as one CPU 'rank'). Ops per scope:
``forward``, ``forward_backward`` and ``optimizer`` (AdamW step + zero_grad). FLOPs come from
``torch.utils.flop_counter`` on one run of the op; achieved FLOP/s = FLOPs / median time; MFU is
that over a matmul peak measured in the same process (sgemm on CPU, bf16 GEMM on GPU).
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

from swinkit.measure.timing import timed

SCOPES = ("backbone", "segmentor")
OPS = ("forward", "forward_backward", "optimizer")


def matmul_peak_flops(device: torch.device, n: int = 1024, reps: int = 5) -> float:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    n = 8192 if device.type == "cuda" else n
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    best = min(timed(lambda: a @ b, reps, warmup=1, sync=_syncer(device)))
    return 2 * n ** 3 / best


def _syncer(device):
    """What drains the device before a clock read: None on CPU (work is synchronous)."""
    return torch.cuda.synchronize if device.type == "cuda" else None


def _ops(model, scope: str, batch: int, crop, device):
    """{op: callable} for the scope, on random inputs of the preset's crop."""
    from swinkit.workloads.allreduce import tiny_batch
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
    """Run in a fresh process: timings, FLOPs, MFU and peak memory of every (scope, op)."""
    from swinkit.config import load_config
    from swinkit.model.segmentor import build_segmentor

    torch.set_num_threads(threads)
    cfg = load_config(preset, device="cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(cfg.device)
    model = build_segmentor(cfg).to(device)
    peak = matmul_peak_flops(device)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"preset": preset, "batch": batch, "device": str(device), "threads": threads,
           "matmul_peak_flops": peak, "results": {}}
    for scope in SCOPES:
        for op, fn in _ops(model, scope, batch, tuple(cfg.crop_size), device).items():
            with FlopCounterMode(display=False) as counter:
                fn()  # also the first warm-up run: the allocator and caches are primed
            times = timed(fn, samples, warmup=warmup, sync=_syncer(device))
            flops = counter.get_total_flops()
            # Optimizer steps are elementwise: no matmul FLOPs, so no MFU (NaN, not 0).
            achieved = flops / statistics.median(times) if flops else float("nan")
            out["results"][f"{scope}/{op}"] = {"seconds": times, "flops": flops,
                                               "achieved_flops": achieved, "mfu": achieved / peak}
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
    from swinkit.workloads.sweep import Sweep

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
