"""The attribution report as data (the JSON schema tools/attribute.py writes)."""
from __future__ import annotations

from swinkit.attribution.grad_accum import summarize as grad_accum_summary
from swinkit.attribution.headroom import loader_headroom
from swinkit.attribution.inputs import Inputs
from swinkit.attribution.loss_split import scaling_rows, split_loss
from swinkit.attribution.prediction import predict, prediction_error
from swinkit.attribution.recommend import STRAGGLER_SHARE, recommend
from swinkit.attribution.thesis import THESIS_BASE_ITERS, THESIS_SPEEDUPS, table3_projection


def analyse(inputs: Inputs, against: Inputs | None = None) -> dict:
    # Long: one pass over the world sizes that fills the report's keys in its schema's order;
    # each key is a line or two, kept together so the schema reads in one place.
    rows = scaling_rows(inputs.measured)
    for row in rows:
        iso = inputs.isolated.get(row["world_size"])
        pred = inputs.predicted.get(row["world_size"])
        if pred is None and iso is None:
            row.update(predicted_iter_s=None, prediction_error=None, accuracy_pct=None)
            continue
        # paired: the components were measured in the DDP run's own launch; isolated: by the
        # component benchmarks, in processes of their own
        source = pred.get("source", "paired") if pred else "isolated"
        pred = pred or predict(iso)
        launch_preds = pred.get("launch_predicted_iter_s") or []
        per_launch_pairs = bool(launch_preds) and len(launch_preds) == len(row["launch_iter_s"])
        if per_launch_pairs:
            # paired launches: each predicted from its own components, held to its own run
            pairs = list(zip(launch_preds, row["launch_iter_s"]))
        else:
            pairs = [(pred["predicted_iter_s"], t) for t in row["launch_iter_s"]]
        per_launch = [prediction_error(p, t)["prediction_error"] for p, t in pairs]
        of_medians = prediction_error(pred["predicted_iter_s"], row["iter_s"])
        row.update(predicted_iter_s=pred["predicted_iter_s"], prediction_source=source,
                   predicted_components_s=pred["components_s"],
                   prediction_error_interval=[min(per_launch), max(per_launch)]
                   if len(per_launch) >= 2 else None,
                   launch_prediction_error=per_launch,
                   # the worst launch beside the typical one (each launch's own error)
                   worst_launch_accuracy_pct=(100 * (1 - max(map(abs, per_launch)))
                                              if per_launch else None),
                   prediction_error_of_medians=of_medians["prediction_error"],
                   **(typical_launch_error(per_launch) if per_launch_pairs else of_medians))
    notes = []
    if 1 not in inputs.measured:
        notes.append("world size 1 is missing: speedup, efficiency and the loss split need it")
    if len(inputs.measured) == 1:
        notes.append("only one world size: no scaling can be computed, only its breakdown")
    unstable = [r["world_size"] for r in rows if r["unstable"]]
    if unstable:
        notes.append(f"iteration time unstable (IQR/median > 10 %) at world sizes {unstable}")
    few = [r["world_size"] for r in rows if r["samples"] is not None and r["samples"] < 7]
    if few:
        notes.append(f"fewer than 7 samples at world sizes {few}: too few for asv's significance test")
    notes += inputs.meta.get("notes", [])
    supply = {ws: i.supply_images_per_s for ws, i in inputs.isolated.items()}
    demand = {ws: i.images_per_rank / (i.forward_backward_s + i.optimizer_s)
              for ws, i in inputs.isolated.items()}
    report = {
        **{k: inputs.meta.get(k) for k in ("commit", "machine", "preset", "backend", "source",
                                           "precision")},
        "injection": inputs.meta.get("injection"),
        "scaling": inputs.meta.get("scaling", "weak"),
        "scaling_formulas": SCALING_FORMULAS[inputs.meta.get("scaling", "weak")],
        "world_sizes": sorted(inputs.measured),
        "runs": rows,
        "loss_shares": {str(r["world_size"]): r["loss"]["shares_pct"] for r in rows
                        if r.get("loss") and r["loss"]["shares_pct"]},
        "verdicts": [verdict(r) for r in rows if r.get("loss")],
        "loader_headroom": loader_headroom(supply, demand) if supply else None,
        "table3_projection_hours": {str(k): v for k, v in
                                    table3_projection(inputs.measured, THESIS_BASE_ITERS).items()},
        # over the world sizes that synchronise: at 1 nothing is replayed but the timers
        "prediction_accuracy_pct": _mean([r.get("accuracy_pct") for r in rows
                                          if r["world_size"] > 1]),
        "recommendations": recommend(rows),
        # null where the results hold no accumulation runs (asv's bench_engines.GradAccum)
        "grad_accum": grad_accum_summary(inputs.grad_accum) or None,
        # null where the results hold no convergence runs (asv's bench_converge.Efficiency)
        "convergence": inputs.convergence or None,
        "thesis_speedups": {k: {str(n): s for n, s in v.items()} for k, v in THESIS_SPEEDUPS.items()},
        "notes": notes,
        "skipped_files": inputs.skipped_files,
    }
    if against is not None:
        report["against"] = compare(against, inputs)
    return report


def typical_launch_error(per_launch: list[float]) -> dict:
    """The error of the typical launch, each launch's prediction held to its own run: the
    error of median size, with its sign (of an even count, the larger middle one).

    The stricter, like-for-like figure: the median prediction against the median run pairs
    one launch's prediction with another's run (launches of one configuration ran up to 25 %
    apart here), so its errors can cancel or add by chance.

    >>> typical_launch_error([0.01, -0.05, 0.002])["prediction_error"]
    0.01
    """
    error = sorted(per_launch, key=abs)[len(per_launch) // 2]
    return {"prediction_error": error, "accuracy_pct": 100 * (1 - abs(error))}


SCALING_FORMULAS = {
    "weak": "images per rank fixed: S(N) = N T(1) / T(N), E(N) = T(1) / T(N), "
            "lost time = T(N) - T(1)",
    "strong": "global batch fixed: S(N) = T(1) / T(N), E(N) = T(1) / (N T(N)), "
              "lost time = T(N) - T(1) / N",
}

# Plain words for the blame keys, for the one-line verdict.
PLAIN = {"data_wait": "data loading", "forward": "forward compute", "backward": "backward compute",
         "exposed_comm": "gradient communication not hidden under compute",
         "optimizer": "the optimizer step", "other": "the iteration tail",
         "unattributed": "waits with no traceable cause", "residual": "the residual"}


def verdict(row: dict) -> dict:
    """Where one world size's lost time comes from, in one structured sentence: the component
    with the largest share and, when one rank made the others wait for most of it, that rank."""
    loss = row["loss"]
    out = {"world_size": row["world_size"], "lost_s": loss["lost_s"],
           "significant": loss["significant"],
           "significant_only_by_every_launch": loss.get("significant_only_by_every_launch", False),
           "kind": loss["kind"],
           "noise_floor_s": loss["noise_floor_s"], "component": None, "rank": None}
    if not loss["shares_pct"]:
        return out
    comp = max(loss["shares_pct"], key=loss["shares_pct"].get)
    straggler = row.get("straggler") or {}
    caused = (straggler.get("by_phase") or {}).get(comp, 0.0)
    growth = loss["growth_s"].get(comp, 0.0)
    out.update(component=comp, plain=PLAIN[comp], share_pct=loss["shares_pct"][comp])
    if straggler.get("rank") is not None and growth > 0 and caused >= STRAGGLER_SHARE * growth:
        out.update(rank=straggler["rank"], wait_caused_s=caused)
    return out


def compare(old: Inputs, new: Inputs) -> dict:
    """Which component moved between two sets of measurements, per shared world size."""
    out = {"commit": old.meta.get("commit"), "per_world_size": {}}
    for ws in sorted(set(old.measured) & set(new.measured)):
        split = split_loss(old.measured[ws], new.measured[ws])
        moved = max(split["growth_s"], key=lambda c: abs(split["growth_s"][c]))
        out["per_world_size"][str(ws)] = {"iter_change_s": split["lost_s"],
                                          "growth_s": split["growth_s"], "moved_most": moved}
    return out


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None
