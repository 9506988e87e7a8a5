"""Run the instrumented DDP iteration on N ranks and aggregate what they measured."""
from __future__ import annotations

import os
import platform
import statistics
from dataclasses import dataclass, field

import torch

from swinkit.config import load_config
from swinkit.data.loader import ensure_data
from swinkit.dist import LaunchConfig, launch
from swinkit.measure.aggregate import aggregate_phases, cross_check
from swinkit.measure.phases import PHASES
from swinkit.workloads.inject import Injection

ENTRY = "swinkit.workloads.ddp:ddp_rank"


@dataclass(frozen=True)
class DDPRunSpec:
    preset: str = "test"
    world_size: int = 2
    iters: int = 10
    warmup: int = 3
    workers: int | None = None
    injection: Injection = field(default_factory=Injection)
    data_root: str | None = None
    overrides: dict = field(default_factory=dict)
    trace_dir: str | None = None
    bare: bool = False
    launch: LaunchConfig | None = None

    def launch_config(self) -> LaunchConfig:
        return self.launch or LaunchConfig(world_size=self.world_size)

    def validate(self):
        """Everything checkable before a process starts; ValueError names field and value."""
        for name, value, low in (("iters", self.iters, 1), ("warmup", self.warmup, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.workers is not None and (not isinstance(self.workers, int) or self.workers < 0):
            raise ValueError(f"workers must be an integer >= 0, got {self.workers!r}")
        lc = self.launch_config().validate()
        total = lc.world_size * lc.nnodes
        bad = [r for r in (self.injection.ranks or ()) if r >= total]
        if bad:
            raise ValueError(f"--inject ranks {bad} do not exist at world size {total}")
        # The backend decides the device: gloo ranks run on CPU whatever the preset says.
        device = "cuda" if lc.resolved_backend() == "nccl" else "cpu"
        return load_config(self.preset, self.data_root, self.overrides, device=device), lc


def run_ddp(spec: DDPRunSpec, quiet: bool = True, run_dir=None, progress=print) -> dict | None:
    """Launch, measure, aggregate. Raises ValueError (bad spec) or LaunchError (a rank failed).
    Returns None on a node of a multi-node run that did not host rank 0."""
    cfg, lc = spec.validate()
    ensure_data(cfg, progress=progress)  # written once here, not raced by the ranks
    kwargs = dict(preset=spec.preset, iters=spec.iters, warmup=spec.warmup, workers=spec.workers,
                  inject=spec.injection.to_dict(), data_root=cfg.data_root,
                  overrides=dict(spec.overrides), device=cfg.device,
                  trace_dir=spec.trace_dir, bare=spec.bare)
    run = launch(ENTRY, kwargs, lc, run_dir=run_dir, quiet=quiet)
    if run.result is None:  # multi-node: rank 0, which gathers the results, ran elsewhere
        return None
    ranks = run.result["ranks"]
    world = lc.world_size * lc.nnodes
    out = {
        "world_size": world, "nnodes": lc.nnodes, "backend": lc.resolved_backend(),
        "device": ranks[0]["device"], "preset": spec.preset, "iterations": spec.iters,
        "warmup": spec.warmup, "bare": spec.bare, "injection": spec.injection.to_dict(),
        "threads_per_rank": lc.threads_per_rank, "loader_workers": ranks[0]["loader_workers"],
        "images_per_rank": cfg.images_per_rank, "crop_size": list(cfg.crop_size),
        "bucket_sizes_bytes": ranks[0]["bucket_sizes_bytes"],
        "utilisation": {str(r["rank"]): {"cpu": r["cpu"], "gpu": r["gpu"]} for r in ranks},
        "environment": environment(),
        "wall_s": run.wall_s, "ranks": ranks,
    }
    if spec.bare:
        out["iter_s"] = statistics.median(statistics.median(r["iteration"]) for r in ranks)
        return out
    out.update(aggregate_phases(ranks, PHASES))
    out["ddp_cross_check"] = cross_check(ranks)
    return out


def environment() -> dict:
    """What asv's machine info lacks: library versions and accelerators."""
    cuda = torch.cuda.is_available()
    return {
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "cpu_count": os.cpu_count(), "python": platform.python_version(),
        "platform": platform.platform(),
    }
