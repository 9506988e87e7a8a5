"""``swinkit converge``: steps to a held-out target per world size, per-rank batch and
learning-rate rule, the time to the target, and goodput.

Two kinds of launch:

* per world size, one convergence launch (:func:`swinkit.rank.converge.converge_rank`) that
  trains every (batch, rule, seed) of the grid to the target in turn, and measures the
  gradient noise scale on the way;
* after all of them, per per-rank batch and world size in turn, the step time as swinkit
  measures it for that configuration: the DDP iteration of ``swinkit ddp --bare``
  (:func:`swinkit.runs.ddp_run.run_ddp`, the same overrides, ``step_iters`` measured
  iterations after 3 of warm-up, the median over ranks of each rank's median). Time to
  target = steps x that step time.

The numbers are :mod:`swinkit.attribution.convergence`'s. A launch that fails is recorded with
its diagnosis and the grid goes on; its cells are reported as failed, never as numbers.
"""
from __future__ import annotations

import time

from swinkit.attribution.convergence import summarize
from swinkit.config import resolve_data_root
from swinkit.data.loader import ensure_data
from swinkit.data.validation import check_validation_split
from swinkit.experiments.converge_spec import ConvergeSpec
from swinkit.experiments.provenance import foreign_load, git_commit, machine, now_utc
from swinkit.launch import LaunchConfig, LaunchError, launch
from swinkit.runs.ddp_run import DDPRunSpec, run_ddp

ENTRY = "swinkit.rank.converge:converge_rank"
STEP_WARMUP = 3
# CPU runs get SyncBN's CPU stand-in in the heads unless the user says otherwise: the GPU
# presets' SyncBN normalises over the global batch, and so must the CPU runs whose convergence
# stands in for them (plain BN would normalise over one rank's images at every world size)
CONVERGE_OVERRIDES = {"cpu_sync_bn": True}
SYNTHETIC_NOTE = ("the synthetic ADE20K is a learnable stand-in, not ADE20K: its classes have "
                  "their own colours and textures, and the model starts from random weights (no "
                  "pretrained checkpoint can be fetched here); steps to its target say how "
                  "batch and world size change convergence, not what ADE20K would need")


def run_converge(spec: ConvergeSpec, progress=print) -> dict:
    """Every launch of the grid; returns the record ``swinkit converge`` writes as JSON."""
    spec = _with_defaults(spec).validate()
    plan = spec.plan()
    cfg = spec.base_config()
    root, synthetic = resolve_data_root(spec.data_root)
    ensure_data(cfg, progress=progress)  # written once here, not raced by the ranks
    check_validation_split(cfg.data_root)
    for ws in spec.world_sizes:  # cores or GPUs enough, before the first launch
        _launch_config(spec, ws).validate()
    started, t0, load = now_utc(), time.monotonic(), foreign_load()
    runs, step_times, failed = [], {}, {}
    for ws, cell_runs in plan.items():
        try:
            runs += train_to_target(spec, cfg, ws, cell_runs, progress=progress)
        except LaunchError as exc:
            failed[f"converge {ws}"] = exc.diagnosis.summary
            progress(f"world size {ws}: FAILED: {exc.diagnosis.summary}")
    # after the training, one after another: the world sizes a time efficiency compares
    # share the machine's moment (a shared host's load moves over minutes)
    for b, ws in ((b, ws) for b in spec.batches for ws in spec.world_sizes):
        progress(f"world size {ws}, batch {b}/rank: step time ({spec.step_iters} iterations "
                 "of swinkit ddp --bare)")
        try:
            step_times[(ws, b)] = _step_time(spec, ws, b)
        except LaunchError as exc:
            failed[f"step time {ws},{b}"] = exc.diagnosis.summary
            progress(f"  FAILED: {exc.diagnosis.summary}")
    base_batch = cfg.images_per_rank
    return {
        "kind": "swinkit-converge", "preset": spec.preset, "data_root": str(root),
        "synthetic_data": synthetic, "data_note": SYNTHETIC_NOTE if synthetic else None,
        "target": {"loss": spec.target_loss, "miou_pct": spec.target_miou},
        "eval_every": spec.eval_every, "max_steps": spec.max_steps, "warmup": spec.warmup,
        "seeds": spec.seeds, "world_sizes": list(spec.world_sizes), "batches": list(spec.batches),
        "lr_rules": list(spec.lr_rules), "base_batch": base_batch,
        "base_lr": float(cfg.optim_wrapper.optimizer.lr),
        "optimizer": cfg.optim_wrapper.optimizer.type, "overrides": spec.overrides,
        "step_times": {f"{ws},{b}": t for (ws, b), t in step_times.items()},
        "runs": runs, "failed": failed,
        **summarize(runs, {k: t["step_s"] for k, t in step_times.items()}, base_batch),
        "machine": machine(), **git_commit(), "started": started, "finished": now_utc(),
        "wall_s": time.monotonic() - t0, "foreign_cores": load(),
    }


def train_to_target(spec: ConvergeSpec, cfg, world_size: int, runs: list[dict],
                    quiet: bool = False, progress=print) -> list[dict]:
    """One convergence launch at ``world_size``: the records of ``runs`` (from
    :meth:`ConvergeSpec.plan`, trained in turn), as rank 0 returns them. Raises LaunchError.

    Runs that differ only in their rule's name (every rule gives lr0 where the global batch
    is the base batch) are trained once; each keeps its own rule and names the rule whose
    run it shares (``same_run_as``)."""
    key = lambda r: (r["batch"], r["lr"], r["warmup"], r["seed"])  # noqa: E731
    unique: dict = {}
    for r in runs:
        unique.setdefault(key(r), r)
    shared = len(runs) - len(unique)
    progress(f"world size {world_size}: {len(runs)} runs to the target" + (
        f" ({len(unique)} trained; {shared} the same as another rule's)" if shared else ""))
    result = launch(ENTRY, _rank_kwargs(spec, cfg, list(unique.values())),
                    _launch_config(spec, world_size),
                    quiet=quiet)
    done = {key(r): r for r in result.result["ranks"][0]["runs"]}
    return [dict(done[key(r)], lr_rule=r["lr_rule"],
                 same_run_as=None if done[key(r)]["lr_rule"] == r["lr_rule"]
                 else done[key(r)]["lr_rule"]) for r in runs]


def _with_defaults(spec: ConvergeSpec) -> ConvergeSpec:
    """The CPU stand-in of SyncBN unless the user's overrides say otherwise."""
    import dataclasses
    return dataclasses.replace(spec, overrides={**CONVERGE_OVERRIDES, **spec.overrides})


def _launch_config(spec: ConvergeSpec, world_size: int) -> LaunchConfig:
    return LaunchConfig(nproc_per_node=world_size, allow_oversubscribe=spec.oversubscribe,
                        wall_timeout_s=spec.wall_timeout_s, backend=spec.backend)


def _rank_kwargs(spec: ConvergeSpec, cfg, runs: list[dict]) -> dict:
    return dict(preset=spec.preset, data_root=cfg.data_root, overrides=dict(spec.overrides),
                device=_device(spec, runs[0]["world_size"]), runs=runs,
                target={"loss": spec.target_loss, "miou_pct": spec.target_miou},
                eval_every=spec.eval_every, max_steps=spec.max_steps,
                reduction=spec.reduction, workers=spec.workers)


def _device(spec: ConvergeSpec, world_size: int) -> str:
    """The backend decides the device, as for ``swinkit ddp``: gloo ranks run on CPU."""
    return "cuda" if _launch_config(spec, world_size).resolved_backend() == "nccl" else "cpu"


def _step_time(spec: ConvergeSpec, world_size: int, batch: int) -> dict:
    """The bare DDP iteration's step time at this world size and per-rank batch."""
    run = DDPRunSpec(preset=spec.preset, nproc_per_node=world_size, iters=spec.step_iters,
                     warmup=STEP_WARMUP, workers=spec.workers, data_root=spec.data_root,
                     overrides={**spec.overrides, "images_per_rank": batch}, bare=True,
                     launch=_launch_config(spec, world_size))
    result = run_ddp(run, progress=lambda s: None)
    rank0 = sorted(result["ranks"][0]["iteration"])
    q = lambda f: rank0[min(int(f * len(rank0)), len(rank0) - 1)]  # noqa: E731
    return {"step_s": result["iter_s"], "rank0_q25_s": q(0.25), "rank0_q75_s": q(0.75),
            "iterations": spec.step_iters}


def bench_cells(world_sizes: list[int], batches: list[int], lr_rules: list[str], seeds: int,
                target_loss: float, max_steps: int, oversubscribe: bool = False,
                progress=print) -> dict:
    """For ``benchmarks/bench_converge.py``: the test preset's grid at the world sizes this
    machine runs, per world size ``{"cells": {"b/rule": cell}, "scaling": {"b/rule": row},
    "goodput": {b: row}}``, and ``"failed"``: world size -> why its launch failed."""
    spec = ConvergeSpec(preset="test", world_sizes=tuple(world_sizes), batches=tuple(batches),
                        lr_rules=tuple(lr_rules), seeds=seeds, target_loss=target_loss,
                        max_steps=max_steps, oversubscribe=oversubscribe)
    result = run_converge(spec, progress)
    out = {ws: {"cells": {}, "scaling": {}, "goodput": {}} for ws in world_sizes}
    for cell in result["cells"]:
        out[cell["world_size"]]["cells"][f"{cell['batch']}/{cell['lr_rule']}"] = cell
    for row in result["scaling"]:
        out[row["world_size"]]["scaling"][f"{row['batch']}/{row['lr_rule']}"] = row
    for row in result["goodput"]["rows"]:
        out[row["world_size"]]["goodput"][row["batch"]] = row
    failed = {int(what.split()[-1].split(",")[0]): why for what, why in result["failed"].items()}
    return {"world_sizes": out, "failed": failed, "noise_scale": result["goodput"]["noise_scale"]}
