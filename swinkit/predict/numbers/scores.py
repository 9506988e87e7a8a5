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
    if paired:
        pred["paired_oracle_s"] = paired["predicted_iter_s"]
        pred["paired_components_s"] = paired["components_s"]  # what the model missed
    pred["accuracy"] = {name: accuracy(pred[key], measured_iter_s) for key, name in PREDICTORS
                        if key in pred}


def score_unpaired(pred: dict, unpaired_iter_s: float) -> None:
    """Add to a scored ``pred`` the same configuration run unpaired (plain DDP steps: no local
    steps beside them, no barrier before each), every predictor's accuracy against it
    (``accuracy_unpaired``), and the gap the paired launch's barrier makes (unpaired less
    paired DDP iteration: the barrier lines the ranks up before each step, hiding a late
    rank's optimizer and tail from the step after it).

    >>> pred = {"predicted_iter_s": 1.0, "perfect_scaling_s": 0.9, "plus_allreduce_s": 1.0,
    ...         "no_network_s": 0.9, "paired_oracle_s": 1.05, "measured_iter_s": 1.0}
    >>> score_unpaired(pred, 1.1)
    >>> round(pred["barrier_gap_s"], 6), round(pred["accuracy_unpaired"]["paired"]["accuracy_pct"], 2)
    (0.1, 95.45)
    """
    pred["unpaired_iter_s"] = unpaired_iter_s
    pred["barrier_gap_s"] = unpaired_iter_s - pred["measured_iter_s"]
    names = [(key, name) for key, name in PREDICTORS if key in pred]
    pred["accuracy_unpaired"] = {name: accuracy(pred[key], unpaired_iter_s)
                                 for key, name in names}


# each predictor's figure in a scored prediction, and its name in ``accuracy``
PREDICTORS = (("predicted_iter_s", "model"), ("perfect_scaling_s", "perfect"),
              ("plus_allreduce_s", "plus_allreduce"), ("no_network_s", "no_network"),
              ("paired_oracle_s", "paired"))


def summarize(launches: list[dict], targets: list[int], scored: str = "accuracy") -> dict:
    """Per target size: each launch's accuracy per predictor, the worst launch's and the best
    (``scored``: "accuracy" against the paired run's DDP steps, "accuracy_unpaired" against
    the unpaired run)."""
    out = {}
    for ws in targets:
        rows = [row["targets"][ws] for row in launches if scored in row["targets"].get(ws, {})]
        if not rows:
            continue
        out[ws] = {}
        for name in rows[0][scored]:
            pcts = [r[scored][name]["accuracy_pct"] for r in rows]
            out[ws][name] = {"per_launch_pct": pcts, "worst_pct": min(pcts),
                             "best_pct": max(pcts)}
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


def is_in_launch(result: dict) -> bool:
    """Whether a prediction's result was made in-launch (not held out); results stored before
    the key was renamed say ``same_launch``."""
    return bool(result.get("in_launch", result.get("same_launch", False)))

