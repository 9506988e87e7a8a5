"""Known costs injected into one component: the ground truth attribution is checked against.

Spec (CLI ``--inject``): comma-separated ``data_ms=F,compute_ms=F,comm_ms=F,comm_scale=K,ranks=R1+R2``.
Each behaves like the real thing it stands for, on CPU and GPU alike:

* ``data_ms``: every loaded sample takes F ms longer, inside the MMSeg pipeline (in the loader
  workers when there are any): a slow disk or decoder. A sleep is right here: I/O frees the core.
* ``compute_ms``: every forward pass occupies the compute device for F ms more (a forward
  pre-hook on the backbone: on CPU a spin until F ms of wall time have passed, never yielding
  the core; on GPU a sleep kernel of F ms on the current stream). A host sleep would free the
  core for the loader and gloo's threads, so slower compute would cost less than its F ms.
* ``comm_ms``: every gradient bucket's all-reduce starts F ms after the bucket is ready, for
  every rank of the collective (link latency). The delay runs off the autograd thread: on CPU a
  FIFO launcher thread per rank keeps the collectives in order; on GPU a sleep kernel on a side
  stream per bucket that the collective waits for. With ``ranks``, only those ranks launch
  late, and everyone else waits for them in the collective.
* ``comm_scale``: every bucket's collective moves K times its bytes (the bucket plus (K-1) x
  its size of zeros, in one all-reduce): a link K times slower. The added time is what the
  isolated all-reduce benchmark measures for the extra bytes. A collective runs at the pace of
  its slowest link, so with ``ranks`` every rank's collective still grows: the cost is transfer
  for all, and no rank arrives late (a timeline cannot name a slow link's rank; the isolated
  all-reduce benchmark per world size is where a slow link shows).
* ``ranks``: only these ranks get the injection (a straggler); default all ranks. A sweep over
  world sizes applies a one-rank injection only where that rank exists.
* ``every``: inject on every N-th iteration only (default 1: all). With ``every=2`` one run
  holds injected and clean iterations side by side, so the added cost is read from pairs of
  neighbouring iterations and slow drifts of a busy machine cancel (the run's ``paired``
  figures). ``data_ms`` with ``every`` needs loader workers 0: workers load ahead, out of step.

Off by default and nothing is inserted unless a value is positive (``comm_scale`` above 1).
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import asdict, dataclass

from mmcv.transforms import BaseTransform
from mmseg.registry import TRANSFORMS

DELAY_FIELDS = ("data_ms", "compute_ms", "comm_ms")


@dataclass(frozen=True)
class Injection:
    data_ms: float = 0.0
    compute_ms: float = 0.0
    comm_ms: float = 0.0
    comm_scale: float = 1.0
    ranks: tuple[int, ...] | None = None   # None = every rank
    every: int = 1                         # inject on iterations it % every == 0

    def on_iteration(self, it: int) -> bool:
        return it % self.every == 0

    def applies_to(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    @property
    def active(self) -> bool:
        return any(getattr(self, f) > 0 for f in DELAY_FIELDS) or self.comm_scale > 1

    def for_world_size(self, world_size: int) -> "Injection":
        """This injection where its ranks exist at ``world_size``; a one-rank injection whose
        ranks all lie beyond it becomes no injection (the world-size-1 baseline of a sweep)."""
        if self.ranks is None:
            return self
        kept = tuple(r for r in self.ranks if r < world_size)
        return Injection(ranks=kept) if not kept else Injection(**{**asdict(self), "ranks": kept})

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        parts = [f"{f}={getattr(self, f):g}" for f in DELAY_FIELDS if getattr(self, f) > 0]
        if self.comm_scale > 1:
            parts.append(f"comm_scale={self.comm_scale:g}")
        if parts and self.ranks is not None:
            parts.append("ranks=" + "+".join(map(str, self.ranks)))
        if parts and self.every > 1:
            parts.append(f"every={self.every}")
        return ",".join(parts) or "none"


def parse_injection(spec: str | None) -> Injection:
    """Parse ``data_ms=5,comm_ms=2,ranks=1`` (ranks joined by '+'); ValueError names the field."""
    if not spec:
        return Injection()
    values: dict = {}
    for item in spec.split(","):
        key, sep, raw = item.strip().partition("=")
        if not sep:
            raise ValueError(f"--inject entries look like key=value, got {item!r}")
        if key in DELAY_FIELDS + ("comm_scale",):
            values[key] = _number(key, raw, minimum=1.0 if key == "comm_scale" else 0.0)
        elif key == "every":
            if not raw.isdigit() or int(raw) < 1:
                raise ValueError(f"--inject every must be an integer >= 1, got {raw!r}")
            values["every"] = int(raw)
        elif key == "ranks":
            parts = raw.replace(";", "+").split("+")
            if not all(p.strip().isdigit() for p in parts):
                raise ValueError(f"--inject ranks must be rank numbers joined by '+', got {raw!r}")
            values["ranks"] = tuple(sorted({int(p) for p in parts}))
        else:
            raise ValueError(f"--inject has no field {key!r} "
                             "(use data_ms, compute_ms, comm_ms, comm_scale, ranks, every)")
    return Injection(**values)


def _number(key: str, raw: str, minimum: float) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"--inject {key} must be a number, got {raw!r}") from None
    if not value >= minimum:
        raise ValueError(f"--inject {key} must be >= {minimum:g}, got {raw!r}")
    return value


class Gate:
    """Whether this iteration is injected: the rank loop sets ``on`` at the top of every
    iteration, and every injection point reads it (one per process; the data pipeline's is
    the module's :data:`GATE`, since MMEngine builds transforms from config dicts)."""
    on = True


GATE = Gate()


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


# ---------------------------------------------------------------- compute

def spin(seconds: float) -> None:
    """Occupy this thread's core until ``seconds`` of wall time have passed."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


def cuda_sleep_cycles_per_second() -> float:
    """Calibrate ``torch.cuda._sleep`` (it counts SM clock cycles, and clocks vary) against
    CUDA events, once, before anything is measured."""
    import torch
    cycles = 20_000_000
    torch.cuda._sleep(cycles // 10)  # warm up the clocks
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    stop.record()
    stop.synchronize()
    return cycles / (start.elapsed_time(stop) / 1e3)


def add_compute_delay(model, injection: Injection, rank: int, cuda: bool) -> None:
    """A forward pre-hook on the backbone that occupies the device for ``compute_ms``."""
    if not (injection.compute_ms > 0 and injection.applies_to(rank)):
        return
    seconds = injection.compute_ms / 1e3
    if cuda:
        import torch
        cycles = int(seconds * cuda_sleep_cycles_per_second())
        occupy = lambda: torch.cuda._sleep(cycles)  # noqa: E731
    else:
        occupy = lambda: spin(seconds)  # noqa: E731

    def hook(module, args) -> None:
        # Must return None: a forward pre-hook's return value replaces the module's inputs.
        if GATE.on:
            occupy()
    model.backbone.register_forward_pre_hook(hook)


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


class ThreadDelayedLaunch:
    """CPU: each bucket's all-reduce is launched ``delay_s`` after it is ready, by one FIFO
    thread per rank (so every rank launches its collectives in the same order), never by the
    autograd thread, which goes on computing."""

    def __init__(self, delay_s: float):
        self.delay_s = delay_s
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="swinkit-delayed-launch", daemon=True)
        self.thread.start()

    def __call__(self, bucket, group, record, clock):
        import torch
        tensor = bucket.buffer()
        tensor.div_(group.size())
        out = torch.futures.Future()
        delay = self.delay_s if GATE.on else 0.0
        self.jobs.put((time.perf_counter() + delay, tensor, group, record, clock, out))
        return out

    def _run(self) -> None:
        import torch.distributed as dist
        while True:
            due, tensor, group, record, clock, out = self.jobs.get()
            time.sleep(max(due - time.perf_counter(), 0.0))
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


class CudaDelayedLaunch:
    """GPU: a sleep kernel of ``delay_s`` on a side stream per bucket, which waits for the
    bucket's gradients; the collective waits for the side stream. Device time, so it delays the
    collective by the same amount however far the host runs ahead."""

    def __init__(self, delay_s: float):
        self.cycles = int(delay_s * cuda_sleep_cycles_per_second())
        self.streams: dict = {}

    def __call__(self, bucket, group, record, clock):
        import torch
        import torch.distributed as dist
        tensor = bucket.buffer()
        tensor.div_(group.size())
        side = self.streams.setdefault(record.name, torch.cuda.Stream())
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            if GATE.on:
                torch.cuda._sleep(self.cycles)
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
