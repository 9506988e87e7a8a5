"""The same workload under every engine: dispatch an :class:`~swinkit.runs.engine_spec.EngineSpec`
as its record says (:mod:`swinkit.runs.engine_records`), aggregate what its ranks measured in
swinkit's vocabulary, and add what engines differ in: bytes moved per iteration,
gradient-communication rounds per optimizer step, communication per image, peak memory and
model-state bytes per rank.

    ddp_run      swinkit.runs.ddp_run.run_ddp, unchanged (its JSON, plus ``engine``)
    ranks        one process per rank, launched like DDP's (swinkit.launch), the record's entry
    one_process  one process driving the world size's GPUs (DataParallel)

Every result carries the DDP result's fields that describe an iteration (``phases_s``,
``iter_s``, ``blame_s``, ...) and an ``engine`` block (see
:func:`~swinkit.runs.engine_result.engine_block`).
"""
from __future__ import annotations

import dataclasses

from swinkit.attribution.blame import annotate, compute_blame, summarize_blame
from swinkit.data.loader import ensure_data
from swinkit.launch import LaunchConfig, launch
from swinkit.runs.engine_records import COMPARED, KEYS
from swinkit.runs.engine_spec import EngineSpec, EngineUnavailable, spec_for_key
from swinkit.measure.aggregate import aggregate_phases
from swinkit.measure.phases import PHASES
from swinkit.runs.engine_result import ds_cross_check, engine_block
from swinkit.runs.ddp_run import _clock_summary, environment, run_ddp


def run_engine(spec: EngineSpec, quiet: bool = True, run_dir=None, progress=print) -> dict | None:
    """Validate (ValueError, EngineUnavailable), launch, aggregate; LaunchError if a rank fails."""
    spec.validate()
    if spec.record.shape == "ddp_run":
        result = run_ddp(spec.ddp_spec(), quiet=quiet, run_dir=run_dir, progress=progress)
        if result is not None:
            result["engine"] = engine_block(spec, result)
        return result
    cfg, lc = spec.run.validate()
    ensure_data(cfg, progress=progress)
    run, world, backend = _launch_ranks(spec, cfg, lc, quiet, run_dir)
    if run.result is None:
        return None
    ranks = run.result["ranks"]
    out = {
        "world_size": world, "nnodes": lc.nnodes, "backend": backend,
        "device": ranks[0]["device"], "preset": spec.run.preset, "iterations": spec.run.iters,
        "warmup": spec.run.warmup, "bare": False, "injection": spec.run.injection.to_dict(),
        "injection_text": None, "threads_per_rank": lc.threads_per_rank,
        "loader_workers": ranks[0]["loader_workers"], "images_per_rank": cfg.images_per_rank,
        "crop_size": list(cfg.crop_size),
        # the precision the ranks applied, as rank 0 labelled it (as DDP's result has it)
        "precision": ranks[0].get("precision"),
        "utilisation": {str(r["rank"]): {"cpu": r["cpu"], "gpu": r["gpu"]} for r in ranks},
        "environment": environment(), "wall_s": run.wall_s, "ranks": ranks,
    }
    out.update(aggregate_phases(ranks, PHASES))
    timelines = {r["rank"]: r["timeline"] for r in ranks}
    blame = compute_blame(timelines, spec.run.warmup)
    out.update(summarize_blame(blame))
    annotate(timelines)
    out["residual_s"] = out["iter_s"] - sum(out["blame_s"].values())
    out["clock"] = _clock_summary(ranks)
    if spec.record.own_timers:
        out["ds_cross_check"] = ds_cross_check(ranks)
    out["engine"] = engine_block(spec, out)
    return out


def _launch_ranks(spec: EngineSpec, cfg, lc: LaunchConfig, quiet: bool, run_dir):
    """Start the record's entry in its shape: (the launch, world size, backend named)."""
    rec = spec.record
    overrides = dict(spec.run.overrides)
    if spec.run.precision:   # the spec's field, as DDP's ranks receive it: the preset knob here
        overrides["precision"] = spec.run.precision
    kwargs = dict(preset=spec.run.preset, iters=spec.run.iters, warmup=spec.run.warmup,
                  workers=spec.run.workers, data_root=cfg.data_root,
                  overrides=overrides, grad_accum=spec.grad_accum,
                  **rec.rank_kwargs, **spec.options())
    if rec.shape == "one_process":
        one = LaunchConfig(nproc_per_node=1, backend="gloo", threads_per_rank=lc.threads_per_rank,
                           wall_timeout_s=lc.wall_timeout_s, pg_timeout_s=lc.pg_timeout_s,
                           join_timeout_s=lc.join_timeout_s)
        run = launch(rec.entry, dict(kwargs, n_devices=spec.run.nproc_per_node), one,
                     run_dir=run_dir, quiet=quiet)
        return run, spec.run.nproc_per_node, "cuda copies (one process)"
    run = launch(rec.entry, dict(kwargs, device=cfg.device), lc, run_dir=run_dir,
                 env=rec.env(cfg.device), quiet=quiet)
    return run, lc.world_size, lc.resolved_backend()


# ----------------------------------------------------------------- several engines

def run_engines(keys, world_sizes, run, grad_accum: int = 1, progress=print, quiet=True,
                **spec_kw) -> dict:
    """Every engine key at every world size: ``{(key, ws): result}`` plus the reasons for what
    did not run (``{"skipped": {(key, ws): reason}, "failed": {...}}``)."""
    from swinkit.launch import LaunchError
    results, skipped, failed = {}, {}, {}
    for ws in world_sizes:
        base = dataclasses.replace(run, nproc_per_node=ws)
        for key in keys:
            spec = spec_for_key(key, base, grad_accum=grad_accum, **spec_kw)
            try:
                spec.validate()
            except EngineUnavailable as exc:
                skipped[(key, ws)] = str(exc)
                progress(f"  {key}, world size {ws}: skipped: {exc}")
                continue
            where = f"{key}, world size {ws}" + (f", K={grad_accum}" if grad_accum > 1 else "")
            progress(f"  {where}: {run.warmup} + {run.iters} optimizer steps")
            try:
                results[(key, ws)] = run_engine(spec, quiet=quiet, progress=progress)
            except LaunchError as exc:
                failed[(key, ws)] = exc.diagnosis.summary
                progress(f"  {where}: FAILED: {exc.diagnosis.summary}")
    return {"results": results, "skipped": skipped, "failed": failed}


def run_engines_by_k(keys, world_sizes, run, ks, progress=print, quiet=True, **spec_kw) -> dict:
    """:func:`run_engines` at each gradient accumulation K, keyed ``(key, ws, K)``. Every spec
    is validated first, so a K that cannot run fails (ValueError) before any process starts,
    not after the smaller K's runs."""
    for k in ks:
        for ws in world_sizes:
            base = dataclasses.replace(run, nproc_per_node=ws)
            for key in keys:
                spec = spec_for_key(key, base, grad_accum=k, **spec_kw)
                try:
                    spec.validate()
                except EngineUnavailable:
                    continue  # run_engines records it as skipped, with the reason
                (spec.ddp_spec() if spec.record.shape == "ddp_run" else spec.run).validate()
    out = {"results": {}, "skipped": {}, "failed": {}}
    for k in ks:
        runs = run_engines(keys, world_sizes, run, grad_accum=k, progress=progress, quiet=quiet,
                           **spec_kw)
        for part, values in runs.items():
            out[part].update({(key, ws, k): v for (key, ws), v in values.items()})
    return out


def compare_rows(runs: dict) -> list[dict]:
    """One row per (engine, world size[, K]) that ran: iteration, efficiency against the same
    engine (and K) at world size 1, blame, bytes, memory. Keys are ``(key, ws)`` from
    :func:`run_engines` or ``(key, ws, K)`` from :func:`run_engines_by_k`."""
    results = runs["results"]
    rows = []

    def order(item):
        key, ws, *k = item[0]
        return ws, list(KEYS).index(key) if key in KEYS else 99, k
    for (key, ws, *k), r in sorted(results.items(), key=order):
        base = results.get((key, 1, *k))
        eng = r["engine"]
        rows.append({
            "engine": key, "world_size": ws, "iter_s": eng["step_s"],
            "efficiency": base["engine"]["step_s"] / eng["step_s"] if base else None,
            "blame_s": eng.get("step_blame_s") or eng["step_phases_s"],
            "message_bytes": eng["traffic"]["message_bytes"],
            "wire_bytes_per_rank": eng["traffic"]["wire_bytes_per_rank"],
            "comm_rounds_per_step": eng["traffic"]["comm_rounds_per_step"],
            "comm_per_image_s": eng["comm_per_image_s"],
            "wire_bytes_per_image": eng.get("wire_bytes_per_image"),
            "peak_memory_bytes": eng["peak_memory_bytes"],
            "optimizer_state_bytes": _state(eng, "optimizer_states"),
            "grad_accum": eng["grad_accum"],
            # the label the ranks gave it; a result from before precisions were applied: fp32
            "precision": (r.get("precision") or {}).get("label") or "fp32",
        })
    return rows


def _state(eng: dict, key: str):
    values = [s[key] for s in eng["model_state"].values() if s and s.get(key) is not None]
    return max(values) if values else None


def engine_sweep(preset: str, keys=COMPARED, world_sizes=(1, 2, 4, 8), grad_accum: int = 1,
                 iters: int = 10, warmup: int = 3, wall_timeout_s: float = 900.0,
                 progress=print):
    """A :class:`~swinkit.runs.sweep.Sweep` keyed ``(engine key, world size)``: what this
    machine cannot run is skipped with the reason (more ranks than cores or GPUs; DataParallel
    without GPUs; DeepSpeed not installed), a failed run is recorded as failed."""
    from swinkit.runs.ddp_run import DDPRunSpec
    from swinkit.runs.sweep import Sweep, plan_world_sizes, sweep_launch
    sweep = Sweep(meta={"preset": preset, "iters": iters, "warmup": warmup,
                        "grad_accum": grad_accum, "environment": environment()})
    plan = plan_world_sizes(world_sizes)
    for ws in world_sizes:
        run = DDPRunSpec(preset=preset, nproc_per_node=ws, iters=iters, warmup=warmup,
                         launch=sweep_launch(ws, wall_timeout_s))
        for key in keys:
            spec = spec_for_key(key, run, grad_accum=grad_accum)
            if spec.record.shape != "one_process" and plan[ws]:  # ranks need cores or GPUs
                sweep.skipped[(key, ws)] = plan[ws]
                continue
            try:
                spec.validate()
            except EngineUnavailable as exc:
                sweep.skipped[(key, ws)] = str(exc)
                continue
            progress(f"  {key}, preset {preset}, world size {ws}, grad_accum {grad_accum}: "
                     f"{warmup} + {iters} optimizer steps")
            sweep.run((key, ws), lambda: run_engine(spec, progress=progress), progress)
    return sweep
