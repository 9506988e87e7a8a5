"""Known costs injected into one component: the ground truth attribution is checked against.

What each injection stands for and its spec: :mod:`swinkit.injection`. Here they are put into a
rank: each behaves like the real thing, on CPU and GPU alike.

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

import queue
import threading
import time

from mmcv.transforms import BaseTransform
from mmseg.registry import TRANSFORMS

from swinkit.injection import Injection
from swinkit.measure.contention import SIDE_STREAMS, SideStreams
from swinkit.rank.delays import GATE, CudaSleep, DelayMeter, HostSpin, MeasuredDelay


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


def add_data_delay(cfg, injection: Injection, rank: int) -> None:
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

def comm_launcher(injection: Injection, rank: int, cuda: bool):
    """The launcher the DDP comm hook uses on this rank (see swinkit.measure.ddp_hooks), or None
    for the plain one."""
    if injection.comm_scale > 1:  # every rank: a collective is as slow as its slowest link
        return ScaledLaunch(injection.comm_scale)
    if not injection.applies_to(rank):
        return None
    if injection.comm_ms > 0:
        return (CudaDelayedLaunch if cuda else ThreadDelayedLaunch)(injection.comm_ms / 1e3)
    return None


class ThreadDelayedLaunch(MeasuredDelay):
    """CPU: each bucket's all-reduce is launched ``delay_s`` after it is ready, by one FIFO
    thread per rank (so every rank launches its collectives in the same order), never by the
    autograd thread, which goes on computing. Measured: from ready to launch, host clock."""

    def __init__(self, delay_s: float):
        self.delay_s = delay_s
        self.meter = DelayMeter()
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="swinkit-delayed-launch", daemon=True)
        self.thread.start()

    def __call__(self, bucket, group, record, clock):
        import torch
        tensor = bucket.buffer()
        tensor.div_(group.size())
        out = torch.futures.Future()
        delay = self.delay_s if GATE.on else 0.0
        ready = time.perf_counter()
        self.jobs.put((ready, delay, GATE.iteration, tensor, group, record, clock, out))
        return out

    def _run(self) -> None:
        import torch.distributed as dist
        while True:
            ready, delay, iteration, tensor, group, record, clock, out = self.jobs.get()
            time.sleep(max(ready + delay - time.perf_counter(), 0.0))
            if delay > 0:
                self.meter.add_seconds(iteration, time.perf_counter() - ready)
            record.arrive = clock.now()
            try:
                fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()
                fut.add_done_callback(lambda f, out=out: _forward_result(f, out))
            except Exception as exc:  # a broken group: the reducer's wait raises it
                out.set_exception(exc)


def _forward_result(source, target) -> None:
    try:
        value = source.value()
        target.set_result(value[0] if isinstance(value, list) else value)
    except Exception as exc:  # propagate a failed collective to DDP's reducer
        target.set_exception(exc)


class CudaDelayedLaunch(MeasuredDelay):
    """GPU: a sleep kernel of ``delay_s`` on a side stream per bucket, which waits for the
    bucket's gradients; the collective waits for the side stream. Device time, so it delays the
    collective by the same amount however far the host runs ahead. Measured: CUDA events
    around each sleep.

    The side streams are made once per bucket and device, from the high-priority pool
    (:class:`~swinkit.measure.contention.SideStreams`): a stream drawn from the default pool on
    every call would, within the first iteration of a model with a few dozen buckets, wrap onto
    the NCCL stream, and each bucket's sleep would queue behind earlier all-reduces and delay the
    later ones. ``sleep`` and ``streams`` are seams for tests."""

    def __init__(self, delay_s: float, sleep: CudaSleep | None = None,
                 streams: SideStreams | None = None):
        self.sleep = CudaSleep(delay_s) if sleep is None else sleep
        self.meter = self.sleep.meter
        self.streams = SIDE_STREAMS if streams is None else streams

    def side_stream(self, name: str, device):
        """The dedicated stream of bucket ``name`` on ``device``."""
        return self.streams.get(device, f"comm-delay:{name}")

    def __call__(self, bucket, group, record, clock):
        import torch
        import torch.distributed as dist
        tensor = bucket.buffer()
        tensor.div_(group.size())
        side = self.side_stream(record.name, tensor.device)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            if GATE.on:
                self.sleep()  # on ``side``: the current stream here
            record.arrive = clock.now()
            fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()
        tensor.record_stream(side)
        return fut


class ScaledLaunch:
    """Every bucket's collective moves ``scale`` times its bytes: the bucket is copied into a
    buffer ``scale`` times its size (the rest zeros, so the sum is unchanged) that is reduced in
    one all-reduce, then copied back."""

    def __init__(self, scale: float):
        self.scale = scale
        self.buffers: dict = {}

    def __call__(self, bucket, group, record, clock):
        import torch
        import torch.distributed as dist
        tensor = bucket.buffer()
        tensor.div_(group.size())
        if not GATE.on:  # every rank reads the same iteration number: sizes still match
            record.arrive = clock.now()
            return dist.all_reduce(tensor, group=group, async_op=True).get_future()
        n = tensor.numel()
        key = (record.name, n, tensor.dtype, tensor.device)
        if key not in self.buffers:
            self.buffers[key] = torch.zeros(int(round(n * self.scale)), dtype=tensor.dtype,
                                            device=tensor.device)
        big = self.buffers[key]
        big[:n].copy_(tensor.view(-1))
        big[n:].zero_()
        record.nbytes = big.numel() * big.element_size()
        record.arrive = clock.now()
        fut = dist.all_reduce(big, group=group, async_op=True).get_future()

        def back(_):
            tensor.view(-1).copy_(big[:n])
            return tensor
        return fut.then(back)
