"""Instruments on DDP: its gradient buckets on the timeline, its buffer broadcast, and its own
reducer timers as a cross-check (SyncBN's collectives: :mod:`swinkit.measure.sync_bn`).

Gradient buckets: :func:`recording_allreduce_hook` is DDP's default all-reduce (divide by the
world size, sum) with three marks per bucket: ``ready`` (DDP handed the bucket to the hook: its
gradients are computed), ``arrive`` (the collective was launched: the same moment unless a
launcher delays it) and ``done`` (the reduced bucket is back; on GPU a CUDA event recorded in
the future's callback, which runs on a stream that waited for the collective). The launcher is
pluggable so an injection can delay or enlarge the collective itself (swinkit.rank.inject).

DDP's view: with ``_set_ddp_runtime_logging_sample_rate(1)``, ``_get_ddp_logging_data()`` holds
running averages (ns) of forward compute, backward compute, backward comm and their overlap;
differencing consecutive readings recovers each iteration's values. On GPU, sampling every
iteration makes DDP synchronise on the previous iteration's CUDA events in each forward, so
:class:`DDPStats` is only switched on when its cross-check is asked for.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

DDP_KEYS = {"forward": "avg_forward_compute_time", "backward": "avg_backward_compute_time",
            "comm": "avg_backward_comm_time", "overlap": "avg_backward_compute_comm_overlap_time"}


def plain_launch(bucket, group, record, clock) -> torch.futures.Future:
    """DDP's default: average the bucket by all-reducing it divided by the group size, now.

    A launcher takes (bucket, group, record, clock), sets ``record.arrive`` when it launches the
    collective (the rank's arrival) and returns a future of the reduced bucket tensor."""
    tensor = bucket.buffer()
    tensor.div_(group.size())
    record.arrive = clock.now()
    return dist.all_reduce(tensor, group=group, async_op=True).get_future()


class CompressedLaunch:
    """DDP's fp16/bf16 compression hook as a launcher: the bucket is cast to ``dtype``, averaged
    by an all-reduce of half the bytes, and cast back (the casts are the hook's compute cost)."""

    def __init__(self, dtype: torch.dtype):
        self.dtype = dtype

    def __call__(self, bucket, group, record, clock):
        tensor = bucket.buffer()
        compressed = tensor.to(self.dtype).div_(group.size())
        record.arrive = clock.now()
        fut = dist.all_reduce(compressed, group=group, async_op=True).get_future()

        def decompress(f):
            tensor.copy_(f.value()[0])
            return tensor
        return fut.then(decompress)


class PowerSGDLaunch:
    """DDP's PowerSGD hook as a launcher (Vogels et al., "PowerSGD: Practical Low-Rank Gradient
    Compression for Distributed Optimization"). Compression starts at DDP iteration 2, inside
    swinkit's warm-up, instead of PowerSGD's default 1000 (plain all-reduce until then)."""

    def __init__(self, rank: int, group=None):
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        self.hook = powerSGD_hook.powerSGD_hook
        self.state = powerSGD_hook.PowerSGDState(process_group=group, matrix_approximation_rank=rank,
                                                 start_powerSGD_iter=2)
        self.shapes: dict[int, list[list[int]]] = {}  # per bucket: what the hook compresses

    def compress_from_now(self) -> None:
        """Skip PowerSGD's own warm-up: for a launcher that takes over a DDP model whose
        buckets were rebuilt already (a paired run's local side, after the DDP warm-up)."""
        self.state.iter = self.state.start_powerSGD_iter

    def __call__(self, bucket, group, record, clock):
        self.shapes.setdefault(bucket.index(), [list(g.shape) for g in bucket.gradients()])
        record.arrive = clock.now()
        return self.hook(self.state, bucket)


def local_launch(bucket, group, record, clock) -> torch.futures.Future:
    """No communication: the bucket is 'reduced' at once. What the component measurement runs
    (DDP's bucketing and hooks, without the collective it would wait for)."""
    record.arrive = clock.now()
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def hook_launcher(comm_hook: str | None, powersgd_rank: int = 1, group=None, local: bool = False):
    """The launcher for a :class:`~swinkit.ddp_options.DDPOptions` ``comm_hook``;
    ``local``: DDP runs over a group of one, and without a hook nothing is sent at all."""
    if comm_hook is None:
        return local_launch if local else plain_launch
    if comm_hook in ("fp16", "bf16"):
        return CompressedLaunch(torch.float16 if comm_hook == "fp16" else torch.bfloat16)
    if comm_hook == "powersgd":
        return PowerSGDLaunch(powersgd_rank, group)
    raise ValueError(f"unknown comm_hook {comm_hook!r}")


class BucketRecorder:
    """Comm-hook state: the timeline to record on, the launcher, this iteration's buckets."""

    def __init__(self, timeline, process_group=None, launcher=plain_launch):
        self.timeline = timeline
        self.process_group = process_group
        self.launcher = launcher
        self.buckets: list = []

    def reset(self) -> None:
        self.buckets = []

    def last_launched(self):
        """The bucket launched last (the rank's arrival at the final gradient sync)."""
        return self.buckets[-1] if self.buckets else None


def recording_allreduce_hook(state: BucketRecorder, bucket):
    """DDP's default all-reduce, recorded on ``state.timeline`` (see the module docstring).

    Returns a ``torch.futures.Future[torch.Tensor]``; no return annotation, because DDP compares
    it with the real type and this module's annotations are strings."""
    clock = state.timeline.clock
    tensor = bucket.buffer()
    record = state.timeline.collective(f"bucket{bucket.index()}", blocking=False,
                                       nbytes=tensor.numel() * tensor.element_size(),
                                       ready=clock.now())
    state.buckets.append(record)
    group = state.process_group if state.process_group is not None else dist.group.WORLD
    fut = state.launcher(bucket, group, record, clock)

    def done(f):
        record.done = clock.now()
        value = f.value()
        return value[0] if isinstance(value, list) else value
    return fut.then(done)


def record_grad_sync(timeline, recorder: BucketRecorder) -> None:
    """After ``loss.backward()``: close ``backward`` at the last bucket's ready mark and
    ``exposed_comm`` now, and add the blocking 'grad_sync' the rank waited in: from its last
    launch (its arrival) to the end of backward. Without buckets (no gradients) backward ends
    now and nothing is exposed."""
    last = recorder.last_launched()
    end = timeline.clock.now()
    timeline.mark("backward", last.ready if last else end)
    timeline.mark("exposed_comm", end)
    if last is not None:
        nbytes = sum(b.nbytes for b in recorder.buckets)
        timeline.collective("grad_sync", blocking=True, nbytes=nbytes, arrive=last.arrive,
                            done=end, ready=last.ready)


class ModuleCollective:
    """Records a module whose call contains a blocking collective (DDP's buffer broadcast runs
    before the wrapped module; SyncBN all-gathers in forward and all-reduces in backward).

    ``start`` is the arrival, taken by the caller or a pre-hook; ``finish`` closes it."""

    def __init__(self, timeline, name: str, nbytes: int = 0):
        self.timeline, self.name, self.open, self.nbytes = timeline, name, None, nbytes

    def start(self, mark=None) -> None:
        clock = self.timeline.clock
        self.open = self.timeline.collective(self.name, blocking=True, nbytes=self.nbytes,
                                             arrive=clock.now() if mark is None else mark)

    def finish(self, *_) -> None:
        if self.open is not None:
            self.open.done = self.timeline.clock.now()
            self.open = None


def record_buffer_broadcast(timeline, ddp) -> ModuleCollective | None:
    """DDP broadcasts the module's buffers from rank 0 at the start of every forward (when it
    has buffers and ``broadcast_buffers``); the wrapped module's forward pre-hook runs right
    after. The caller starts the record just before calling DDP (the arrival)."""
    if not (ddp.broadcast_buffers and len(list(ddp.module.buffers())) > 0):
        return None
    recorder = ModuleCollective(timeline, "buffers", nbytes=sum(
        b.numel() * b.element_size() for b in ddp.module.buffers()))
    ddp.module.register_forward_pre_hook(recorder.finish)
    return recorder


class DDPStats:
    """Per-iteration values (seconds) recovered from DDP's running averages."""

    def __init__(self, ddp_model):
        self.model = ddp_model
        ddp_model._set_ddp_runtime_logging_sample_rate(1)
        self._prev_n, self._prev = 0, {k: 0 for k in DDP_KEYS}
        self.per_iteration: dict[int, dict[str, float]] = {}

    def poll(self) -> None:
        data = self.model._get_ddp_logging_data()
        n = int(data.get("iteration", 0))
        if n <= self._prev_n or DDP_KEYS["backward"] not in data:
            return
        values = {}
        for name, key in DDP_KEYS.items():
            total = int(data.get(key, 0)) * n
            values[name] = (total - self._prev[name] * self._prev_n) / 1e9 / (n - self._prev_n)
            self._prev[name] = int(data.get(key, 0))
        values["exposed_comm"] = max(values["comm"] - values["overlap"], 0.0)
        self.per_iteration[n - 1] = values  # index of the iteration these numbers describe
        self._prev_n = n


def bucket_sizes_bytes(ddp_model) -> list[int]:
    """DDP's bucket sizes after its rebuild (logging data; available without sampling)."""
    data = ddp_model._get_ddp_logging_data()
    sizes = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or ""
    return [int(s) for s in str(sizes).split(",") if s.strip()]
