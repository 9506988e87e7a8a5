"""Measurements for the attribution, read from asv's stored results.

:class:`Inputs` holds per world size a :class:`~swinkit.attribution.loss_split.Measured` DDP
iteration and the :class:`~swinkit.attribution.prediction.Isolated` component costs, plus
metadata; :func:`from_asv` fills it from a results folder (a fresh sweep fills the same thing:
``swinkit.experiments.attribution_run``). Corrupt or partial asv result files are skipped and
named, never fatal.
"""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

from swinkit.attribution import asv_names as names
from swinkit.attribution.convergence import efficiency_from_asv
from swinkit.attribution.loss_split import Measured
from swinkit.measure.phases import BLAME_KEYS
from swinkit.attribution.prediction import Isolated


class InputError(ValueError):
    """No usable measurements; the message says which command makes them."""


@dataclass
class Inputs:
    measured: dict[int, Measured]
    isolated: dict[int, Isolated] = field(default_factory=dict)
    # The co-located oracle's predictions (swinkit.attribution.oracle), where measured; they
    # take the place of the prediction from ``isolated``.
    predicted: dict[int, dict] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    skipped_files: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    # Gradient accumulation rows (world size, K, comm per image, rounds, step), where measured:
    # swinkit.attribution.grad_accum judges them.
    grad_accum: list[dict] = field(default_factory=list)
    # Efficiency in steps to a held-out target beside efficiency in time, where measured
    # (asv's bench_converge.Efficiency): swinkit.attribution.convergence's rows.
    convergence: list[dict] = field(default_factory=list)


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
                _check_rows(data)
            except _DamagedRow as exc:
                skipped.append(f"{path} ({exc})")
                continue
            except (OSError, ValueError, KeyError, TypeError) as exc:
                skipped.append(f"{path} ({type(exc).__name__})")
                continue
            if commit and not data["commit_hash"].startswith(commit):
                continue
            if names.DDP_BLAME in data["results"]:
                candidates.append((data.get("date", 0), m, data))
    if not candidates:
        what = f"commit {commit}" if commit else "any commit"
        raise InputError(f"no DDP results for {what} in {results_dir}: run `python tools/suite.py`"
                         + (f" (skipped unreadable: {', '.join(skipped)})" if skipped else ""))
    _, m, data = max(candidates, key=lambda c: c[0])
    return m, data["commit_hash"], data, skipped


class _DamagedRow(ValueError):
    """A results file that parses but holds a row of the wrong shape (its message names it)."""


def _check_rows(data: dict) -> None:
    """Every row the attribution reads has one result per parameter combination and reads
    without error: a file that parses but was damaged (cut short, hand-edited) is skipped and
    named like an unreadable one, instead of failing the report halfway."""
    for name in names.ALL:
        row = data["results"].get(name)
        if row is None:
            continue
        try:
            cols = dict(zip(data["result_columns"], row))
            n = len(list(itertools.product(*cols["params"])))
            results = cols["result"]
            if results is not None and len(results) != n:
                raise _DamagedRow(f"damaged row {name}: {len(results)} results for {n} "
                                  "parameter combinations")
            _table(data, name)  # what the report reads of it, read once here
        except (IndexError, KeyError, TypeError) as exc:
            raise _DamagedRow(f"damaged row {name}: {type(exc).__name__}") from None


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
    """The latest (or the given) commit's DDP results: asv's median iteration (its headline
    statistic, with the quartiles for the spread within the launch) and the blame medians."""
    machine, commit, data, skipped = _load_results(Path(results_dir), machine, commit)
    blame = _table(data, names.DDP_BLAME)
    caused = _table(data, names.DDP_WAIT_CAUSED)
    images = _table(data, names.DDP_IMAGES_PER_RANK)
    stragglers = _table(data, names.DDP_STRAGGLER_RANK)
    measured = {}
    for (ws,), it in _table(data, names.DDP_ITERATION).items():
        comps = {c: blame[(ws, c)]["value"] for c in BLAME_KEYS if (ws, c) in blame}
        if len(comps) != len(BLAME_KEYS):
            continue
        iqr = ((it["q75"] - it["q25"]) / it["value"]
               if it.get("q75") is not None and it.get("value") else None)
        rank = stragglers.get((ws,), {}).get("value")
        straggler = {"rank": None if rank is None else int(rank),
                     "by_phase": {c: caused[(ws, c)]["value"] for c in BLAME_KEYS
                                  if (ws, c) in caused and caused[(ws, c)]["value"] > 0}}
        measured[int(ws)] = Measured(int(ws), it["value"], comps, iqr,
                                     len(it["samples"]) if it.get("samples") else None,
                                     extra={"straggler": straggler,
                                            "images_per_rank": images.get((ws,), {}).get("value")})
    env = _environment(Path(results_dir), machine, commit)
    inputs = Inputs(measured, meta={"commit": commit, "machine": machine, "source": "asv",
                                    "preset": env.get("preset"), "backend": env.get("backend"),
                                    "environment": env}, skipped_files=skipped)
    inputs.isolated, note = _isolated_from_asv(data, measured, env.get("preset"))
    inputs.predicted = _predicted_from_asv(data, measured)
    if note and not inputs.predicted:
        inputs.meta["notes"] = [note]
    inputs.grad_accum = grad_accum_from_asv(data)
    inputs.convergence = efficiency_from_asv(*(_table(data, n) for n in (
        names.CONVERGE_EFFICIENCY_STEPS, names.CONVERGE_EFFICIENCY_TIME,
        names.CONVERGE_EFFICIENCY_TARGET)))
    return inputs


def grad_accum_from_asv(data: dict) -> list[dict]:
    """``bench_engines.GradAccum``'s stored tracks as rows (DDP with ``no_sync``), one per
    (world size, K) with communication per image; [] where the results have none."""
    comm = _table(data, names.GRAD_ACCUM_COMM_PER_IMAGE)
    rounds = _table(data, names.GRAD_ACCUM_COMM_ROUNDS)
    step = _table(data, names.GRAD_ACCUM_STEP)
    wire = _table(data, names.GRAD_ACCUM_WIRE_BYTES_PER_IMAGE)
    value = lambda table, key: table.get(key, {}).get("value")  # noqa: E731
    return [{"engine": "ddp", "world_size": int(ws), "grad_accum": int(k),
             "comm_per_image_s": c["value"], "comm_rounds_per_step": value(rounds, (ws, k)),
             "step_s": value(step, (ws, k)), "wire_bytes_per_image": value(wire, (ws, k))}
            for (ws, k), c in sorted(comm.items(), key=lambda kv: tuple(map(int, kv[0])))]


def _environment(results_dir: Path, machine: str, commit: str) -> dict:
    """tools/suite.py's record of the run (preset, backend, versions); {} if absent/unreadable."""
    try:
        return json.loads(names.environment_path(results_dir, machine, commit).read_text())
    except (OSError, ValueError):
        return {}


def _predicted_from_asv(data: dict, measured: dict[int, Measured]) -> dict[int, dict]:
    """The oracle's predictions that ``bench_ddp`` made in the launches it measured (paired:
    the components measured beside the DDP steps, under the same co-location), per world size;
    they take the place of the prediction from the isolated benchmarks. {} for results of a
    commit whose DDP runs were not paired."""
    predicted = _table(data, names.DDP_PREDICTED)
    parts = _table(data, names.DDP_PREDICTED_PARTS)
    out = {}
    for (ws,), p in predicted.items():
        if int(ws) not in measured:
            continue
        out[int(ws)] = {"predicted_iter_s": p["value"], "source": "paired",
                        "components_s": {part: v["value"] for (w, part), v in parts.items()
                                         if w == ws}}
    return out


def _isolated_from_asv(data: dict, measured: dict[int, Measured],
                       preset: str | None) -> tuple[dict[int, Isolated], str | None]:
    """The isolated components of the DDP run's own preset, and a note where there are none:
    components of another preset would predict another workload (the model benchmark measures
    every preset it can, the DDP benchmark one)."""
    model = _in_precision(_table(data, names.MODEL_TIME))
    if preset is None:
        return {}, ("no prediction: the DDP run's preset is not recorded (tools/suite.py writes "
                    "it), so the isolated components cannot be matched to it")
    if not any(p == preset and b == "per_rank" for (p, b, s, o) in model):
        measured_presets = sorted({p for (p, *_rest) in model})
        return {}, (f"no prediction: the model benchmark has no measurement of preset {preset} "
                    f"(it has {measured_presets or 'none'})")
    supply = _table(data, names.LOADER_SUPPLY)
    comm = _table(data, names.ALLREDUCE_TIME)
    meta = _table(data, names.DDP_LAST_BUCKET_FRACTION)
    layout = _table(data, names.DDP_LOADER_WORKERS)
    images = _table(data, names.DDP_IMAGES_PER_RANK)
    get = lambda op: model[(preset, "per_rank", "segmentor", op)]["value"]  # noqa: E731
    out = {}
    for ws in measured:
        key = (str(ws),)
        try:
            workers = int(layout[key]["value"])
            out[ws] = Isolated(ws, get("forward"), get("forward_backward"), get("optimizer"),
                               int(images[key]["value"]), workers,
                               supply[(str(ws), str(workers))]["value"],
                               _allreduce_s(comm, ws),
                               meta[key]["value"])
        except KeyError:
            continue  # that component was not measured at this world size: no prediction
    return out, None


def _allreduce_s(comm: dict[tuple, dict], world_size: int) -> float:
    """bench_comm's all-reduce of the preset's buckets; 0 untimed at one rank (moves nothing)."""
    key = (str(world_size), "preset_buckets", "fp32")
    return comm[key]["value"] if key in comm or world_size > 1 else 0.0


def _in_precision(model: dict[tuple, dict], precision: str = "fp32") -> dict[tuple, dict]:
    """``bench_model``'s rows of one training precision, keyed (preset, batch, scope, op):
    its last axis (precision) dropped; results from before it had one are fp32."""
    return {key[:4]: v for key, v in model.items() if len(key) == 4 or key[4] == precision}


def what_if_from_asv(results_dir: Path, machine: str | None = None,
                     commit: str | None = None) -> dict:
    """The what-if section from ``bench_whatif``'s stored results (the report's ``what_if``
    rows, as far as asv keeps them: predicted and measured iteration, their error, the
    efficiency with the remedy and the baseline's beside it). Empty when the commit's results
    have no what-ifs."""
    from swinkit.attribution.oracle import accuracy, rank_correlation

    _, _, data, _ = _load_results(Path(results_dir), machine, commit)
    measured = _table(data, names.WHATIF_ITERATION)
    predicted = _table(data, names.WHATIF_PREDICTED)
    efficiency = _table(data, names.WHATIF_EFFICIENCY)
    rows = []
    for (ws, name), m in sorted(measured.items(), key=lambda kv: (int(kv[0][0]), kv[0][1] != "baseline")):
        p = predicted.get((ws, name))
        if p is None:
            continue
        base = efficiency.get((ws, "baseline"), {}).get("value")
        rows.append({"name": name, "world_size": int(ws), "predicted_iter_s": p["value"],
                     "measured_iter_s": m["value"], **accuracy(p["value"], m["value"]),
                     "efficiency_before": base,
                     "efficiency_after": efficiency.get((ws, name), {}).get("value")})
    correlation = {}
    for ws in sorted({r["world_size"] for r in rows}):
        these = [r for r in rows if r["world_size"] == ws]
        correlation[str(ws)] = rank_correlation([r["predicted_iter_s"] for r in these],
                                                [r["measured_iter_s"] for r in these])
    return {"what_if": rows, "what_if_rank_correlation": correlation} if rows else {}


def held_out_from_asv(results_dir: Path, machine: str | None = None,
                      commit: str | None = None) -> tuple[dict, Path]:
    """bench_predict's held-out report as the suite kept it beside asv's results (its basis at
    world size 1 and its timings at 2), and where it was: the given machine's and commit's, else
    the newest kept."""
    kept = names.held_out_root(Path(results_dir))
    folders = [kept / machine] if machine else sorted(p for p in kept.glob("*") if p.is_dir())
    found = []
    for path in (p for folder in folders for p in folder.glob("*.json")):
        if commit and not path.stem.startswith(commit[:8]):
            continue
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise InputError(f"{path}: unreadable held-out report ({exc})") from None
        if not commit or str(report.get("commit", "")).startswith(commit):
            found.append((path.stat().st_mtime, path, report))
    if not found:
        what = " and ".join(x for x in (machine and f"machine {machine!r}",
                                        commit and f"commit {commit}") if x) or "any commit"
        raise InputError(f"no held-out prediction kept for {what} in {kept}: run "
                         "`SWINKIT_PREDICT=1 python tools/suite.py -b bench_ddp` (bench_predict "
                         "keeps one per commit), or measure now with --run")
    _, path, report = max(found, key=lambda f: f[0])
    return report, path
