"""The collectives' injections: each bucket's all-reduce launched late (``comm_ms``) or moving
more bytes (``comm_scale``), as launchers of the DDP comm hook
(:mod:`swinkit.measure.ddp_hooks`); chosen for a rank by
:func:`swinkit.rank.inject.comm_launcher`.

A late launch runs off the autograd thread, which goes on computing: on CPU a FIFO launcher
thread per rank keeps the collectives in order; on GPU a sleep kernel on a side stream per
bucket (made once, high priority: never a communicator's) that the collective waits for.
"""
from __future__ import annotations

import queue
import threading
import time

from swinkit.measure.contention import SIDE_STREAMS, SideStreams
from swinkit.rank.delays import GATE, CudaSleep, DelayMeter, MeasuredDelay


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
