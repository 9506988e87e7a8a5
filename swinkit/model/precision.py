"""A precision (:mod:`swinkit.precision`) applied inside a training process: the TF32 and
cuDNN switches, autocast around forward and loss, and loss scaling, behind one interface so
that a training loop reads the same in every precision::

    amp = training_precision(cfg.precision, device, cudnn_benchmark=cfg.cudnn_benchmark)
    with amp.autocast():
        loss = model.parse_losses(model(**data, mode="loss"))[0]
    amp.scaling.backward(loss)
    amp.scaling.step(optimizer)     # GradScaler's unscale, inf check, step (fp16); else a step
    amp.scaling.update()
    optimizer.zero_grad()

torch.autocast and torch.amp.GradScaler are used directly, not MMEngine's AmpOptimWrapper,
the natural path for MMSeg users: AmpOptimWrapper (mmengine 0.10.7) asserts at construction
that a CUDA, NPU, MLU or MUSA device is available, so it cannot run swinkit's CPU loop, and it
scales the loss with a GradScaler in bf16 too, where nothing needs it. The autocast context
and the scaler below are the same torch objects AmpOptimWrapper drives.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from swinkit.precision import PrecisionPlan, check_precision


def _tf32(*precisions: str) -> bool:
    """Whether TF32 is on, from the ``fp32_precision`` settings from the most specific to the
    global one: the first that is not ``"none"`` decides; all ``"none"`` means IEEE fp32."""
    for precision in precisions:
        if precision != "none":
            return precision == "tf32"
    return False


def new_tf32_api(backends=None) -> bool:
    """Whether torch has the ``fp32_precision`` switches (torch 2.9 and newer)."""
    backends = backends or torch.backends
    return hasattr(backends.cuda.matmul, "fp32_precision")


def tf32_flags(backends=None) -> dict[str, bool]:
    """Whether fp32 matmuls (cuBLAS) and convolutions (cuDNN) may run as TF32.

    Read through ``fp32_precision`` where torch has it: since torch 2.9, reading the legacy
    ``allow_tf32`` raises once the new API has set the flag, and the new reader reports either
    API's setting. Older torch (2.5-2.8) has only ``allow_tf32``.

    Args:
        backends: ``torch.backends`` (default), or a stand-in for tests.
    """
    b = backends or torch.backends
    if not new_tf32_api(b):
        return {"matmul": bool(b.cuda.matmul.allow_tf32), "cudnn_conv": bool(b.cudnn.allow_tf32)}
    return {"matmul": _tf32(b.cuda.matmul.fp32_precision, b.fp32_precision),
            "cudnn_conv": _tf32(b.cudnn.conv.fp32_precision, b.cudnn.fp32_precision,
                                b.fp32_precision)}


def _switch_state(b) -> dict[str, Any]:
    if new_tf32_api(b):
        return {"matmul": b.cuda.matmul.fp32_precision, "conv": b.cudnn.conv.fp32_precision,
                "benchmark": b.cudnn.benchmark}
    return {"matmul": b.cuda.matmul.allow_tf32, "conv": b.cudnn.allow_tf32,
            "benchmark": b.cudnn.benchmark}


def _set_switch_state(b, state: dict[str, Any]) -> None:
    if new_tf32_api(b):
        b.cuda.matmul.fp32_precision, b.cudnn.conv.fp32_precision = state["matmul"], state["conv"]
    else:
        b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32 = state["matmul"], state["conv"]
    b.cudnn.benchmark = state["benchmark"]


def set_math_switches(tf32: bool, cudnn_benchmark: bool = False,
                      backends=None) -> dict[str, Any]:
    """Switch TF32 on or off for fp32 matmuls and cuDNN convolutions, and cuDNN's autotuner
    (``cudnn.benchmark``), for the whole process; returns the switches as they were.

    Uses ``fp32_precision`` (``"tf32"`` / ``"ieee"``) where torch has it, the legacy
    ``allow_tf32`` flags otherwise: one API only, since torch 2.9 refuses to read a flag that
    the two set differently. Harmless on CPU (the flags are read by cuBLAS and cuDNN only).

    Args:
        backends: ``torch.backends`` (default), or a stand-in for tests.
    """
    b = backends or torch.backends
    before = _switch_state(b)
    if new_tf32_api(b):
        mode = "tf32" if tf32 else "ieee"
        _set_switch_state(b, {"matmul": mode, "conv": mode, "benchmark": cudnn_benchmark})
    else:
        _set_switch_state(b, {"matmul": tf32, "conv": tf32, "benchmark": cudnn_benchmark})
    return before


@contextlib.contextmanager
def math_switches(tf32: bool, cudnn_benchmark: bool = False, backends=None):
    """:func:`set_math_switches` for a block, then the switches as they were."""
    b = backends or torch.backends
    before = set_math_switches(tf32, cudnn_benchmark, b)
    try:
        yield
    finally:
        _set_switch_state(b, before)


class NoLossScaling:
    """The step of every precision but fp16: a plain backward and optimizer step (the null
    twin of :class:`LossScaling`, so that a loop has no branch on the precision)."""
    scaled = False

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self, optimizer) -> None:
        optimizer.step()

    def update(self) -> None:
        pass


class LossScaling:
    """fp16's step: the loss scaled before backward (so that small gradients stay above fp16's
    smallest number), the gradients unscaled and checked for inf/NaN before the optimizer
    steps (a step with any is skipped), the scale adapted after (torch.amp.GradScaler).

    ``optimizer`` may be a torch optimizer or MMEngine's OptimWrapper (GradScaler reads its
    ``param_groups`` and calls its ``step``).
    """
    scaled = True

    def __init__(self, device_type: str, **grad_scaler_kwargs):
        self.scaler = torch.amp.GradScaler(device_type, **grad_scaler_kwargs)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def step(self, optimizer) -> None:
        self.scaler.step(optimizer)

    def update(self) -> None:
        self.scaler.update()


@dataclass
class TrainingPrecision:
    """A precision as one training process applies it (:func:`training_precision`).

    Attributes:
        plan: what is measured and how outputs label it.
        device_type: where autocast acts (``cpu`` or ``cuda``).
        scaling: :class:`LossScaling` (fp16) or :class:`NoLossScaling`.
        switches: the TF32 and cuDNN switches after they were set (:func:`tf32_flags`).
    """
    plan: PrecisionPlan
    device_type: str
    scaling: NoLossScaling | LossScaling
    switches: dict

    @property
    def dtype(self) -> torch.dtype | None:
        """The autocast dtype, or None (no autocast)."""
        name = self.plan.precision.autocast
        return getattr(torch, name) if name else None

    def autocast(self):
        """The context for forward and loss: torch.autocast in the precision's dtype on this
        device, or nothing (fp32, tf32)."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def to_dict(self) -> dict:
        return {**self.plan.to_dict(), "math_flags": dict(self.switches)}


class AutocastForward(torch.nn.Module):
    """``module`` with its forward run under ``amp``'s autocast in whichever thread runs it.

    For DataParallel: it runs each replica's forward in a thread of its own, and autocast is
    per thread; torch's ``parallel_apply`` re-enters autocast there as enabled or not, but
    without the caller's dtype (torch 2.13), so a caller's bf16 autocast reaches the replicas
    as CUDA's default, fp16. Wrapped, each replica enters the precision's own autocast.
    """

    def __init__(self, module: torch.nn.Module, amp: "TrainingPrecision"):
        super().__init__()
        self.module = module
        self.amp = amp

    def forward(self, *args, **kwargs):
        with self.amp.autocast():
            return self.module(*args, **kwargs)


def cuda_capability(device: torch.device) -> tuple[int, int] | None:
    """The compute capability of a CUDA device; None for a CPU."""
    return torch.cuda.get_device_capability(device) if device.type == "cuda" else None


def training_precision(name: str, device: torch.device, cudnn_benchmark: bool = False,
                       capability: tuple[int, int] | None = None,
                       bf16_native: bool | None = None) -> TrainingPrecision:
    """Check precision ``name`` for ``device``, set this process's TF32 and cuDNN switches
    for it, and return what the loop needs (autocast context, loss scaling, labels).

    Args:
        capability: the GPU's compute capability (default: asked of ``device``); a seam.
        bf16_native: whether the CPU has bf16 instructions (default: read /proc/cpuinfo).
    """
    if capability is None:
        capability = cuda_capability(device)
    plan = check_precision(name, device.type, bf16_native, cuda_capability=capability)
    set_math_switches(plan.precision.tf32, cudnn_benchmark)
    scaling = (LossScaling(device.type) if plan.precision.loss_scaling else NoLossScaling())
    switches = {**tf32_flags(), "cudnn_benchmark": bool(torch.backends.cudnn.benchmark)}
    return TrainingPrecision(plan, device.type, scaling, switches)
