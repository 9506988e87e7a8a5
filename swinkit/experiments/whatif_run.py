"""Predict, then run: each remedy's iteration from its components, then the remedy itself.

For every remedy and world size, first the components are measured under the remedy's
configuration (its precision too: the component ranks apply it as the DDP ones do, so a
precision what-if is predicted from components measured in that precision) and co-location (:mod:`swinkit.rank.components`: the training loop with
nothing communicated, then the collectives the remedy would send) and the oracle
(:mod:`swinkit.attribution.oracle`) predicts the iteration. Every prediction is made, and
written, before any remedy's DDP run starts; then the runs measure what the remedies really do.

A launch here can run 10-40 % faster or slower than another of the same configuration (where
its memory and threads landed, what else the machine ran), so a prediction from one launch
held to another's run mixes the oracle's error with that. The runs are therefore paired
(:class:`swinkit.rank.plan.StepPlan`): each also measures its own components, and
the oracle predicts the run again from those (``in_launch_predicted_iter_s``), never having
seen its DDP steps. Where the prediction written beforehand misses and the in-launch one holds,
the miss was the launches', and the report says so.
"""
from __future__ import annotations

import statistics
from dataclasses import replace

from swinkit.attribution.loss_split import iteration_spread
from swinkit.attribution.oracle import accuracy, rank_correlation
from swinkit.attribution.whatif import judge
from swinkit.config import load_config
from swinkit.launch import LaunchConfig
from swinkit.result_files import write_json_atomic
from swinkit.runs.component_costs import predict_from, predict_run
from swinkit.runs.ddp_run import DDPRunSpec, run_ddp
from swinkit.injection import Injection
from swinkit.attribution.precision_shift import precision_shift
from swinkit.experiments.remedies import Remedy, device_note
from swinkit.runs.sweep import oversubscribe_allowed

BASELINE = Remedy("baseline", "the preset as it is")


def base_spec(preset: str, world_size: int, iters: int, warmup: int,
              injection: Injection | None = None) -> DDPRunSpec:
    lc = LaunchConfig(allow_oversubscribe=oversubscribe_allowed())
    return DDPRunSpec(preset=preset, nproc_per_node=world_size, iters=iters, warmup=warmup,
                      launch=lc, injection=(injection or Injection()).for_world_size(world_size))


def what_if(preset: str, world_sizes, remedies: list[Remedy], iters: int = 10, warmup: int = 3,
            injection: Injection | None = None, predictions_path=None, progress=print,
            remedy_world_sizes=None, paired: bool = True) -> dict:
    """Predict every (remedy, world size), write the predictions, then run each and compare.
    ``remedy_world_sizes``: where the remedies run (default: every world size); the baseline
    runs at every one of ``world_sizes``, the smallest being the efficiency's reference.
    ``paired``: each run also measures its own components (see the module docstring); about
    twice the iterations per run.

    Returns ``{"what_if": [...], "what_if_rank_correlation": {ws: rho}, "baseline": {...}}``
    (see :func:`swinkit.attribution.whatif.judge` for each row's fields)."""
    preset_workers = load_config(preset).loader_workers
    plans = [BASELINE] + [r for r in remedies if r.name != BASELINE.name]
    where = set(world_sizes if remedy_world_sizes is None else remedy_world_sizes)
    specs = {(r.name, ws): r.apply(base_spec(preset, ws, iters, warmup, injection), preset_workers)
             for r in plans for ws in world_sizes if r is BASELINE or ws in where}
    for spec in specs.values():
        spec.validate()  # every configuration is checked before the first process starts
    predictions = {}
    for n, ((name, ws), spec) in enumerate(specs.items(), 1):
        progress(f"[predict {n}/{len(specs)}] {name} at world size {ws}: components")
        predictions[(name, ws)] = predict_run(spec, progress=progress)
    if predictions_path:  # on disk before any remedy runs: the prediction cannot peek
        write_json_atomic(predictions_path, {"preset": preset, "predictions": [
            {"name": name, "world_size": ws, **p} for (name, ws), p in predictions.items()]})
        progress(f"predictions written to {predictions_path}")
    measured = {}
    for n, ((name, ws), spec) in enumerate(specs.items(), 1):
        progress(f"[run {n}/{len(specs)}] {name} at world size {ws}: DDP")
        run = run_ddp(replace(spec, paired=paired), progress=progress)
        if paired:
            own = predict_from(run.pop("local_run"), spec)
            run.update(in_launch_predicted_iter_s=own["predicted_iter_s"],
                       in_launch_local_iter_s=own["local_iter_s"])
        measured[(name, ws)] = run
    return assemble(plans, world_sizes, predictions, measured)


def assemble(plans, world_sizes, predictions: dict, measured: dict) -> dict:
    """The report's what-if section from predictions and measurements keyed (name, ws)."""
    base1 = measured.get(("baseline", min(world_sizes)))
    pbase1 = predictions.get(("baseline", min(world_sizes)))
    rows = []
    for remedy in plans:
        for ws in world_sizes:
            if (remedy.name, ws) not in measured:
                continue  # not run at this world size (remedy_world_sizes)
            run, pred = measured[(remedy.name, ws)], predictions[(remedy.name, ws)]
            base = measured[("baseline", ws)]
            rows.append(judge(
                name=remedy.name, what=remedy.what, overrides=remedy.overrides(), world_size=ws,
                predicted_iter_s=pred["predicted_iter_s"], measured_iter_s=run["per_batch_s"],
                baseline_iter_s=base["per_batch_s"],
                noise_s=_noise(base, run), reference_iter_s=base1["per_batch_s"],
                predicted_reference_s=pbase1["predicted_iter_s"],
                predicted_phases=pred["components_s"], measured_phases=run.get("phases_s", {}),
                in_launch_predicted_iter_s=run.get("in_launch_predicted_iter_s"),
                components_shift=_shift(pred.get("local_iter_s"), run.get("in_launch_local_iter_s"))))
            rows[-1].update(components_precision=pred.get("precision"),
                            precision=(run.get("precision") or {}).get("label"),
                            note=_note(remedy, run))
    correlation = {}
    for ws in world_sizes:
        these = [r for r in rows if r["world_size"] == ws]
        correlation[str(ws)] = rank_correlation([r["predicted_iter_s"] for r in these],
                                                [r["measured_iter_s"] for r in these])
    baseline = {str(ws): accuracy(predictions[("baseline", ws)]["predicted_iter_s"],
                                  measured[("baseline", ws)]["per_batch_s"])
                for ws in world_sizes}
    return {"what_if": rows, "what_if_rank_correlation": correlation,
            "what_if_baseline_accuracy": baseline,
            "what_if_precision_shift": precision_shift(plans, world_sizes, measured)}


def _note(remedy: Remedy, run: dict) -> str | None:
    """What the score stands for on this device: a remedy that is a no-op here (tf32 on a
    CPU) says so; else the note of the precision the run applied (bf16 emulated on a CPU
    without bf16 instructions), if any."""
    device = str(run.get("device", "cpu")).split(":")[0]
    return device_note(remedy, device) or (run.get("precision") or {}).get("note")


def _shift(predicted_launch_s: float | None, run_launch_s: float | None) -> float | None:
    """How much slower (+) the components ran in the prediction's launch than in the run's."""
    if not predicted_launch_s or not run_launch_s:
        return None
    return predicted_launch_s / run_launch_s - 1


def _noise(base: dict, run: dict) -> float:
    """Standard deviation of the difference of two runs' median iterations, from each run's
    within-launch spread (the median IQR / median over its ranks)."""
    def iqr_ratio(r):
        stats = list(r.get("iteration_stats", {}).values())
        return statistics.median(s["iqr_ratio"] for s in stats) if stats else 0.0
    return iteration_spread(base["per_batch_s"], iqr_ratio(base), run["per_batch_s"],
                            iqr_ratio(run))
