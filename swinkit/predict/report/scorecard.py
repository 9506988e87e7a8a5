"""``swinkit scorecard`` as terminal text: per target size, each predictor's accuracy in every
launch, its worst and its range, against the paired run and the unpaired one; the barrier's
gap; the host's own spread; what the run was (commit, host, date, command). Rendering only:
the numbers are :mod:`swinkit.predict.numbers.scorecard`'s."""
from __future__ import annotations

from swinkit.predict.numbers.scorecard import SHOWN
from swinkit.predict.report.text import PREDICTORS

LABELS = dict(PREDICTORS)
REFERENCES = (("paired_run", "against the paired run's DDP steps (the launch the oracle "
                             "measures in: a barrier before each step)"),
              ("unpaired_run", "against the same configuration run unpaired (plain DDP "
                               "steps: the run a user has)"))


def text(record: dict) -> str:
    """The scorecard, top to bottom."""
    card = record["scorecard"]
    sizes = ",".join(map(str, record["targets"]))
    src = ",".join(map(str, record["from"]))
    m = record["machine"]
    dirty = ", with uncommitted changes" if record.get("dirty") else ""
    lines = [f"swinkit scorecard: world size {sizes} predicted from {src}, preset "
             f"{record['preset']}, {card['launches']} fresh launches, HELD OUT (each "
             "prediction made before, and apart from, the run it is scored on)",
             f"commit {(record.get('commit') or 'unknown')[:12]}{dirty}; host {m['hostname']}, "
             f"{m.get('cpu_count')} CPUs, GPUs {', '.join(m.get('gpus') or []) or 'none'}; "
             f"{record['started']} to {record['finished']}",
             f"command: {record['command']}",
             "host load average (1 min) at each launch: "
             + ", ".join(f"{x:.1f}" for x in card["load_average"] if x is not None),
             "accuracy = 100 % x (1 - |predicted - measured| / measured), per launch"]
    for ws, by in card["targets"].items():
        for ref, what in REFERENCES:
            if by.get(ref):
                lines += ["", f"world size {ws}, {what}:"] + _table(by[ref])
        gap = by.get("barrier_gap")
        if gap:
            lines.append(f"  the unpaired run less the paired run's DDP steps, per launch: "
                         + ", ".join(f"{1e3 * s:+.1f} ms" for s in gap["per_launch_s"])
                         + f" ({gap['mean_share']:+.1%} on average)")
    lines += ["", "the host's own spread (each launch's measured iteration as a prediction of "
                  "the next, same size; a score inside it cannot be told from the host's noise):"]
    lines += [f"  {('world size ' + name):38s} {_launches(r['per_pair_pct'])}  worst "
              f"{r['worst_pct']:.1f} %, range {r['range_pts']:.1f} points"
              for name, r in card["host"].items()]
    if record.get("cpu_limit"):
        lines += ["", f"limit: {record['cpu_limit']}"]
    return "\n".join(lines)


def _table(stats: dict) -> list[str]:
    out = []
    for name in SHOWN:
        if name in stats:
            s = stats[name]
            out.append(f"  {LABELS[name]:38s} {_launches(s['per_launch_pct'])}  worst "
                       f"{s['worst_pct']:.1f} %, range {s['range_pts']:.1f} points")
    return out


def _launches(pcts: list[float]) -> str:
    return ", ".join(f"{p:.1f}" for p in pcts) + " %"
