"""What-ifs: remedies for poor scaling, each a named configuration swinkit can run.

A remedy changes DDP's options, the loader, the launch, or the training precision and the
cheap GPU remedies beside it (preset knobs the DDP rank applies: ``precision``,
``channels_last_heads``, ``fused_adamw``, ``cudnn_benchmark``; docs/precision.md), and nothing
else; applied to a :class:`~swinkit.runs.ddp_run.DDPRunSpec` it gives the spec of the run with
the change. Torch-free, so the catalogue can be listed and validated before anything starts.
A remedy that changes nothing on a CPU says so (:func:`device_note`), beside its score.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from swinkit.ddp_options import DDPOptions


@dataclass(frozen=True)
class Remedy:
    name: str
    what: str                          # one line: what it changes
    ddp: dict = field(default_factory=dict)       # DDPOptions fields
    config: dict = field(default_factory=dict)    # preset overrides (loader, precision, ...)
    extra_workers: int = 0             # loader workers per rank added to the preset's
    extra_threads: int = 0             # compute threads per rank added to the launch's

    def overrides(self) -> dict:
        """Everything it changes, flat, for the report's JSON."""
        out = {f"ddp.{k}": v for k, v in self.ddp.items()}
        out.update({f"config.{k}": v for k, v in self.config.items()})
        if self.extra_workers:
            out["loader_workers"] = f"+{self.extra_workers}"
        if self.extra_threads:
            out["threads_per_rank"] = f"+{self.extra_threads}"
        return out

    def apply(self, spec, preset_workers: int):
        """``spec`` (a DDPRunSpec) with this remedy applied."""
        ddp = DDPOptions.from_dict({**spec.ddp.to_dict(), **self.ddp})
        workers = (spec.workers if spec.workers is not None else preset_workers) + self.extra_workers
        lc = spec.launch_config()
        if self.extra_threads:  # more threads than cores is the question asked: allow it
            lc = replace(lc, threads_per_rank=lc.threads_per_rank + self.extra_threads,
                         allow_oversubscribe=True)
        k = ddp.grad_accum
        return replace(spec, ddp=ddp, workers=workers, launch=lc,
                       overrides={**spec.overrides, **self.config},
                       iters=_round_up(spec.iters, k), warmup=_round_up(spec.warmup, k))


def _round_up(n: int, k: int) -> int:
    return -(-n // k) * k


CATALOGUE = {r.name: r for r in (
    Remedy("bucket_1mb", "DDP buckets of 1 MiB: all-reduces start earlier in backward, more "
           "of them (more latency)", ddp={"bucket_cap_mb": 1}),
    Remedy("bucket_5mb", "DDP buckets of 5 MiB", ddp={"bucket_cap_mb": 5}),
    Remedy("bucket_25mb", "DDP buckets of 25 MiB, the first one too (DDP's default keeps its "
           "first bucket at 1 MiB)", ddp={"bucket_cap_mb": 25}),
    Remedy("bucket_100mb", "DDP buckets of 100 MiB: few all-reduces, started late in backward",
           ddp={"bucket_cap_mb": 100}),
    Remedy("bucket_view", "gradients are views into DDP's buckets: no copy into the bucket "
           "and back", ddp={"gradient_as_bucket_view": True}),
    Remedy("static_graph", "the graph is declared static: DDP skips its per-iteration search "
           "for unused parameters and rebuilds", ddp={"static_graph": True}),
    Remedy("no_buffer_broadcast", "BN statistics are not broadcast from rank 0 before every "
           "forward (one blocking collective less)", ddp={"broadcast_buffers": False}),
    Remedy("fp16_hook", "gradients all-reduced in fp16: half the bytes, plus two casts",
           ddp={"comm_hook": "fp16"}),
    Remedy("bf16_hook", "gradients all-reduced in bf16: half the bytes, plus two casts",
           ddp={"comm_hook": "bf16"}),
    Remedy("powersgd_r1", "PowerSGD rank 1: low-rank factors instead of gradients (far fewer "
           "bytes, extra matrix products)", ddp={"comm_hook": "powersgd", "powersgd_rank": 1}),
    Remedy("powersgd_r4", "PowerSGD rank 4", ddp={"comm_hook": "powersgd", "powersgd_rank": 4}),
    Remedy("accum_2", "2 micro-batches per optimizer step (no_sync): one all-reduce and one "
           "optimizer step per 2 batches", ddp={"grad_accum": 2}),
    Remedy("accum_4", "4 micro-batches per optimizer step (no_sync)", ddp={"grad_accum": 4}),
    Remedy("workers_plus1", "one more loader worker per rank", extra_workers=1),
    Remedy("workers_plus2", "two more loader workers per rank", extra_workers=2),
    # Pinning alone only speeds the copy up: mmengine's data preprocessor copies with
    # non_blocking=False, so the host still waits for each batch to land. The asynchronous copy
    # is what lets the transfer overlap the GPU's work, so the remedy asks for both.
    Remedy("pinned_persistent", "pinned batch memory, asynchronous host-to-device copies and "
           "persistent workers (pinning and the asynchronous copy act on GPUs only; swinkit's "
           "endless loader never restarts its workers)",
           config={"pin_memory": True, "non_blocking_copy": True, "persistent_workers": True}),
    Remedy("threads_plus1", "one more compute thread per rank", extra_threads=1),
    Remedy("amp_bf16", "bf16 autocast around forward and loss (TF32 on beside it): weights, "
           "gradients and all-reduce stay fp32", config={"precision": "bf16"}),
    Remedy("tf32", "TF32 for fp32 matmuls and cuDNN convolutions (a no-op on CPU)",
           config={"precision": "tf32"}),
    Remedy("channels_last", "the decode and auxiliary heads' convolutions in channels_last "
           "(NHWC)", config={"channels_last_heads": True}),
    Remedy("fused_adamw", "one fused AdamW over the parameter groups merged (MMEngine makes "
           "one group per parameter)", config={"fused_adamw": True}),
    Remedy("cudnn_benchmark", "cuDNN's autotuner picks each convolution's algorithm (a no-op "
           "on CPU)", config={"cudnn_benchmark": True}),
)}

# what each of these knobs does on a CPU, where it changes nothing (keyed (knob, value))
CPU_NO_OPS = {
    ("precision", "tf32"): "tf32 is a no-op on CPU (CPUs have no TF32): the run is fp32 math, "
                           "so any change is noise",
    ("cudnn_benchmark", True): "cudnn_benchmark is a no-op on CPU (cuDNN runs on GPUs only), "
                               "so any change is noise",
}


def device_note(remedy: Remedy, device_type: str) -> str | None:
    """What the report says beside ``remedy``'s score where the device makes it a no-op.

    >>> device_note(CATALOGUE["tf32"], "cpu")[:24]
    'tf32 is a no-op on CPU ('
    >>> device_note(CATALOGUE["tf32"], "cuda") is None
    True
    """
    if device_type != "cpu":
        return None
    notes = [CPU_NO_OPS[k] for k in remedy.config.items() if k in CPU_NO_OPS]
    return "; ".join(notes) or None

# What `asv run` tracks by default (the rest with SWINKIT_WHATIF=all): one of each kind of change.
DEFAULT = ("bucket_1mb", "bf16_hook", "accum_2", "no_buffer_broadcast", "bucket_view",
           "workers_plus1")


def select(names: str | None) -> list[Remedy]:
    """Remedies by comma-separated names, ``all`` or ``default`` (None); unknown names raise
    ValueError listing the known ones."""
    if names in (None, "", "default"):
        return [CATALOGUE[n] for n in DEFAULT]
    if names == "all":
        return list(CATALOGUE.values())
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in CATALOGUE]
    if unknown:
        raise ValueError(f"unknown remedy {', '.join(unknown)}; known: {', '.join(CATALOGUE)}")
    return [CATALOGUE[n] for n in chosen]
