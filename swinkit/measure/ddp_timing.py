"""Two views of DDP's backward: our comm-hook clock, and DDP's own reducer timers.

Our view (per iteration): the comm hook is called when a gradient bucket is ready, so the last
call marks the end of backward compute; whatever ``loss.backward()`` takes after it is the
all-reduce time left exposed (not hidden under compute).

DDP's view: with ``_set_ddp_runtime_logging_sample_rate(1)``, ``_get_ddp_logging_data()`` holds
running averages (ns) of forward compute, backward compute, backward comm and the
compute/comm overlap over ``iteration`` recorded iterations; differencing consecutive readings
recovers each iteration's values. An iteration's numbers appear during the next forward.
"""
from __future__ import annotations

import time

from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

DDP_KEYS = {"forward": "avg_forward_compute_time", "backward": "avg_backward_compute_time",
            "comm": "avg_backward_comm_time", "overlap": "avg_backward_compute_comm_overlap_time"}


class BucketClock:
    """Comm-hook state: marks bucket-ready times; optionally delays each bucket's all-reduce."""

    def __init__(self, new_mark, process_group=None, comm_delay_s: float = 0.0):
        self.new_mark = new_mark  # PhaseClock.new_mark: a CPU clock reading or a CUDA event
        self.process_group = process_group
        self.comm_delay_s = comm_delay_s
        self.last_ready = None
        self.buckets = 0

    def reset(self) -> None:
        self.last_ready, self.buckets = None, 0

    def on_bucket(self) -> None:
        self.buckets += 1
        self.last_ready = self.new_mark()


def timed_allreduce_hook(state: BucketClock, bucket):
    """DDP's default all-reduce, with the bucket-ready mark and the optional injected delay."""
    state.on_bucket()
    fut = allreduce_hook(state.process_group, bucket)
    if state.comm_delay_s > 0:
        delay = state.comm_delay_s

        def slow(f):
            time.sleep(delay)
            return f.value()[0] if isinstance(f.value(), list) else f.value()
        fut = fut.then(slow)
    return fut


class DDPStats:
    """Per-iteration values (seconds) recovered from DDP's running averages."""

    def __init__(self, ddp_model):
        self.model = ddp_model
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

    def bucket_sizes_bytes(self) -> list[int]:
        data = self.model._get_ddp_logging_data()
        sizes = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or ""
        return [int(s) for s in str(sizes).split(",") if s.strip()]
