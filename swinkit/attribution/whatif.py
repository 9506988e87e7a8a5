"""Judge a what-if: its prediction against its run (numbers only).

A remedy's prediction is held to account only where the remedy changed something: a change of
the measured iteration smaller than twice its noise (the spread of the difference of two
medians) is reported as no change, and the prediction is then checked against "no change"
rather than against its own few percent of noise.
"""
from __future__ import annotations

from swinkit.attribution.oracle import accuracy

TOLERANCE = 0.10     # a prediction within 10 % of the measured iteration holds
NOISE_SIGMAS = 2.0   # a change below 2 sigma is not a change


def judge(name: str, what: str, overrides: dict, world_size: int, predicted_iter_s: float,
          measured_iter_s: float, baseline_iter_s: float, noise_s: float,
          reference_iter_s: float, predicted_reference_s: float,
          predicted_phases: dict, measured_phases: dict,
          in_launch_predicted_iter_s: float | None = None,
          components_shift: float | None = None) -> dict:
    """One row of the report's ``what_if`` list.

    Efficiencies are weak scaling (the same images per rank at every N) against the baseline's
    smallest run: ``reference_iter_s`` is the baseline iteration there, and N ranks doing N
    times its work in one iteration scale perfectly when their iteration equals it, so
    efficiency = reference / iteration (N cancels: N x images / (N x iteration) per rank, over
    the reference's). ``efficiency_before`` is the baseline's at N, ``efficiency_after`` the
    remedy's, and ``predicted_efficiency`` uses predictions throughout.

    ``in_launch_predicted_iter_s``: the oracle's prediction from the components measured in
    the run's own launch (a paired run); ``components_shift``: how much slower (+) the
    components ran in the prediction's launch than in the run's. A prediction that misses
    while the in-launch one holds is blamed on the launches, with that shift.
    """
    acc = accuracy(predicted_iter_s, measured_iter_s)
    change = measured_iter_s - baseline_iter_s
    changed = abs(change) > NOISE_SIGMAS * noise_s
    row = {
        "name": name, "what": what, "overrides": overrides, "world_size": world_size,
        "predicted_iter_s": predicted_iter_s, "measured_iter_s": measured_iter_s,
        **acc,
        "baseline_iter_s": baseline_iter_s, "change_s": change,
        "noise_floor_s": NOISE_SIGMAS * noise_s, "changes_iteration": changed,
        "efficiency_before": reference_iter_s / baseline_iter_s,
        "efficiency_after": reference_iter_s / measured_iter_s,
        "predicted_efficiency": predicted_reference_s / predicted_iter_s,
    }
    row["holds"] = abs(acc["prediction_error"]) <= TOLERANCE if changed else None
    if in_launch_predicted_iter_s:
        own = accuracy(in_launch_predicted_iter_s, measured_iter_s)["prediction_error"]
        row.update(in_launch_predicted_iter_s=in_launch_predicted_iter_s,
                   in_launch_prediction_error=own, components_shift=components_shift)
    row["why_not"] = None if row["holds"] is not False else _why(row, predicted_phases,
                                                                 measured_phases)
    return row


def _why(row: dict, predicted: dict, measured: dict) -> str:
    """The launches, where the prediction from the run's own launch holds; else the phase
    where the prediction's components and the run's phases differ most."""
    own = row.get("in_launch_prediction_error")
    if own is not None and abs(own) <= TOLERANCE:
        shift = row.get("components_shift")
        apart = "" if shift is None else (f"; its components ran {shift:+.0%} against the "
                                          "run's own")
        return (f"launch to launch: from the run's own launch the prediction is {own:+.1%} "
                f"off{apart}")
    keys = [k for k in predicted if k in measured]
    if not keys:
        return "no measured phases to compare"
    worst = max(keys, key=lambda k: abs(predicted[k] - measured[k]))
    return (f"{worst}: predicted {predicted[worst] * 1e3:.1f} ms, measured "
            f"{measured[worst] * 1e3:.1f} ms per iteration")
