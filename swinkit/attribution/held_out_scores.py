"""How a held-out prediction is scored (torch-free): each predictor's accuracy against the
run at N' (Kahira et al.'s), the worst launch per size, and the host's own run-to-run spread
beside them."""
from __future__ import annotations

from swinkit.attribution.oracle import accuracy


def score_against(pred: dict, measured_iter_s: float, paired: dict | None) -> None:
    """Add to ``pred`` the held-out run's iteration, each predictor's accuracy against it, and
    the paired oracle of that run (not held out: it shows which term the model missed)."""
    pred["measured_iter_s"] = measured_iter_s
    pred["measured_efficiency"] = pred["t1_s"] / measured_iter_s
    names = [("predicted_iter_s", "model"), ("perfect_scaling_s", "perfect"),
             ("plus_allreduce_s", "plus_allreduce"), ("no_network_s", "no_network")]
    if paired:
        pred["paired_oracle_s"] = paired["predicted_iter_s"]
        pred["paired_components_s"] = paired["components_s"]  # what the model missed
        names.append(("paired_oracle_s", "paired"))
    pred["accuracy"] = {name: accuracy(pred[key], measured_iter_s) for key, name in names}


def summarize(launches: list[dict], targets: list[int]) -> dict:
    """Per target size: each launch's accuracy per predictor, and the worst launch's."""
    out = {}
    for ws in targets:
        rows = [row["targets"][ws] for row in launches if "accuracy" in row["targets"].get(ws, {})]
        if not rows:
            continue
        names = rows[0]["accuracy"]
        out[ws] = {name: {"per_launch_pct": [r["accuracy"][name]["accuracy_pct"] for r in rows],
                          "worst_pct": min(r["accuracy"][name]["accuracy_pct"] for r in rows)}
                   for name in names}
    return out


def repeatability(launches: list[dict]) -> dict:
    """The host's run-to-run spread: per world size measured in every launch, each launch's
    iteration taken as a prediction of the next launch's at the same size (Kahira et al.'s
    accuracy, as the predictors are scored). Nothing changed between those runs but time: a
    predictor's score inside this spread cannot be told from the host's noise. (No strict
    floor: a held-out pair is closer in time than two launches.) Empty with fewer than two
    launches."""
    series: dict[str, list[float]] = {}
    for row in launches:
        for ws, t in row["measured_from"].items():
            series.setdefault(str(ws), []).append(t)
        for ws, pred in row["targets"].items():
            if "measured_iter_s" in pred:
                series.setdefault(str(ws), []).append(pred["measured_iter_s"])
    out = {}
    for ws, times in series.items():
        if len(times) == len(launches) > 1:
            pcts = [accuracy(a, b)["accuracy_pct"] for a, b in zip(times, times[1:])]
            out[ws] = {"per_pair_pct": pcts, "worst_pct": min(pcts)}
    return out
