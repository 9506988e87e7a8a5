"""Where the lost time goes in another precision: the what-ifs that change the training
precision, set beside the baseline's (the numbers; :mod:`swinkit.report.precision_lines` prints
them: "in bf16 the all-reduce's share of the lost time goes from a to b").

Weak scaling: the time lost at world size N is each phase's seconds at N less its seconds at
the smallest world size run (the reference), per iteration, medians of the runs' phases. The
shares are of the summed loss; a phase that got faster has a negative share. Beside them, what
the loader must supply per rank: images per rank over the iteration, which a precision that
shrinks compute raises.
"""
from __future__ import annotations

PRECISION_KEY = "precision"   # the preset override a precision what-if sets


def lost_time(run_n: dict, run_1: dict) -> dict:
    """Seconds lost per phase at N against the reference run, and each one's share of the sum.

    >>> lost = lost_time({"phases_s": {"forward": 0.5, "exposed_comm": 0.3}},
    ...                  {"phases_s": {"forward": 0.4, "exposed_comm": 0.0}})
    >>> {k: round(v, 2) for k, v in lost["share"].items()}
    {'forward': 0.25, 'exposed_comm': 0.75}
    """
    seconds = {p: s - run_1["phases_s"].get(p, 0.0) for p, s in run_n["phases_s"].items()}
    total = sum(seconds.values())
    return {"lost_s": seconds, "total_s": total,
            "share": {p: (s / total if total else None) for p, s in seconds.items()}}


def loader_demand(run: dict) -> float | None:
    """Images per second one rank's loader must supply to keep up with the iteration."""
    per_batch = run.get("per_batch_s")
    return run["images_per_rank"] / per_batch if per_batch and run.get("images_per_rank") else None


def precision_shift(plans, world_sizes, measured: dict) -> list[dict]:
    """One entry per precision what-if and world size N above the smallest, where the remedy
    and the baseline ran at N and at the smallest: both lost-time splits, both loader demands.
    ``measured``: run results keyed (name, world size)."""
    ref = min(world_sizes)
    out = []
    for remedy in plans:
        if PRECISION_KEY not in remedy.config:
            continue
        for ws in world_sizes:
            keys = [(name, n) for name in ("baseline", remedy.name) for n in (ref, ws)]
            if ws == ref or not all(k in measured for k in keys):
                continue
            base, run = measured[("baseline", ws)], measured[(remedy.name, ws)]
            out.append({
                "name": remedy.name, "world_size": ws, "reference_world_size": ref,
                "precision": _label(run), "baseline_precision": _label(base),
                "baseline": lost_time(base, measured[("baseline", ref)]),
                "remedy": lost_time(run, measured[(remedy.name, ref)]),
                "loader_demand_images_per_s": {"baseline": loader_demand(base),
                                               "remedy": loader_demand(run)}})
    return out


def _label(run: dict) -> str | None:
    return (run.get("precision") or {}).get("label")
