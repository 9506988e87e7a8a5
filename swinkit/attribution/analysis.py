"""The attribution report as data (the JSON schema tools/attribute.py writes)."""
from __future__ import annotations

from swinkit.attribution.headroom import loader_headroom
from swinkit.attribution.inputs import Inputs
from swinkit.attribution.loss_split import scaling_rows, split_loss
from swinkit.attribution.prediction import predict, prediction_error
from swinkit.attribution.recommend import recommend
from swinkit.attribution.thesis import THESIS_BASE_ITERS, THESIS_SPEEDUPS, table3_projection


def analyse(inputs: Inputs, against: Inputs | None = None) -> dict:
    rows = scaling_rows(inputs.measured)
    for row in rows:
        iso = inputs.isolated.get(row["world_size"])
        if iso is None:
            row.update(predicted_iter_s=None, prediction_error=None, accuracy_pct=None)
            continue
        pred = predict(iso)
        row.update(predicted_iter_s=pred["predicted_iter_s"],
                   predicted_components_s=pred["components_s"],
                   **prediction_error(pred["predicted_iter_s"], row["iter_s"]))
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
    straggler = None
    largest = max(inputs.measured) if inputs.measured else None
    if largest is not None:
        straggler = inputs.measured[largest].extra.get("straggler")
    supply = {ws: i.supply_images_per_s for ws, i in inputs.isolated.items()}
    demand = {ws: i.images_per_rank / (i.forward_backward_s + i.optimizer_s)
              for ws, i in inputs.isolated.items()}
    report = {
        **{k: inputs.meta.get(k) for k in ("commit", "machine", "preset", "backend", "source")},
        "injection": inputs.meta.get("injection"),
        "world_sizes": sorted(inputs.measured),
        "runs": rows,
        "loss_shares": {str(r["world_size"]): r["loss"]["shares_pct"] for r in rows
                        if r.get("loss") and r["loss"]["shares_pct"]},
        "loader_headroom": loader_headroom(supply, demand) if supply else None,
        "table3_projection_hours": {str(k): v for k, v in
                                    table3_projection(inputs.measured, THESIS_BASE_ITERS).items()},
        "prediction_accuracy_pct": _mean([r.get("accuracy_pct") for r in rows]),
        "recommendations": recommend(rows, straggler),
        "thesis_speedups": {k: {str(n): s for n, s in v.items()} for k, v in THESIS_SPEEDUPS.items()},
        "notes": notes,
        "skipped_files": inputs.skipped_files,
    }
    if against is not None:
        report["against"] = compare(against, inputs)
    return report


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
