"""The report page's sections on the DDP run itself: context, scaling, blame, lost time,
straggler, prediction.

Each takes the report dict (``swinkit.attribution.analysis.analyse``: the numbers the text
report prints) and, where it has a figure, the figures' PNG bytes by file name; it returns HTML,
'' when the report has nothing for it. ``html_advice`` holds what to do about it.
"""
from __future__ import annotations

from swinkit.measure.phases import BLAME_KEYS, BLAME_MEANING
from swinkit.report.html import bullets, esc, figure, glossary, num, pair, para, table
from swinkit.report.text import injection_text, of_what  # one wording of each

KAHIRA_ORACLE_PCT = 97.57  # Kahira et al.'s oracle on their workloads: a reference, not a bar
SOURCES = {"paired": "the run's own launch", "isolated": "component benchmarks"}


def context(r: dict) -> str:
    """What was measured: preset, world sizes, machine, commit, scaling, injected costs."""
    commit = (r.get("commit") or "")[:8] or None
    machine = r.get("machine") or ("this machine, measured now (--run)"
                                   if r.get("source") == "run" else None)
    items = [("preset", r.get("preset")), ("world sizes", ", ".join(map(str, _sizes(r)))),
             ("machine", machine), ("backend", r.get("backend")),
             ("source", r.get("source")), ("commit", commit),
             ("scaling", f"{r.get('scaling', 'weak')} (formulas under Scaling)"),
             ("injected costs", injection_text(r.get("injection")))]
    if r.get("against"):
        items.append(("compared with", r["against"].get("commit")))
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items if v)
    return f'<dl class="context">{rows}</dl>'


def headline(r: dict) -> str:
    """One sentence per world size beyond 1: was time lost, and to what."""
    lines = []
    for v in r.get("verdicts", []):
        row = _run(r, v["world_size"])
        lines.append(f"N={v['world_size']}: efficiency {num(row.get('efficiency'), '{:.2f}')}; "
                     + verdict_text(v, row["loss"]))
    return para(" ".join(lines), "lead") if lines else ""


def verdict_text(v: dict, loss: dict) -> str:
    """The verdict of one world size in words (the text report's, shortened)."""
    if not v["significant"]:
        return (f"no significant loss ({loss['lost_s']:+.4f} s per iteration against N=1, "
                f"within the noise floor).")
    if v["kind"] == "gain":
        return f"a gain of {-loss['lost_s']:.4f} s per iteration against N=1."
    cause = (f"{loss['lost_s']:.4f} s per iteration lost against N=1, {v['share_pct']:.0f} % "
             f"of it from {v['plain']} ({v['component']})")
    if v.get("rank") is not None:
        cause += (f" on rank {v['rank']}, which made the others wait {v['wait_caused_s']:.4f} s "
                  f"per iteration")
    return cause + "."


def scaling(r: dict, pngs: dict) -> str:
    """Speedup and efficiency per world size, then the efficiency curves beside their numbers."""
    hours = r.get("table3_projection_hours") or {}
    rows = [[row["world_size"], num(row["iter_s"]), num(row["speedup"], "{:.2f}"),
             num(row["efficiency"], "{:.2f}"), _interval(row.get("efficiency_interval"), "{:.2f}"),
             num(row["karp_flatt"], "{:.3f}"), row.get("launches") or "-",
             num(hours.get(str(row["world_size"])), "{:.1f}"),
             "unstable" if row["unstable"] else "ok"] for row in r["runs"]]
    numbers = table(["N", "iteration s", "speedup", "efficiency", "E over launches",
                     "Karp-Flatt", "launches", "thesis run, h", "spread"], rows,
                    caption="Median iteration per world size (thesis run, h: the thesis's "
                            "Table 3 weak-scaling run projected from it)",
                    warn_rows=[i for i, row in enumerate(r["runs"]) if row["unstable"]])
    fig = figure(pngs.get("efficiency.png"), "parallel efficiency by world size",
                 "Measured efficiency against the ideal (dashed) and the thesis's curves "
                 "(dotted: its published speedups divided by N).")
    return (para(r.get("scaling_formulas", "")) + numbers
            + pair(_efficiency_curves(r), fig))


def _efficiency_curves(r: dict) -> str:
    """The efficiency figure's points: measured, ideal and the thesis's, per world size."""
    measured = {row["world_size"]: row["efficiency"] for row in r["runs"]}
    thesis = {name: {int(n): s / int(n) for n, s in v.items()}
              for name, v in (r.get("thesis_speedups") or {}).items()}
    sizes = sorted(set(measured) | {1, 2, 4} | {n for v in thesis.values() for n in v})
    rows = [[n, num(measured.get(n), "{:.2f}"), "1.00"]
            + [num(v.get(n), "{:.2f}") for v in thesis.values()] for n in sizes]
    return table(["N", "measured", "ideal", *(f"thesis: {name}" for name in thesis)], rows,
                 caption="Parallel efficiency, the figure's points (thesis: published speedup / N)")


def blame(r: dict, pngs: dict) -> str:
    """Seconds per iteration by cause (one column per world size), beside the stacked bars."""
    runs = r["runs"]
    rows = [[c] + [num(row["components_s"].get(c, 0.0)) for row in runs] for c in BLAME_KEYS]
    rows += [["residual"] + [num(row.get("residual_s", 0.0), "{:+.4f}") for row in runs],
             ["iteration"] + [num(row["iter_s"]) for row in runs]]
    numbers = table(["cause", *(f"N={row['world_size']}" for row in runs)], rows,
                    caption="Seconds per iteration by cause (medians; residual = median "
                            "iteration - their sum)")
    fig = figure(pngs.get("phases.png"), "DDP iteration by cause, stacked per world size",
                 "The same medians, stacked.")
    return pair(numbers, fig) + glossary(BLAME_MEANING)


def loss(r: dict, pngs: dict) -> str:
    """The time lost against N=1: per world size its size and verdict, then its split by cause
    beside the figure of that split."""
    verdicts = {v["world_size"]: v for v in r.get("verdicts", [])}
    lossy = [(row, verdicts.get(row["world_size"])) for row in r["runs"] if row.get("loss")]
    if not lossy:
        return ""
    rows = [[row["world_size"], num(row["loss"]["lost_s"], "{:+.4f}"),
             _interval(row["loss"].get("lost_interval_s"), "{:.4f}"),
             num(row["loss"]["noise_floor_s"]), verdict_text(v, row["loss"]) if v else "-"]
            for row, v in lossy]
    numbers = table(["N", "lost s", "lost over launches", "noise floor s", "verdict"], rows,
                    caption="Time per iteration lost against N=1", text_cols=[4])
    floors = sorted({row["loss"]["spread_from"] for row, _ in lossy
                     if row["loss"].get("spread_from")})
    if floors:
        numbers += para("Noise floor from " + "; ".join(floors) + ".")
    gains = [f"N={row['world_size']}: {comp} gained {-g:.4f} s per iteration"
             for row, _ in lossy
             for comp, g in sorted(row["loss"]["gains_s"].items(), key=lambda kv: kv[1])]
    fig = figure(pngs.get("loss_split.png"), "share of the lost time by cause",
                 "Where the lost time goes, per world size.")
    return numbers + pair(_split(r.get("loss_shares") or {}) + bullets(gains), fig)


def _split(shares: dict) -> str:
    """% of the grown time by cause, one column per world size (the loss figure's bars)."""
    if not shares:
        return ""
    keys = list(BLAME_KEYS) + ["residual"]
    rows = [[k] + [num(v.get(k, 0.0), "{:.1f}") for v in shares.values()] for k in keys]
    return table(["cause", *(f"N={ws}" for ws in shares)], rows,
                 caption="% of the time that grew, by cause")


def straggler(r: dict) -> str:
    """Per world size: the rank the others waited for, and which of its phases made it late."""
    runs = [row for row in r["runs"] if (row.get("straggler") or {}).get("rank") is not None]
    if not runs:
        return ""
    phases = [c for c in BLAME_KEYS
              if any(c in (row["straggler"].get("by_phase") or {}) for row in runs)]
    rows = []
    for row in runs:
        by = row["straggler"].get("by_phase") or {}
        rows.append([row["world_size"], row["straggler"]["rank"], num(sum(by.values()))]
                    + [num(by.get(p)) for p in phases])
    return table(["N", "late rank", "others waited s", *phases], rows,
                 caption="The rank the others waited for most, and the seconds per iteration "
                         "they waited, by the phase that made it late")


def prediction(r: dict) -> str:
    """The iteration predicted from the components against the measured one, per world size:
    the launch of median error, and the worst launch beside it."""
    if all(row.get("accuracy_pct") is None for row in r["runs"]):
        return ""
    rows = []
    for row in r["runs"]:
        err = row.get("prediction_error_of_medians", row.get("prediction_error"))
        launches = row.get("launch_prediction_error") or []
        spread = (f"{100 * min(map(abs, launches)):.1f}-{100 * max(map(abs, launches)):.1f} %"
                  if len(launches) > 1 else "-")
        rows.append([row["world_size"], num(row.get("predicted_iter_s")), num(row["iter_s"]),
                     num(err, "{:+.1%}"), num(row.get("accuracy_pct"), "{:.1f}"),
                     num(row.get("worst_launch_accuracy_pct"), "{:.1f}"),
                     SOURCES.get(row.get("prediction_source"), row.get("prediction_source") or "-"),
                     spread])
    mean = r.get("prediction_accuracy_pct")
    lead = para((f"{mean:.1f} % accurate on average over the world sizes above 1 " if mean
                 is not None else "Accuracy ")
                + f"(accuracy = 100 % x (1 - |predicted - measured| / measured), on "
                f"{of_what(r['runs'])}; the worst launch per world size in the table). Not held "
                "out: the components are measured inside the run they predict. Kahira et al. "
                f"report {KAHIRA_ORACLE_PCT} % for their oracle on their own workloads (data "
                "parallelism): a reference, not a bar this one clears.")
    return lead + table(["N", "predicted s", "measured s", "error", "accuracy %",
                         "worst launch %", "components from", "error of each launch"], rows,
                        caption="Iteration predicted from the component benchmarks against the "
                                "measured median", label_cols=[6])


def _run(r: dict, ws: int) -> dict:
    return next(x for x in r["runs"] if x["world_size"] == ws)


def _sizes(r: dict) -> list[int]:
    return r.get("world_sizes") or [row["world_size"] for row in r["runs"]]


def _interval(pair_, fmt: str) -> str:
    return "-" if not pair_ else f"[{fmt.format(pair_[0])}, {fmt.format(pair_[1])}]"
