"""``swinkit converge`` as terminal text: steps to the target per cell with their spread,
efficiency in steps beside efficiency in time, and goodput (numbers from
:mod:`swinkit.attribution.convergence`)."""
from __future__ import annotations

import math


def _f(value, fmt: str = ".3g", missing: str = "-") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    return format(value, fmt)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(c.rjust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return [line(header), line(["-" * w for w in widths]), *map(line, rows)]


def target_text(result: dict) -> str:
    t = result["target"]
    parts = [f"held-out loss <= {t['loss']:g}"] if t.get("loss") is not None else []
    if t.get("miou_pct") is not None:
        parts.append(f"mIoU >= {t['miou_pct']:g} %")
    return " and ".join(parts)


def _steps(c: dict) -> str:
    """Median [min-max] of the steps; a miss shows as '>budget'."""
    if c["steps"] is None:
        return f"missed (>{c['budget']})"
    high = _f(c["steps_max"], "g") if c["steps_max"] is not None else f">{c['budget']}"
    return f"{c['steps']:g} [{c['steps_min']:g}-{high}]"


def _time(c: dict) -> str:
    if c["time_to_target_s"] is None:
        return "-"
    high = (_f(c["time_to_target_max_s"], ".1f") if c["time_to_target_max_s"] is not None
            else ">budget")
    return f"{c['time_to_target_s']:.1f} [{c['time_to_target_min_s']:.1f}-{high}]"


def cells_table(result: dict) -> list[str]:
    rows = [[c["lr_rule"], str(c["world_size"]), str(c["batch"]), str(c["global_batch"]),
             _f(c["lr"]), f"{c['reached']}/{c['seeds']}", _steps(c), _f(c["epochs"], ".2f"),
             _f(c["images"], "g"), _f(c["step_s"], ".3f"), _time(c)]
            for c in result["cells"]]
    return _table(["lr rule", "N", "batch/rank", "global", "lr", "reached",
                   "steps median [min-max]", "epochs", "images", "step s",
                   "time to target s [min-max]"], rows)


def scaling_table(result: dict) -> list[str]:
    rows = [[s["lr_rule"], str(s["batch"]), str(s["world_size"]), _f(s["efficiency_time"], ".2f"),
             _f(s["efficiency_steps"], ".2f"), _f(s["efficiency_target"], ".2f"),
             _f(s["speedup_target"], ".2f")] for s in result["scaling"]]
    return _table(["lr rule", "batch/rank", "N", "E time", "E steps", "E to target",
                   "speedup to target"], rows)


def goodput_lines(result: dict) -> list[str]:
    g = result["goodput"]
    if g["noise_scale"] is None:
        why = ("the noise swamped |G|^2 in every estimate: more steps are needed"
               if g["runs_estimated"] else "it needs a run at world size >= 2: one rank's "
               "gradient against the all-reduced one")
        return [f"goodput: no gradient noise scale ({why})"]
    spread, dominated = g["noise_scale_spread"], g.get("runs_noise_dominated", 0)
    by_batch = ", ".join(f"{_f(v, '.3g')} at batch {b}/rank"
                         for b, v in g.get("noise_scale_by_batch", {}).items())
    lines = [f"gradient noise scale B_simple = {g['noise_scale']:.3g} images (|G|^2 and "
             f"tr(Sigma) averaged over the steps of {g['runs_estimated']} runs at world size "
             f">= 2, then divided; {by_batch}); base batch m0 = {g['base_batch']}",
             "  per run: " + (f"{spread[0]:.3g}-{spread[1]:.3g}" if spread else "none")
             + (f"; {dominated} runs noise-dominated alone (|G|^2 estimate <= 0)"
                if dominated else "")]
    rules = sorted({r for row in g["rows"] for r in row["measured_efficiency"]})
    rows = [[str(r["world_size"]), str(r["batch"]), str(r["global_batch"]),
             _f(r["images_per_s"], ".1f"), _f(r["efficiency"], ".2f"),
             *[_f(r["measured_efficiency"].get(rule), ".2f") for rule in rules],
             _f(r["goodput"], ".1f")] for r in g["rows"]]
    lines += _table(["N", "batch/rank", "global", "images/s", "EFF (noise scale)",
                     *[f"EFF measured ({rule})" for rule in rules], "goodput"], rows)
    if g["best"]:
        b = g["best"]
        lines.append(f"highest goodput: world size {b['world_size']}, batch {b['batch']}/rank "
                     f"({b['goodput']:.1f} images/s at m0's efficiency)")
    return lines


def text(result: dict) -> str:
    """The whole report: what was run, the three tables, and what to keep in mind."""
    head = [f"swinkit converge: preset {result['preset']}, target {target_text(result)} on "
            f"the validation split, checked every {result['eval_every']} steps; budget "
            f"{result['max_steps']} steps; {result['seeds']} seeds per cell; "
            f"{result['optimizer']} lr0 {result['base_lr']:g} for global batch "
            f"{result['base_batch']}, warm-up {result['warmup']} steps",
            f"data: {result['data_root']}"]
    if result.get("data_note"):
        head.append(f"note: {result['data_note']}")
    body = ["", "steps to the target (median over seeds [min-max]; '>' a seed that missed):",
            *cells_table(result), "",
            "time to target = steps x the step time of swinkit ddp --bare at that world size "
            "and batch", "",
            "efficiency in steps beside efficiency in time (against world size 1, same batch "
            "per rank and rule):", *scaling_table(result), "", *goodput_lines(result)]
    for what, why in result.get("failed", {}).items():
        body.append(f"FAILED {what}: {why}")
    return "\n".join(head + body)


def efficiency_lines(rows: list[dict] | None) -> list[str]:
    """The attribution report's section on convergence (asv's ``bench_converge``, the test
    preset): efficiency in steps to a held-out target beside efficiency in time; nothing where
    the results hold none."""
    if not rows:
        return []
    table = [[r["lr_rule"], str(r["batch"]), str(r["world_size"]),
              _f(r["efficiency_time"], ".2f"), _f(r["efficiency_steps"], ".2f"),
              _f(r["efficiency_target"], ".2f")] for r in rows]
    return ["", "convergence (bench_converge, test preset): efficiency in steps to a held-out "
                "target beside efficiency in time, against world size 1 ('-': a cell missed "
                "its target or was not run; docs/converge.md)",
            *("  " + line for line in _table(["lr rule", "batch/rank", "N", "E time", "E steps",
                                              "E to target"], table))]
