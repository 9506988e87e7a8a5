"""Known delays injected into one component, to check that attribution finds them.

Spec (CLI ``--inject``): comma-separated ``data_ms=F,compute_ms=F,comm_ms=F,ranks=R1+R2``:

* ``data_ms``: added per loaded sample, inside the MMSeg pipeline (so in loader workers);
* ``compute_ms``: added to every forward pass (a forward pre-hook on the backbone);
* ``comm_ms``: added to every gradient bucket's all-reduce (inside the DDP comm hook, after the
  all-reduce completes, so it delays the bucket's future like a slow network would);
* ``ranks``: only these ranks get the delays (a straggler); default all ranks.

Off by default and zero-cost when off: nothing is inserted unless a delay is positive.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from mmcv.transforms import BaseTransform
from mmseg.registry import TRANSFORMS


@dataclass(frozen=True)
class Injection:
    data_ms: float = 0.0
    compute_ms: float = 0.0
    comm_ms: float = 0.0
    ranks: tuple[int, ...] | None = None   # None = every rank

    def applies_to(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    @property
    def active(self) -> bool:
        return any(v > 0 for v in (self.data_ms, self.compute_ms, self.comm_ms))

    def to_dict(self) -> dict:
        return asdict(self)


def parse_injection(spec: str | None) -> Injection:
    """Parse ``data_ms=5,comm_ms=2,ranks=1`` (ranks joined by '+' or ';'); ValueError names the
    bad field and value."""
    if not spec:
        return Injection()
    values: dict = {}
    for item in spec.split(","):
        key, sep, raw = item.strip().partition("=")
        if not sep:
            raise ValueError(f"--inject entries look like key=value, got {item!r}")
        if key in ("data_ms", "compute_ms", "comm_ms"):
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"--inject {key} must be a number of milliseconds, got {raw!r}") from None
            if not value >= 0:
                raise ValueError(f"--inject {key} must be >= 0, got {raw!r}")
            values[key] = value
        elif key == "ranks":
            parts = raw.replace(";", "+").split("+")
            if not all(p.strip().isdigit() for p in parts):
                raise ValueError(f"--inject ranks must be rank numbers joined by '+', got {raw!r}")
            values["ranks"] = tuple(sorted({int(p) for p in parts}))
        else:
            raise ValueError(f"--inject has no field {key!r} (use data_ms, compute_ms, comm_ms, ranks)")
    return Injection(**values)


@TRANSFORMS.register_module(force=True)
class InjectDelay(BaseTransform):
    """Sleep ``ms`` per sample (a slower decoder or augmentation)."""

    def __init__(self, ms: float):
        self.seconds = ms / 1e3

    def transform(self, results: dict) -> dict:
        time.sleep(self.seconds)
        return results


def add_data_delay(cfg, injection: Injection, rank: int) -> None:
    if injection.data_ms > 0 and injection.applies_to(rank):
        cfg.train_dataset.pipeline.append(dict(type="InjectDelay", ms=injection.data_ms))


def add_compute_delay(model, injection: Injection, rank: int, cuda: bool) -> None:
    """A forward pre-hook that delays the backbone (on GPU, a device-side spin)."""
    if not (injection.compute_ms > 0 and injection.applies_to(rank)):
        return
    seconds = injection.compute_ms / 1e3
    if cuda:
        import torch
        cycles = int(seconds * torch.cuda.get_device_properties(0).clock_rate * 1e3)
        model.backbone.register_forward_pre_hook(lambda *_: torch.cuda._sleep(cycles))
    else:
        model.backbone.register_forward_pre_hook(lambda *_: time.sleep(seconds))
