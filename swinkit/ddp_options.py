"""How DDP itself is configured for a run: the knobs a what-if turns (torch-free, so a remedy
catalogue and its validation can be imported and checked without starting anything).

The defaults are ``DistributedDataParallel``'s own; a run with ``DDPOptions()`` is today's run.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from swinkit.input_checks import check_int

COMM_HOOKS = (None, "fp16", "bf16", "powersgd")


@dataclass(frozen=True)
class DDPOptions:
    """Arguments of ``DistributedDataParallel`` and of the training loop around it.

    Attributes:
        bucket_cap_mb: DDP's bucket size limit (MiB); None = DDP's default (25, first bucket 1).
        gradient_as_bucket_view: gradients are views into the buckets (no copy in and out).
        static_graph: the graph is declared fixed, so DDP skips its per-iteration bookkeeping.
        broadcast_buffers: DDP broadcasts rank 0's buffers (BN statistics) every forward.
        comm_hook: how buckets are reduced: None (fp32 all-reduce, DDP's default), ``fp16`` /
            ``bf16`` (compressed to half precision for the all-reduce), ``powersgd``.
        powersgd_rank: PowerSGD's matrix approximation rank.
        grad_accum: micro-batches per optimizer step; all but the last run under ``no_sync``, so
            gradients are all-reduced once per step.
    """
    bucket_cap_mb: float | None = None
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    broadcast_buffers: bool = True
    comm_hook: str | None = None
    powersgd_rank: int = 1
    grad_accum: int = 1

    def validate(self) -> "DDPOptions":
        if self.bucket_cap_mb is not None and not (isinstance(self.bucket_cap_mb, (int, float))
                                                   and self.bucket_cap_mb > 0):
            raise ValueError(f"bucket_cap_mb must be a positive number of MiB, got {self.bucket_cap_mb!r}")
        if self.comm_hook not in COMM_HOOKS:
            raise ValueError(f"comm_hook must be one of {COMM_HOOKS}, got {self.comm_hook!r}")
        check_int("powersgd_rank", self.powersgd_rank)
        check_int("grad_accum", self.grad_accum)
        for name in ("gradient_as_bucket_view", "static_graph", "broadcast_buffers"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        return self

    def ddp_kwargs(self) -> dict:
        """Keyword arguments for ``DistributedDataParallel``."""
        kw = dict(gradient_as_bucket_view=self.gradient_as_bucket_view,
                  static_graph=self.static_graph)
        # torch 2.13 deprecates the argument (for forward_sync_buffers) and warns whenever it
        # is given; True is DDP's default anyway. False keeps the old meaning (no broadcast at
        # construction either), which forward_sync_buffers=False would not.
        if not self.broadcast_buffers:
            kw["broadcast_buffers"] = False
        if self.bucket_cap_mb is not None:
            kw["bucket_cap_mb"] = self.bucket_cap_mb
        return kw

    def to_dict(self) -> dict:
        return asdict(self)

    def changed(self) -> dict:
        """Only the fields that differ from DDP's defaults."""
        default = DDPOptions()
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) != getattr(default, f.name)}

    @classmethod
    def from_dict(cls, data: dict | None) -> "DDPOptions":
        data = dict(data or {})
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown DDP option(s) {sorted(unknown)}; known: "
                             f"{[f.name for f in fields(cls)]}")
        return cls(**data).validate()
