"""Measurements for the attribution: from asv's stored results, or from a fresh sweep.

Both paths give the same thing: per world size a :class:`~swinkit.attribution.Measured` DDP
iteration and the :class:`~swinkit.prediction.Isolated` component costs, plus metadata.
Corrupt or partial asv result files are skipped and named, never fatal.
"""
from __future__ import annotations

import itertools
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from swinkit.attribution import COMPONENTS, Measured
from swinkit.prediction import Isolated


class InputError(ValueError):
    """No usable measurements; the message says which command makes them."""


@dataclass
class Inputs:
    measured: dict[int, Measured]
    isolated: dict[int, Isolated] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    skipped_files: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)


# ---------------------------------------------------------------- from asv results

def _load_results(results_dir: Path, machine: str | None, commit: str | None):
    """(machine, commit, data, skipped) of the chosen results file."""
    if not results_dir.is_dir():
        raise InputError(f"no asv results at {results_dir}: run `python tools/suite.py` "
                         "(or `asv run`) first, or use --run")
    machines = sorted(p.name for p in results_dir.iterdir() if p.is_dir())
    if machine and machine not in machines:
        raise InputError(f"no results for machine {machine!r} in {results_dir} (have: {machines})")
    skipped, candidates = [], []
    for m in [machine] if machine else machines:
        for path in sorted((results_dir / m).glob("*.json")):
            if path.name == "machine.json":
                continue
            try:
                data = json.loads(path.read_text())
                data["results"], data["commit_hash"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                skipped.append(f"{path} ({type(exc).__name__})")
                continue
            if commit and not data["commit_hash"].startswith(commit):
                continue
            if "bench_ddp.Phase.track_mean_seconds" in data["results"]:
                candidates.append((data.get("date", 0), m, data))
    if not candidates:
        what = f"commit {commit}" if commit else "any commit"
        raise InputError(f"no DDP results for {what} in {results_dir}: run `python tools/suite.py`"
                         + (f" (skipped unreadable: {', '.join(skipped)})" if skipped else ""))
    _, m, data = max(candidates, key=lambda c: c[0])
    return m, data["commit_hash"], data, skipped


def _table(data: dict, name: str) -> dict[tuple, dict]:
    """{param tuple: {"value", "q25", "q75", "samples"}} for one benchmark."""
    row = data["results"].get(name)
    if row is None:
        return {}
    cols = {c: row[i] if i < len(row) else None for i, c in enumerate(data["result_columns"])}
    combos = list(itertools.product(*cols["params"]))
    out = {}
    for i, combo in enumerate(combos):
        value = (cols["result"] or [None] * len(combos))[i]
        if value is None or value != value:
            continue
        pick = lambda key: (cols.get(key) or [None] * len(combos))[i]  # noqa: E731
        out[tuple(str(p).strip("'") for p in combo)] = {
            "value": value, "q25": pick("stats_q_25"), "q75": pick("stats_q_75"),
            "samples": pick("samples")}
    return out


def from_asv(results_dir: Path, machine: str | None = None, commit: str | None = None) -> Inputs:
    machine, commit, data, skipped = _load_results(Path(results_dir), machine, commit)
    phases = _table(data, "bench_ddp.Phase.track_mean_seconds")
    means = _table(data, "bench_ddp.Iteration.track_mean_iteration")
    iters = _table(data, "bench_ddp.Iteration.track_iteration")  # samples: the spread
    measured = {}
    for (ws,), mean in means.items():
        comps = {c: phases[(ws, c)]["value"] for c in COMPONENTS if (ws, c) in phases}
        if len(comps) != len(COMPONENTS):
            continue
        it = iters.get((ws,), {})
        iqr = ((it["q75"] - it["q25"]) / it["value"]
               if it.get("q75") is not None and it.get("value") else None)
        measured[int(ws)] = Measured(int(ws), mean["value"], comps, iqr,
                                     len(it["samples"]) if it.get("samples") else None)
    env = _environment(Path(results_dir), machine, commit)
    inputs = Inputs(measured, meta={"commit": commit, "machine": machine, "source": "asv",
                                    "preset": env.get("preset"), "backend": env.get("backend"),
                                    "environment": env}, skipped_files=skipped)
    inputs.isolated = _isolated_from_asv(data, measured)
    return inputs


def _environment(results_dir: Path, machine: str, commit: str) -> dict:
    """tools/suite.py's record of the run (preset, backend, versions); {} if absent/unreadable."""
    from swinkit.asv_suite import environment_path
    try:
        return json.loads(environment_path(results_dir, machine, commit).read_text())
    except (OSError, ValueError):
        return {}


def _isolated_from_asv(data: dict, measured: dict[int, Measured]) -> dict[int, Isolated]:
    model = _table(data, "bench_model.ForwardBackward.track_time")
    supply = _table(data, "bench_data.Loader.track_images_per_s_per_rank")
    comm = _table(data, "bench_comm.AllReduce.track_time")
    meta = _table(data, "bench_ddp.Iteration.track_last_bucket_fraction")
    layout = _table(data, "bench_ddp.Iteration.track_loader_workers")
    images = _table(data, "bench_ddp.Iteration.track_images_per_rank")
    out = {}
    for ws in measured:
        key = (str(ws),)
        try:
            preset = next(p for (p, b, s, o) in model if b == "per_rank")
            get = lambda op: model[(preset, "per_rank", "segmentor", op)]["value"]  # noqa: E731
            workers = int(layout[key]["value"])
            out[ws] = Isolated(ws, get("forward"), get("forward_backward"), get("optimizer"),
                               int(images[key]["value"]), workers,
                               supply[(str(ws), str(workers))]["value"],
                               comm[(str(ws), "preset_buckets", "fp32")]["value"],
                               meta[key]["value"])
        except (StopIteration, KeyError):
            continue  # that component was not measured at this world size: no prediction
    return out


# ---------------------------------------------------------------- from a fresh sweep

def from_run(preset: str, world_sizes, injection=None, iters: int = 10, warmup: int = 3,
             progress=print) -> Inputs:
    """Measure now: the DDP iteration per world size, and each component in isolation."""
    from swinkit.dist import LaunchConfig, launch
    from swinkit.workloads.ddp_run import DDPRunSpec, run_ddp
    from swinkit.workloads.forward_backward import measure_isolated
    from swinkit.workloads.inject import Injection
    from swinkit.workloads.sweep import oversubscribe_allowed

    injection = injection or Injection()
    measured, isolated, extra = {}, {}, {}
    compute = None
    for ws in world_sizes:
        lc = LaunchConfig(world_size=ws, allow_oversubscribe=oversubscribe_allowed())
        progress(f"[world size {ws}] DDP iteration ({warmup} + {iters} iterations)")
        r = run_ddp(DDPRunSpec(preset=preset, world_size=ws, iters=iters, warmup=warmup,
                               injection=injection, launch=lc), progress=progress)
        stats = r["iteration_stats"]["0"]
        measured[ws] = Measured(ws, r["iter_mean_s"], dict(r["phases_mean_s"]), stats["iqr_ratio"],
                                stats["n"], extra={"straggler": r["straggler"],
                                                   "skew_s": r["skew_s"]})
        extra[ws] = {"backend": r["backend"], "device": r["device"]}
        if compute is None:
            progress("[isolated] forward/backward of the segmentor in one process")
            compute = measure_isolated(preset, r["images_per_rank"], samples=5)["results"]
        progress(f"[world size {ws}] loader supply with {r['loader_workers']} workers per rank")
        supply = launch("swinkit.workloads.loader_throughput:loader_rank",
                        dict(preset=preset, data_root=None, workers=r["loader_workers"],
                             batches=10), lc, quiet=True).result["ranks"]
        progress(f"[world size {ws}] all-reduce of the preset's {len(r['bucket_sizes_bytes'])} DDP buckets")
        elems = [b // 4 for b in r["bucket_sizes_bytes"]]
        comm = launch("swinkit.workloads.allreduce:allreduce_rank",
                      dict(samples=5, layouts=["preset_buckets"], dtypes=["fp32"], bare_iters=1,
                           sizes={"preset_buckets": elems, "segmentor_flat": [sum(elems)]}),
                      lc, quiet=True).result["ranks"][0]
        med = lambda op: statistics.median(compute[f"segmentor/{op}"]["seconds"])  # noqa: E731
        isolated[ws] = Isolated(
            ws, med("forward"), med("forward_backward"), med("optimizer"), r["images_per_rank"],
            r["loader_workers"], statistics.median(s["images_per_s"] for s in supply),
            statistics.median(comm["times"]["preset_buckets/fp32"]),
            r["bucket_sizes_bytes"][-1] / sum(r["bucket_sizes_bytes"]))
    backend = extra[min(extra)]["backend"] if extra else None
    return Inputs(measured, isolated, meta={"commit": None, "machine": None, "source": "run",
                                            "preset": preset, "backend": backend,
                                            "injection": injection.to_dict()}, extra=extra)
