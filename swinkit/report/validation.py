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
        + ["recovery", "amount ms", "straggler", "verdict"])
READING = ("Each row is one run with the injection on every 2nd iteration: its added time "
           "(injected vs clean neighbouring iterations) split by blamed cause, in % of the "
           "added time; resid is what the per-cause medians leave unplaced, so a row adds up "
           "to 100 %. recovery = added time blamed on the injected cause / the injected amount "
           "(measured by the injection; requested where it measures nothing: data_ms). "
           "straggler = the rank and phase blame names as making the others wait most.")


def _row(cell: dict) -> list[str]:
    where = "all" if cell["placement"] == "all" else f"rank {cell['world_size'] - 1}"
    head = [cell["case"], where, cell.get("expected") or "-"]
    if "skipped" in cell:
        return head + [""] * len(ROW_KEYS) + ["", "", "", "skipped: " + cell["skipped"]]
    if "row" not in cell:
        return head + [""] * len(ROW_KEYS) + ["", "", "", "FAIL: " + "; ".join(cell["failures"])]
    shares = [_pct(cell["row"][k]) for k in ROW_KEYS]
    s = cell["straggler"]
    straggler = "-" if s["rank"] is None else f"{s['rank']}/{s['phase']}"
    verdict = "pass" if cell["passed"] else "FAIL: " + "; ".join(cell["failures"])
    if cell.get("foreign_cores", 0.0) > BUSY_CORES:  # NaN (unreadable) is not shown as busy
        verdict += f" [machine busy: other processes took {cell['foreign_cores']:.1f} cores]"
    amount = f"{1e3 * cell['amount_s']:.0f}" + ("" if cell["amount_source"] == "measured" else "*")
    return head + shares + [f"{cell['recovery']:.2f}", amount, straggler, verdict]


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
    word = "PASS" if all_passed(validation) else "FAIL"
    return (f"{word}: {t['passed']}/{t['run']} cells pass"
            + (f", {t['skipped']} skipped" if t["skipped"] else ""))


def _setting(validation: dict) -> str:
    th = validation["thresholds"]
    m = validation["machine"]
    dirty = " (with uncommitted changes)" if validation.get("dirty") else ""
    return (f"preset {validation['preset']}, {validation['amount_ms']:g} ms injected per "
            f"injected iteration, {validation['iters']} measured iterations (every 2nd "
            f"injected); host {m['hostname']}, {m.get('cpu_count')} CPUs, GPUs "
            f"{', '.join(m.get('gpus') or []) or 'none'}; commit "
            f"{(validation.get('commit') or 'unknown')[:12]}{dirty}. A cell passes with >= "
            f"{th['min_share']:.0%} of the added time on the injected cause, recovery within "
            f"1 +- {th['recovery_tol']:g} and, for one rank, that rank named straggler in the "
            "injected phase.")


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
    lines.append(verdict_line(validation))
    return "\n".join(lines)


def html_section(validation: dict) -> str:
    """The matrix as a page section (for the attribution report's page, or its own)."""
    parts = [para(verdict_line(validation), "lead"), para(_setting(validation)), para(READING)]
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
