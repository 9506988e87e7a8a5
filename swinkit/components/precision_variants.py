"""The thesis step's precision variants side by side, for the GPU measurement table
(docs/precision.md, "Measured on a GPU"): the segmentor's forward+backward in each precision,
with its heads in NCHW and in channels_last, and the optimizer step grouped three ways.

All variants run in one fresh process, one after the other, rather than one process each as
:func:`swinkit.components.forward_backward.model_sweep` does: the table is read across its
rows, and on a GPU the model's import and the GEMM peaks are most of each process's time, so
one process keeps a variant's cost at its own seconds. Each variant builds its own model (a
channels_last model is not converted back), resets the GPU's peak memory (a CPU's RSS cannot
be reset, so there it is not reported) and sets its precision's TF32 switches itself.

The optimizer step is measured in fp32 only: the weights, their gradients and AdamW's state
are fp32 in every precision (docs/precision.md), so its time does not depend on the precision.
It is the step alone: the loop's ``zero_grad()`` sets the gradients to None, which costs
nothing, and zeroing them instead would charge per-parameter grouping one kernel per tensor
that training never runs. Which kernel torch actually ran is read off the ops one step
dispatches (``kernel_ran``), not off the settings asked for.

A variant that fails (out of memory, a kernel error) is recorded under ``failed`` with its
error and the others still run: on a short GPU lease one bad variant must not cost the table.
"""
from __future__ import annotations

import functools
import gc
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from swinkit.components.forward_backward import precision_skip_reason, row, training_ops
from swinkit.components.peaks import device_syncer, peak_flops
from swinkit.input_checks import check_int
from swinkit.measure.timing import timed
from swinkit.model.precision import cuda_capability

TABLE_PRECISIONS = ("fp32", "tf32", "bf16")   # what users train a ViT in on an H100/H200
# how the optimizer's parameters are grouped: as MMEngine's paramwise settings build it (one
# group per parameter, torch's default kernel), merged (one group per distinct hyperparameters)
# with the multi-tensor kernel, and merged with the fused kernel
GROUPINGS = ("per_parameter", "merged_foreach", "merged_fused")


def _peak_info(device: torch.device, math: str, cache: dict) -> dict:
    """forward_backward's peak fields for divisor ``math``, each GEMM peak measured once per
    process (on a GPU an 8192 GEMM per precision: seconds each, not per variant)."""
    for name in {math, "bf16"} if device.type == "cuda" else {math}:
        if name not in cache:
            cache[name] = peak_flops(device, name)
    return {"matmul_peak_flops": cache[math], "matmul_peak_math": math,
            "matmul_peak_bf16_flops": cache.get("bf16") if device.type == "cuda" else None}


def _forward_backward(preset: str, batch: int, precision: str, channels_last: bool,
                      samples: int, device: torch.device, peak_cache: dict) -> dict:
    from swinkit.config import load_config
    from swinkit.model.precision import tf32_flags, training_precision
    from swinkit.model.remedies import heads_are_channels_last
    from swinkit.model.segmentor import build_segmentor

    left = _free(device)   # what the variants before this one left allocated (0 if freed)
    cfg = load_config(preset, overrides={"precision": precision,
                                         "channels_last_heads": channels_last},
                      device=device.type)
    amp = training_precision(cfg.precision, device, cudnn_benchmark=cfg.cudnn_benchmark,
                             capability=cuda_capability(device))
    torch.manual_seed(0)
    model = build_segmentor(cfg).to(device)
    peak_info = _peak_info(device, amp.plan.measured, peak_cache)
    step = training_ops(model, "segmentor", batch, tuple(cfg.crop_size), device,
                        amp)["forward_backward"]
    if device.type == "cuda":   # the step's peak: with the model, without the peak GEMMs
        torch.cuda.reset_peak_memory_stats(device)
    with FlopCounterMode(display=False) as counter:
        step()
    times = timed(step, samples, warmup=1, sync=device_syncer(device))
    return {"precision": precision, "channels_last_heads": channels_last,
            "label": amp.plan.label, "note": amp.plan.note,
            "heads_are_channels_last": heads_are_channels_last(model),
            # the switches as the timed steps ran under them, read after the last one
            "tf32_after": tf32_flags(),
            "peak_memory_mib": (torch.cuda.max_memory_allocated(device) / 2**20
                                if device.type == "cuda" else None),
            "allocated_before_mib": left, **peak_info,
            **row(times, counter.get_total_flops(), peak_info)}   # seconds, FLOPs, MFU


def _free(device: torch.device) -> float | None:
    """Collect what earlier variants left (the segmentor holds reference cycles, so leaving
    its function does not free it) and return it to the GPU; returns the MiB still allocated
    after that, None on a CPU."""
    gc.collect()
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    return torch.cuda.memory_allocated(device) / 2**20


class _OpNames(TorchDispatchMode):
    """The aten ops dispatched while it is entered (which optimizer kernel ran)."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.__name__.split(".")[0])
        return func(*args, **(kwargs or {}))


def kernel_ran(op_names: set[str]) -> str:
    """Which AdamW kernel the ops of one step show.

    >>> kernel_ran({"_fused_adamw_"}), kernel_ran({"_foreach_mul_", "_foreach_add_"})
    ('fused', 'foreach')
    >>> kernel_ran({"mul_", "addcdiv_", "sqrt"}), kernel_ran({"_foreach_add_", "_fused_adamw_"})
    ('per tensor', 'fused')
    """
    if any(name.startswith("_fused_adam") for name in op_names):
        return "fused"
    if any(name.startswith("_foreach_") for name in op_names):
        return "foreach"
    return "per tensor"


def _optimizer_steps(preset: str, batch: int, samples: int, device: torch.device) -> dict:
    """{grouping: {groups, kernel asked, kernel_ran, seconds}}: AdamW's step over the same
    model's gradients, as MMEngine builds it and merged two ways (swinkit.model.remedies)."""
    from swinkit.config import load_config
    from swinkit.model.precision import training_precision
    from swinkit.model.remedies import merged_optimizer
    from swinkit.model.segmentor import build_optimizer, build_segmentor

    _free(device)   # a variant that failed may have left its model
    cfg = load_config(preset, overrides={"precision": "fp32"}, device=device.type)
    amp = training_precision("fp32", device)
    torch.manual_seed(0)
    model = build_segmentor(cfg).to(device)
    training_ops(model, "segmentor", batch, tuple(cfg.crop_size), device, amp)  # gradients exist
    out = {}
    for grouping in GROUPINGS:
        optim = build_optimizer(cfg, model)[0].optimizer   # fresh: no state, as merging needs
        if grouping != "per_parameter":
            optim = merged_optimizer(optim, fused=grouping == "merged_fused")
        group = optim.param_groups[0]
        asked = ("fused" if group.get("fused") else "foreach" if group.get("foreach")
                 else "torch's default")
        optim.step()   # AdamW's state is made on the first step: not timed, not watched
        with _OpNames() as ops:
            optim.step()
        out[grouping] = {"groups": len(optim.param_groups), "kernel": asked,
                         "kernel_ran": kernel_ran(ops.names),
                         "seconds": timed(optim.step, samples, sync=device_syncer(device))}
    return out


def empty_result(preset: str, batch: int, samples: int, device: torch.device) -> dict:
    """The variants' result before any has run: where and how they are measured, and every
    key a reader looks up (so a result cut short anywhere reads as a whole one)."""
    return {"preset": preset, "batch": batch, "samples": samples, "device": str(device),
            "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                            else "cpu"), "torch": torch.__version__,
            "forward_backward": [], "optimizer": {}, "skipped": {}, "failed": {},
            "peaks_flops": {}}


def measure_variants(preset: str, batch: int, samples: int = 5,
                     precisions=TABLE_PRECISIONS, progress=print, checkpoint=None) -> dict:
    """Run in a fresh process (:func:`measure_variants_isolated`): every (precision, heads
    layout) forward+backward of the segmentor at ``batch`` images, and the optimizer grouped
    :data:`GROUPINGS` ways. A precision this device cannot measure as itself is in
    ``skipped`` with the reason (:func:`precision_skip_reason`), not measured as another.
    ``checkpoint(out)`` is called after every variant, with what is measured so far."""
    checkpoint = checkpoint or (lambda out: None)
    check_int("batch", batch, minimum=2)   # UPerHead's pooled branch: BN over >= 2 values
    check_int("samples", samples, minimum=1)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)   # one CPU 'rank', as forward_backward.measure
    out = empty_result(preset, batch, samples, device)   # a checkpoint is a whole result
    for precision in precisions:
        if reason := precision_skip_reason(precision, device.type,
                                           cuda_capability=cuda_capability(device)):
            out["skipped"][precision] = reason
            continue
        for channels_last in (False, True):
            name = f"{precision}, heads {'channels_last' if channels_last else 'NCHW'}"
            progress(f"  forward+backward: {name}")
            try:
                out["forward_backward"].append(_forward_backward(
                    preset, batch, precision, channels_last, samples, device,
                    out["peaks_flops"]))
            except (RuntimeError, ValueError) as exc:   # torch's OOM is a RuntimeError
                out["failed"][f"forward+backward {name}"] = f"{type(exc).__name__}: {exc}"[:500]
                progress(f"    failed: {out['failed'][f'forward+backward {name}']}")
            checkpoint(out)
    progress("  AdamW step, grouped three ways")
    try:
        out["optimizer"] = _optimizer_steps(preset, batch, samples, device)
    except (RuntimeError, ValueError) as exc:
        out["optimizer"] = {}
        out["failed"]["AdamW step"] = f"{type(exc).__name__}: {exc}"[:500]
    checkpoint(out)
    return out


def measure_variants_isolated(preset: str, batch: int, samples: int = 5,
                              precisions=TABLE_PRECISIONS, timeout_s: float = 1800,
                              keep_at: Path | None = None) -> dict:
    """:func:`measure_variants` in a fresh interpreter (its own peak memory, its own TF32
    switches); its progress lines come through on stdout as it goes. The process writes its
    results after every variant, so one that dies (a hard crash, the OOM killer) or runs past
    ``timeout_s`` still gives the variants it finished, with ``failed["process"]`` saying why
    the rest are missing; RuntimeError only where it finished none. ``keep_at``: where that
    file is written and left (else a temporary folder), so that the variants finished survive
    a caller killed too."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(keep_at) if keep_at else Path(tmp) / "result.json"
        out.unlink(missing_ok=True)   # an earlier run's would pass for this one's
        cmd = [sys.executable, "-m", __name__, preset, str(batch), str(samples), str(out),
               ",".join(precisions)]
        try:
            proc = subprocess.run(cmd, stderr=subprocess.PIPE, text=True, timeout=timeout_s)
            why = (None if proc.returncode == 0 else
                   f"exit {proc.returncode}: {proc.stderr[-1500:]}")
        except subprocess.TimeoutExpired as exc:   # run() has killed it
            said = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (
                exc.stderr or "")
            why = f"timed out after {timeout_s:g} s" + (f": {said[-1500:]}" if said else "")
        if why is None:
            return json.loads(out.read_text())
        if not out.is_file():
            raise RuntimeError(f"precision variants of preset {preset} at batch {batch} failed "
                               f"before any variant finished ({why})")
        partial = json.loads(out.read_text())
        partial["failed"]["process"] = f"the variants' process stopped: {why}"[:2000]
        return partial


def _main(argv: list[str]) -> None:
    from swinkit.result_files import write_json_atomic
    preset, batch, samples, out, precisions = argv[:5]
    write_json_atomic(out, measure_variants(
        preset, int(batch), int(samples), tuple(precisions.split(",")),
        progress=functools.partial(print, flush=True),
        checkpoint=lambda partial: write_json_atomic(out, partial)))


if __name__ == "__main__":
    _main(sys.argv[1:6])
