"""The ground-truth matrix (``swinkit validate``) as terminal text and as HTML: per world size,
injected cause x blamed cause (shares of the added time), recovery, the straggler named, and
each cell's verdict. Reads the record :mod:`swinkit.experiments.validate` saves.
"""
from __future__ import annotations

from pathlib import Path

from swinkit.attribution.validation import BUSY_CORES, ROW_KEYS, all_passed, tally
from swinkit.report.html import bullets, document, esc, para, section, table
from swinkit.result_files import write_text_atomic

SHORT = {"data_wait": "data", "forward": "fwd", "backward": "bwd", "exposed_comm": "comm",
         "optimizer": "opt", "other": "other", "unattributed": "unattr", "residual": "resid"}
HEAD = (["injected", "on", "expected"] + [SHORT[k] for k in ROW_KEYS]
        + ["recovery", "per rank", "amount ms", "straggler", "verdict"])
READING = ("Each row is one run with the injection on every 2nd iteration: its added time "
           "(injected vs clean neighbouring iterations, every rank's, the ranks that waited "
           "too) split by blamed cause, in % of the added time (the ranks' median); resid is "
           "what the per-cause medians leave unplaced, so a row adds up to 100 %. recovery = "
           "added time blamed on the injected cause / the injected amount (measured by the "
           "injection; requested where it measures nothing: data_ms); per rank: its lowest "
           "and highest over the ranks. straggler = the rank and phase blame names as making "
           "the others wait most. two_stragglers: rank 0's loading and the last rank's "
           "backward slowed at once, each cause held to what it added alone; small_backward: "
           "a delay near the noise floor, held within its detection threshold.")


def _row(cell: dict) -> list[str]:
    where = {"all": "all", "pair": "ranks " + "+".join(map(str, cell.get("ranks", [])))}.get(
        cell["placement"], f"rank {cell['world_size'] - 1}")
    head = [cell["case"], where, cell.get("expected") or "-"]
    blank = [""] * (len(ROW_KEYS) + 4)
    if "skipped" in cell:
        return head + blank + ["skipped: " + cell["skipped"]]
    if "row" not in cell:
        return head + blank + ["FAIL: " + "; ".join(cell["failures"])]
    shares = [_pct(cell["row"][k]) for k in ROW_KEYS]
    verdict = "pass" if cell["passed"] else "FAIL: " + "; ".join(cell["failures"])
    if cell.get("foreign_cores", 0.0) > BUSY_CORES:  # NaN (unreadable) is not shown as busy
        verdict += f" [machine busy: other processes took {cell['foreign_cores']:.1f} cores]"
    return head + shares + _figures(cell) + [verdict]


def _figures(cell: dict) -> list[str]:
    """recovery, per rank (lowest-highest), amount, straggler of a cell that ran."""
    ranks = cell.get("rank_recovery") or {}
    if "late" in cell:  # the two stragglers: per cause, against what it added alone
        values = [x for by_rank in ranks.values() for x in by_rank.values()]
        late = " ".join(f"{r}/{p}" for r, p in cell["late"].items())
        alone = "+".join(f"{1e3 * t:.0f}" for t in cell["truth_s"].values())
        return ["-", _span(values), alone + " alone", late]
    s = cell["straggler"]
    straggler = "-" if s["rank"] is None else f"{s['rank']}/{s['phase']}"
    amount = f"{1e3 * cell['amount_s']:.0f}" + ("" if cell["amount_source"] == "measured" else "*")
    if "threshold_s" in cell:  # the small delay: what it added of what was asked, and the noise
        amount = (f"{1e3 * cell.get('truth_s', cell['amount_s']):.1f} of "
                  f"{1e3 * cell['amount_s']:.1f} (noise {1e3 * cell['threshold_s']:.1f})")
    return [f"{cell['recovery']:.2f}", _span(list(ranks.values())), amount, straggler]


def _span(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}" if values else "-"


def _pct(share: float) -> str:
    """A share in whole %, no "-0"; "-" where nothing was added to share (NaN)."""
    return "-" if share != share else f"{round(100 * share):d}"


def _by_world_size(validation: dict) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for cell in validation["cells"]:
        out.setdefault(cell["world_size"], []).append(cell)
    return out


def _title(validation: dict, ws: int) -> str:
    shared = " (oversubscribed: the ranks share CPU cores, so waits include waiting for a " \
             "core)" if ws in validation.get("shared_cores", []) else ""
    return f"world size {ws}{shared}"


def verdict_line(validation: dict) -> str:
    t = tally(validation["cells"])
    word = ("PASS" if all_passed(validation) else
            "INCONCLUSIVE" if t["failed"] == 0 and t["inconclusive"] else "FAIL")
    return (f"{word}: {t['passed']}/{t['run']} cells pass"
            + (f", {t['skipped']} skipped" if t["skipped"] else "")
            + (f" ({t['inconclusive']} of them under this host's noise: run again with more "
               "--iters)" if t["inconclusive"] else ""))


def _setting(validation: dict) -> str:
    th = validation["thresholds"]
    m = validation["machine"]
    dirty = " (with uncommitted changes)" if validation.get("dirty") else ""
    return (f"preset {validation['preset']}, {validation['amount_ms']:g} ms injected per "
            f"injected iteration, {validation['iters']} measured iterations (every 2nd "
            f"injected); host {m['hostname']}, {m.get('cpu_count')} CPUs, GPUs "
            f"{', '.join(m.get('gpus') or []) or 'none'}; commit "
            f"{(validation.get('commit') or 'unknown')[:12]}{dirty}. A cell passes with "
            f"{th['min_share']:.0%}-{th.get('max_share', float('inf')):.0%} of the added time on "
            f"the injected cause, a residual within +-{th.get('max_residual', 1):.0%}, recovery "
            f"within 1 +- {th['recovery_tol']:g} on every rank, each rank's blame adding up to "
            f"its iteration within {1e3 * th.get('addup_tol_s', 0):g} ms and, for one rank, "
            "that rank named straggler in the injected phase.")


def text(validation: dict) -> str:
    """The matrix as terminal text: one table per world size, then the verdict."""
    lines = ["ground truth: blame against injected causes", _setting(validation), ""]
    for ws, cells in _by_world_size(validation).items():
        rows = [HEAD] + [_row(c) for c in cells]
        widths = [max(len(r[i]) for r in rows) for i in range(len(HEAD) - 1)]
        lines.append(_title(validation, ws))
        for r in rows:
            lines.append("  " + "  ".join(v.rjust(w) if 3 <= i < len(HEAD) - 2 else v.ljust(w)
                                          for i, (v, w) in enumerate(zip(r, widths)))
                         + "  " + r[-1])
        lines.append("")
    lines.append("shares in % of the added time; * amount requested (the injection measures "
                 "nothing)")
    lines += cell_notes(validation)
    lines.append(verdict_line(validation))
    return "\n".join(lines)


def cell_notes(validation: dict) -> list[str]:
    """What the two-stragglers and small-delay cells found beyond their row: whether the two
    delays added up or overlapped, and the detection threshold near the noise floor."""
    out = []
    for c in validation["cells"]:
        if "sum_alone_s" in c:
            grew, total, most = c["added_s"], c["sum_alone_s"], c["max_alone_s"]
            which = "their sum" if abs(grew - total) < abs(grew - most) else "their maximum"
            out.append(f"N={c['world_size']} two stragglers: the iteration grew "
                       f"{1e3 * grew:.0f} ms; each delay alone {1e3 * most:.0f} ms at most, "
                       f"{1e3 * total:.0f} ms together: nearer {which} (a rank late at one "
                       "collective and another late at the next add up; late at the same one, "
                       "the later decides)")
        if "threshold_s" in c:
            out.append(f"N={c['world_size']} small delay: detection threshold "
                       f"{1e3 * c['threshold_s']:.1f} ms on {c['expected']}, "
                       f"{1e3 * c['iteration_threshold_s']:.1f} ms on the iteration (twice the "
                       "noise of the median difference)"
                       + (f"; the delay added {1e3 * c['truth_s']:.1f} ms of the "
                          f"{1e3 * c['amount_s']:.1f} asked to the late rank's backward (less "
                          "where ranks share cores) and cost the others "
                          + ", ".join(f"{1e3 * w:.1f}" for w in c["waits_s"].values())
                          + " ms, what each is held to" if "waits_s" in c else ""))
    return out


def html_section(validation: dict) -> str:
    """The matrix as a page section (for the attribution report's page, or its own)."""
    parts = [para(verdict_line(validation), "lead"), para(_setting(validation)), para(READING)]
    parts += [para(note) for note in cell_notes(validation)]
    for ws, cells in _by_world_size(validation).items():
        failed = [n for n, c in enumerate(cells) if "skipped" not in c and not c.get("passed")]
        parts.append(table(HEAD, [_row(c) for c in cells], caption=_title(validation, ws),
                           label_cols=(1, 2), text_cols=(len(HEAD) - 1,), warn_rows=failed))
    if validation.get("shared_cores"):
        parts.append(bullets([f"world size {ws}: more ranks than cores, ranks share cores"
                              for ws in validation["shared_cores"]]))
    return section("validation", "Ground truth: blame against injected causes", "".join(parts))


def write_html(validation: dict, path: str | Path) -> Path:
    """The matrix as one self-contained page."""
    body = (f"<h1>{esc('swinkit validate: can this report be trusted here?')}</h1>"
            + html_section(validation))
    return write_text_atomic(path, document("swinkit validate", body))
