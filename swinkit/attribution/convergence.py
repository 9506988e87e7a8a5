"""Steps to a held-out target, as numbers: per cell, across world sizes, and as goodput.

A *run* is one seed of one *cell* (world size, per-rank batch, learning-rate rule) trained to
the target or to its step budget (``swinkit.rank.converge``'s records). A run that missed
counts as "more than its budget", never as a number: a cell's median is a number only where
more than half its seeds reached the target, and its spread says ``>`` where one missed.

Across world sizes, for one per-rank batch b and learning-rate rule (weak scaling: the global
batch grows with N), with T the step time and s the steps to the target::

    efficiency in time   E_time(N)   = T(1) / T(N)              (1: a step costs the same)
    efficiency in steps  E_steps(N)  = s(1) / (N s(N))          (1: N times fewer steps)
    to the target        E_target(N) = E_time(N) x E_steps(N) = time(1) / (N time(N))

E_steps is the measured statistical efficiency of the global batch N b against b; Pollux's
EFF from the noise scale predicts it (:mod:`swinkit.attribution.noise_scale`).
"""
from __future__ import annotations

import math
import statistics

from swinkit.attribution.noise_scale import (goodput, noise_scale, pooled_noise_scale,
                                             statistical_efficiency)


def _median(values: list[float]) -> float:
    """Median where misses are +inf (inf where more than half missed)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2


def cell_summary(runs: list[dict], step_s: float | None) -> dict:
    """One cell from its seeds' runs (records with ``world_size``, ``batch``, ``lr_rule``,
    ``lr``, ``steps`` (None: missed), ``steps_run``, ``outcome``, ``train_images``).

    >>> runs = [dict(world_size=1, batch=2, lr_rule="none", lr=1e-3, steps=s, steps_run=s or 50,
    ...              outcome="reached" if s else "budget", train_images=100)
    ...         for s in (20, 30, None)]
    >>> c = cell_summary(runs, 0.5)
    >>> c["steps"], c["steps_min"], c["steps_max"], c["reached"], c["time_to_target_s"]
    (30, 20, None, 2, 15.0)
    """
    first = runs[0]
    ws, batch = first["world_size"], first["batch"]
    steps = [r["steps"] if r["steps"] is not None else math.inf for r in runs]
    med = _median(steps)
    finite = lambda x: None if math.isinf(x) else x  # noqa: E731
    global_batch = ws * batch
    out = {"world_size": ws, "batch": batch, "lr_rule": first["lr_rule"], "lr": first["lr"],
           "global_batch": global_batch, "seeds": len(runs),
           "reached": sum(r["outcome"] == "reached" for r in runs),
           "diverged": sum(r["outcome"] == "diverged" for r in runs),
           "budget": max(r["steps_run"] for r in runs),
           "steps": finite(med), "steps_min": finite(min(steps)), "steps_max": finite(max(steps)),
           "step_s": step_s}
    per = lambda k: None if out["steps"] is None else k * out["steps"]  # noqa: E731
    out.update(images=per(global_batch), epochs=per(global_batch / first["train_images"]),
               time_to_target_s=per(step_s) if step_s is not None else None,
               time_to_target_min_s=(out["steps_min"] * step_s
                                     if out["steps_min"] is not None and step_s else None),
               time_to_target_max_s=(out["steps_max"] * step_s
                                     if out["steps_max"] is not None and step_s else None))
    out["missed"] = out["steps"] is None
    return out


def cells(runs: list[dict], step_times: dict) -> list[dict]:
    """Every cell's summary, ordered by (rule, batch, world size); ``step_times`` maps
    ``(world_size, batch)`` to the step time in seconds (missing: no time to target)."""
    groups: dict = {}
    for r in runs:
        groups.setdefault((r["lr_rule"], r["batch"], r["world_size"]), []).append(r)
    return [cell_summary(groups[k], step_times.get((k[2], k[1]))) for k in sorted(groups)]


def scaling(cell_rows: list[dict]) -> list[dict]:
    """Efficiency in time, in steps and to the target, per world size against world size 1
    with the same per-rank batch and rule (rows without world size 1 are left out)."""
    base = {(c["lr_rule"], c["batch"]): c for c in cell_rows if c["world_size"] == 1}
    out = []
    for c in cell_rows:
        b = base.get((c["lr_rule"], c["batch"]))
        if b is None:
            continue
        n = c["world_size"]
        e_time = (b["step_s"] / c["step_s"]) if b["step_s"] and c["step_s"] else None
        e_steps = (b["steps"] / (n * c["steps"])) if b["steps"] and c["steps"] else None
        e_target = e_time * e_steps if e_time is not None and e_steps is not None else None
        out.append({"lr_rule": c["lr_rule"], "batch": c["batch"], "world_size": n,
                    "efficiency_time": e_time, "efficiency_steps": e_steps,
                    "efficiency_target": e_target,
                    "speedup_target": n * e_target if e_target is not None else None})
    return out


def noise_estimates(runs: list[dict]) -> list[dict]:
    """Each run's noise scale where it had two batch sizes (world size >= 2)."""
    out = []
    for r in runs:
        n = r.get("noise") or {}
        if not n.get("steps") or n["b_big"] <= n["b_small"]:
            continue
        est = noise_scale(n["b_small"], n["b_big"], n["small_sq"], n["big_sq"])
        out.append({"world_size": r["world_size"], "batch": r["batch"], "lr_rule": r["lr_rule"],
                    "seed": r["seed"], "steps": n["steps"], "grad_sq": est.grad_sq,
                    "trace_sigma": est.trace_sigma, "b_simple": est.b_simple})
    return out


def goodput_table(cell_rows: list[dict], estimates: list[dict], base_batch: int) -> dict:
    """Throughput, Pollux's statistical efficiency and goodput per (world size, per-rank
    batch), with the gradient noise scale pooled over the runs (:func:`pooled_noise_scale`;
    also per batch per rank, and each run's own where its |G|^2 came out positive), and the
    measured efficiency beside the predicted one where the base batch's cell reached it.

    The throughput is the global batch over the step time (the learning-rate rule does not
    change it); the best row is the one with the highest goodput."""
    pooled = pooled_noise_scale(estimates)
    phi = pooled.b_simple if pooled else None
    steps_at = {(c["lr_rule"], c["global_batch"]): c["steps"] for c in cell_rows}
    rows, seen = [], set()
    for c in sorted(cell_rows, key=lambda c: (c["batch"], c["world_size"])):
        key = (c["world_size"], c["batch"])
        if key in seen or not c["step_s"]:
            continue
        seen.add(key)
        m = c["global_batch"]
        throughput = m / c["step_s"]
        row = {"world_size": c["world_size"], "batch": c["batch"], "global_batch": m,
               "images_per_s": throughput,
               "efficiency": statistical_efficiency(phi, m, base_batch) if phi is not None else None,
               "goodput": goodput(throughput, phi, m, base_batch) if phi is not None else None,
               "measured_efficiency": {}}
        for c2 in cell_rows:  # per rule: images to the target at m0 over those at M
            base_steps = steps_at.get((c2["lr_rule"], base_batch))
            if (c2["world_size"], c2["batch"]) == key and c2["steps"] and base_steps:
                row["measured_efficiency"][c2["lr_rule"]] = (base_batch * base_steps
                                                             / (m * c2["steps"]))
        rows.append(row)
    best = max((r for r in rows if r["goodput"] is not None), key=lambda r: r["goodput"],
               default=None)
    by_batch = {}
    for b in sorted({e["batch"] for e in estimates}):
        alone = pooled_noise_scale([e for e in estimates if e["batch"] == b])
        by_batch[b] = alone.b_simple if alone else None
    per_run = [e["b_simple"] for e in estimates if e["b_simple"] is not None]
    return {"noise_scale": phi, "base_batch": base_batch, "runs_estimated": len(estimates),
            # runs whose own |G|^2 estimate came out <= 0: their noise swamped the signal
            "runs_noise_dominated": len(estimates) - len(per_run),
            "noise_scale_spread": [min(per_run), max(per_run)] if per_run else None,
            "noise_scale_by_batch": by_batch, "rows": rows,
            "best": {k: best[k] for k in ("world_size", "batch", "goodput")} if best else None}


def summarize(runs: list[dict], step_times: dict, base_batch: int) -> dict:
    """Everything the report shows: cells, scaling, noise estimates, goodput."""
    rows = cells(runs, step_times)
    estimates = noise_estimates(runs)
    return {"cells": rows, "scaling": scaling(rows), "noise_estimates": estimates,
            "goodput": goodput_table(rows, estimates, base_batch),
            "median_in_run_step_s": {f"{ws},{b}": statistics.median(
                r["in_run_step_s"] for r in runs if (r["world_size"], r["batch"]) == (ws, b))
                for ws, b in sorted({(r["world_size"], r["batch"]) for r in runs})}}


def efficiency_from_asv(steps: dict, time: dict, target: dict) -> list[dict]:
    """``bench_converge.Efficiency``'s stored tracks as rows (one per world size, per-rank
    batch and rule): efficiency in steps beside efficiency in time. The arguments are the
    three tracks as :func:`swinkit.attribution.inputs` reads a benchmark ({(world size, batch,
    rule) as strings: {"value": ...}}); [] where the results have none.

    >>> efficiency_from_asv({("2", "2", "linear"): {"value": 0.8}},
    ...                     {("2", "2", "linear"): {"value": 0.9}}, {})
    [{'lr_rule': 'linear', 'batch': 2, 'world_size': 2, 'efficiency_time': 0.9, 'efficiency_steps': 0.8, 'efficiency_target': None}]
    """
    keys = sorted(set(steps) | set(time), key=lambda k: (k[2], int(k[1]), int(k[0])))
    value = lambda table, key: table.get(key, {}).get("value")  # noqa: E731
    return [{"lr_rule": rule, "batch": int(b), "world_size": int(ws),
             "efficiency_time": value(time, (ws, b, rule)),
             "efficiency_steps": value(steps, (ws, b, rule)),
             "efficiency_target": value(target, (ws, b, rule))} for ws, b, rule in keys]
