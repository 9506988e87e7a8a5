"""Run the instrumented DDP iteration on N ranks and aggregate what they measured: phases
(where time went), blame (why), the straggler, and DDP's own timers as a cross-check."""
from __future__ import annotations

import dataclasses

import os
import platform
import statistics
from dataclasses import dataclass

import torch

from swinkit.config import load_config
from swinkit.data.loader import ensure_data
from swinkit.launch import LaunchConfig, launch
from swinkit.attribution.blame import annotate
from swinkit.attribution.blame import resolution as blame_resolution
from swinkit.attribution.blame_of_run import blame_figures
from swinkit.measure.aggregate import aggregate_phases, cross_check
from swinkit.measure.bucket_spans import bucket_spans
from swinkit.measure.phases import PHASES
from swinkit.runs.paired_parts import local_run, step_times
from swinkit.precision import DEFAULT as DEFAULT_PRECISION, check_precision
from swinkit.run_spec import RunSpec

ENTRY = "swinkit.rank.ddp:ddp_rank"
COMPONENT_ENTRY = "swinkit.rank.components:component_rank"  # local and paired specs


@dataclass(frozen=True)
class DDPRunSpec(RunSpec):
    """A :class:`~swinkit.run_spec.RunSpec` and how to launch it: the supervisor's spec.

    Attributes:
        nproc_per_node: ranks per node (``swinkit ddp --world-size``).
        launch: the launch's settings (backend, timeouts, nodes, threads per rank, ...); its
            own ranks per node are this spec's.
    """
    nproc_per_node: int = 2
    launch: LaunchConfig | None = None

    @property
    def world_size(self) -> int:
        """Every rank of the run: ranks per node times the launch's nodes."""
        return self.launch_config().world_size

    def launch_config(self) -> LaunchConfig:
        """How to launch: ``launch``'s settings (backend, timeouts, nodes, ...) with this spec's
        ``nproc_per_node``, the one place a run's ranks per node are stated (a changed size
        needs no second edit of ``launch``)."""
        if self.launch is None:
            return LaunchConfig(nproc_per_node=self.nproc_per_node)
        return dataclasses.replace(self.launch, nproc_per_node=self.nproc_per_node)

    def validate(self):
        """Everything checkable before a process starts; ValueError names field and value.
        Returns (the preset's config on the device the backend decides, the launch config)."""
        self.check()
        lc = self.launch_config().validate()
        bad = [r for r in self.injection.named_ranks() if r >= lc.world_size]
        if bad:
            raise ValueError(f"--inject ranks {bad} do not exist at world size {lc.world_size}")
        # The backend decides the device: gloo ranks run on CPU whatever the preset says.
        device = "cuda" if lc.resolved_backend() == "nccl" else "cpu"
        cfg = load_config(self.preset, self.data_root, self.overrides, device=device)
        workers = cfg.loader_workers if self.workers is None else self.workers
        if self.injection.every > 1 and self.injection.data_ms > 0 and workers > 0:
            raise ValueError(f"--inject every={self.injection.every} with data_ms needs loader "
                             f"workers 0 (got {workers}): workers load ahead, out of step with "
                             "the iterations")
        if self.precision is not None:  # the preset's own is checked with the preset
            check_precision(self.precision, device)
        return cfg, lc

    def for_ranks(self, cfg) -> dict:
        """What crosses to the ranks (``cfg``: :meth:`validate`'s): this run's
        :class:`RunSpec`, with the data root the supervisor wrote and the precision resolved."""
        return dict(self.to_dict(), data_root=str(cfg.data_root),
                    precision=self.precision or cfg.get("precision", DEFAULT_PRECISION))


def run_ddp(spec: DDPRunSpec, quiet: bool = True, run_dir=None, progress=print) -> dict | None:
    """Launch, measure, aggregate. Raises ValueError (bad spec) or LaunchError (a rank failed).
    Returns None on a node of a multi-node run that did not host rank 0."""
    cfg, lc = spec.validate()
    ensure_data(cfg, progress=progress)  # written once here, not raced by the ranks
    entry = COMPONENT_ENTRY if spec.local or spec.paired else ENTRY
    run = launch(entry, {"spec": spec.for_ranks(cfg)}, lc, run_dir=run_dir, quiet=quiet)
    if run.result is None:  # multi-node: rank 0, which gathers the results, ran elsewhere
        return None
    ranks = run.result["ranks"]
    out = {
        "world_size": lc.world_size, "nnodes": lc.nnodes, "backend": lc.resolved_backend(),
        "device": ranks[0]["device"], "preset": spec.preset, "iterations": spec.iters,
        "warmup": spec.warmup, "bare": spec.bare, "injection": spec.injection.to_dict(),
        "injection_text": spec.injection.describe() if spec.injection.active else None,
        "threads_per_rank": lc.threads_per_rank, "loader_workers": ranks[0]["loader_workers"],
        "images_per_rank": cfg.images_per_rank, "crop_size": list(cfg.crop_size),
        "bucket_sizes_bytes": ranks[0]["bucket_sizes_bytes"],
        "ddp_options": spec.ddp.changed(), "local": spec.local,
        # the precision the ranks applied, as rank 0 labelled it (all apply the spec's)
        "precision": ranks[0].get("precision"),
        "utilisation": {str(r["rank"]): {"cpu": r["cpu"], "gpu": r["gpu"]} for r in ranks},
        "environment": environment(),
        "wall_s": run.wall_s, "ranks": ranks,
    }
    out.update(step_times(ranks, spec.ddp.grad_accum))
    if spec.bare:
        out["iter_s"] = statistics.median(statistics.median(r["iteration"]) for r in ranks)
        return out
    out.update(aggregate_phases(ranks, PHASES))
    out["ddp_cross_check"] = cross_check(ranks)
    out.update(blame_figures(ranks, spec.warmup, spec.injection))
    timelines = {r["rank"]: r["timeline"] for r in ranks}
    if not spec.local:  # the buckets' all-reduces as the run had them (a local run has none)
        out["bucket_spans"] = bucket_spans(timelines, spec.warmup)
    annotate(timelines)  # sync_wait / transfer on every blocking collective, for the trace
    out["residual_s"] = out["iter_s"] - sum(out["blame_s"].values())
    out["clock"] = _clock_summary(ranks)
    if spec.paired:
        out["local_run"] = local_run(out, ranks, spec.ddp.grad_accum)
    return out


def _clock_summary(ranks: list[dict]) -> dict:
    """How the ranks' timelines were made comparable, and how well (seconds)."""
    clocks = [r["clock"] for r in ranks]
    return {"kind": clocks[0].get("kind"), "same_host": clocks[0]["same_host"],
            "hosts": clocks[0]["hosts"],
            "offsets_applied_s": [c["applied_offset_s"] for c in clocks],
            "offsets_estimated_s": [c["estimated_offset_s"] for c in clocks],
            "offset_error_s": max(c["error_s"] for c in clocks),
            # host clocks' drift between the estimates before and after the run (applied
            # across hosts), and the GPU event-to-host mapping's error
            "drift_ppm": [c.get("drift_ppm") for c in clocks],
            "alignment_error_s": max((c.get("alignment_error_s") or 0.0) for c in clocks),
            "blame_resolution_s": blame_resolution(clocks)}


def environment() -> dict:
    """What asv's machine info lacks: library versions, accelerators, and the CPUs this run
    could use (``cpu_count`` is the machine's; ``cpu_affinity`` is what the ranks got)."""
    cuda = torch.cuda.is_available()
    return {
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "cpu_count": os.cpu_count(), "cpu_affinity": cpu_affinity(),
        "python": platform.python_version(), "platform": platform.platform(),
    }


def cpu_affinity() -> dict | None:
    """The CPUs this process may run on, which its ranks and loader workers inherit.

    A batch scheduler can confine a task to fewer cores than the machine has (SLURM's default
    is one CPU per task): ranks and loaders then share them, ``data_wait`` grows and blame
    names the loader. Recorded so such a run shows it. None where the OS has no affinity API.
    """
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return {"count": len(cpus), "cpus": cpus}
