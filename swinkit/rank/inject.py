"""Known costs injected into one component: the ground truth attribution is checked against.

What each injection stands for and its spec: :mod:`swinkit.injection`, whose table
(:data:`~swinkit.injection.KINDS`) says what each kind's hook goes into. Here are the hooks
(:data:`HOOKS`, one per kind), which put them into a rank (:func:`install`): each behaves like
the real thing, on CPU and GPU alike.

Off by default and nothing is inserted unless a value is positive (``comm_scale`` above 1).

What was injected is measured, not assumed. A sleep kernel counts SM clock cycles and is
calibrated against CUDA events before the run, but under training load the SM clock moves
(boost, power and thermal limits), so the delay a kernel gives differs from the one asked for.
Every injected compute spin or sleep and every comm delay is timed where it runs (CUDA events
around the sleep kernel; the host clock around a CPU spin or launcher wait), and the delay
objects hand the measured seconds back per iteration (:meth:`MeasuredDelay.take_measured`): the
ground truth to hold attribution against.
"""
from __future__ import annotations

import time

from mmcv.transforms import BaseTransform
from mmseg.registry import TRANSFORMS

from swinkit.injection import KINDS, Injection
from swinkit.rank.delays import GATE, CudaSleep, HostSpin, MeasuredDelay
from swinkit.rank.inject_comm import CudaDelayedLaunch, ScaledLaunch, ThreadDelayedLaunch


# ---------------------------------------------------------------- data

@TRANSFORMS.register_module(force=True)
class InjectDelay(BaseTransform):
    """Sleep ``ms`` per sample (a slower disk or decoder: waiting on I/O frees the core)."""

    def __init__(self, ms: float):
        self.seconds = ms / 1e3

    def transform(self, results: dict) -> dict:
        if GATE.on:
            time.sleep(self.seconds)
        return results


def add_data_delay(cfg, injection: Injection, rank: int, cuda: bool = False) -> None:
    """A sleep of ``data_ms`` per sample at the end of the config's training pipeline (the
    loader workers build their own copy of it). Nothing to measure: a sleep is what it asks."""
    if injection.data_ms > 0 and injection.applies_to(rank):
        cfg.train_dataset.pipeline.append(dict(type="InjectDelay", ms=injection.data_ms))


# ---------------------------------------------------------------- compute: forward, backward, step


class OccupyDelay(MeasuredDelay):
    """Occupies the compute device with ``occupy`` (a spin or a sleep kernel, which measures
    itself) on injected iterations; subclasses are the hooks that call :meth:`fire`."""

    def __init__(self, occupy: HostSpin | CudaSleep):
        self.occupy = occupy
        self.meter = occupy.meter

    def fire(self) -> None:
        if GATE.on:
            self.occupy()


class ComputeDelay(OccupyDelay):
    """A forward pre-hook that occupies the device on injected iterations."""

    def __call__(self, module, args) -> None:
        # Must return None: a forward pre-hook's return value replaces the module's inputs.
        self.fire()


class BackwardDelay(OccupyDelay):
    """A forward hook that hooks its module's output gradient: when backward reaches it, the
    device is occupied there, on the autograd thread (CPU) or the autograd stream (GPU: the
    engine makes the forward op's stream current while it runs the hook)."""

    def __call__(self, module, args, output) -> None:
        # Must return None: a forward hook's return value replaces the module's output.
        tensor = _first_grad_tensor(output)
        if tensor is not None:
            tensor.register_hook(self.on_grad)

    def on_grad(self, grad) -> None:
        # Must return None: a tensor hook's return value replaces the gradient.
        self.fire()


class OptimizerDelay(OccupyDelay):
    """A torch optimizer step pre-hook that occupies the device before every step."""

    def __call__(self, optimizer, args, kwargs) -> None:
        # Must return None: a step pre-hook's return value replaces the step's arguments.
        self.fire()


def _occupier(ms: float, cuda: bool) -> HostSpin | CudaSleep:
    return CudaSleep(ms / 1e3) if cuda else HostSpin(ms / 1e3)


def _first_grad_tensor(output):
    """The first tensor in a module's output that backward will reach (a SwinV2 stage returns
    its output tokens first, then sizes and the merged input of the next stage)."""
    import torch
    items = output if isinstance(output, (tuple, list)) else (output,)
    return next((t for t in items if isinstance(t, torch.Tensor) and t.requires_grad), None)


def middle_module(backbone):
    """Where a backward injection fires: the middle stage of a backbone with ``stages`` (the
    gradients of the head and of the stages after it are ready before it, the earlier stages'
    after), else the backbone itself."""
    stages = getattr(backbone, "stages", None)
    return stages[len(stages) // 2] if stages else backbone


def add_compute_delay(model, injection: Injection, rank: int, cuda: bool) -> ComputeDelay | None:
    """A forward pre-hook on the backbone that occupies the device for ``compute_ms``; returns
    it (to read what it injected), or None where this rank has no compute injection."""
    if not (injection.compute_ms > 0 and injection.applies_to(rank)):
        return None
    delay = ComputeDelay(_occupier(injection.compute_ms, cuda))
    model.backbone.register_forward_pre_hook(delay)
    return delay


def add_backward_delay(model, injection: Injection, rank: int, cuda: bool) -> BackwardDelay | None:
    """A hook on the gradient of the backbone's middle stage output that occupies the device
    for ``backward_ms`` inside backward; returns it, or None where this rank has none."""
    if not (injection.backward_ms > 0 and injection.applies_to(rank)):
        return None
    delay = BackwardDelay(_occupier(injection.backward_ms, cuda))
    middle_module(model.backbone).register_forward_hook(delay)
    return delay


def add_optimizer_delay(optim, injection: Injection, rank: int,
                        cuda: bool) -> OptimizerDelay | None:
    """A step pre-hook that occupies the device for ``optimizer_ms`` before every optimizer
    step (``optim``: a torch optimizer or MMEngine's wrapper of one); returns it, or None
    where this rank has none."""
    if not (injection.optimizer_ms > 0 and injection.applies_to(rank)):
        return None
    delay = OptimizerDelay(_occupier(injection.optimizer_ms, cuda))
    getattr(optim, "optimizer", optim).register_step_pre_hook(delay)
    return delay


# ---------------------------------------------------------------- communication

def add_comm_delay(_, injection: Injection, rank: int, cuda: bool):
    """A launcher that starts each bucket's all-reduce ``comm_ms`` late (it measures what it
    delayed), or None where this rank has none. Goes into no object: the launcher is the
    DDP comm hook's (:func:`comm_launcher`)."""
    if injection.comm_ms > 0 and injection.applies_to(rank):
        return (CudaDelayedLaunch if cuda else ThreadDelayedLaunch)(injection.comm_ms / 1e3)
    return None


def comm_launcher(injection: Injection, rank: int, cuda: bool) -> tuple[object, dict]:
    """(the launcher the DDP comm hook uses on this rank (see swinkit.measure.ddp_hooks), or
    None for the plain one; the delays of it that measure themselves, by measured name): a
    slower link's (``comm_scale``, every rank's: a collective is as slow as its slowest
    link), else the ``launcher`` kinds' hook."""
    if injection.comm_scale > 1:
        return ScaledLaunch(injection.comm_scale), {}
    measured = install("launcher", None, injection, rank, cuda)
    return next(iter(measured.values()), None), measured


# ---------------------------------------------------------------- the hooks, by kind

# Each kind's hook (swinkit.injection.KINDS, one row per kind, says what it goes into): called
# as hook(target, injection, rank, cuda) with the object its row names; returns what measures
# the injected delay (a MeasuredDelay), or None. A kind added to the table needs its hook here.
HOOKS = {"data_ms": add_data_delay, "compute_ms": add_compute_delay,
         "backward_ms": add_backward_delay, "optimizer_ms": add_optimizer_delay,
         "comm_ms": add_comm_delay}


def install(into: str, target, injection: Injection, rank: int, cuda: bool) -> dict:
    """Every kind whose row goes ``into`` this object (``target``: the config, the model, the
    optimizer; None for the launcher), as ``rank`` receives it: what each hook returned that
    measures itself, by the kind's measured name (``compute``, ``backward``, ...)."""
    out = {}
    for kind in KINDS:
        if kind.into == into and getattr(injection, kind.name) > 0 and injection.applies_to(rank):
            got = HOOKS[kind.name](target, injection, rank, cuda)
            if got is not None:
                out[kind.measured] = got
    return out
