"""The report page's sections on what to do: recommendations, what-ifs run, gradient
accumulation, the loader's headroom, the comparison with another commit, and the notes.

Same contract as ``html_run``: the report dict (and figures' PNG bytes) in, HTML out, '' when
the report has nothing for the section.
"""
from __future__ import annotations

from swinkit.report.html import bullets, figure, num, pair, para, table
from swinkit.report.precision_lines import precision_name, shift_cell


def recommendations(r: dict) -> str:
    """The remedies, ranked by the efficiency each could recover."""
    recs = r.get("recommendations") or []
    if not recs:
        return ""
    rows = [[i, rec["component"], "-" if rec.get("rank") is None else rec["rank"],
             rec["world_size"], num(rec["efficiency_recoverable"], "+{:.2f}"), rec["why"],
             rec["what"]] for i, rec in enumerate(recs, 1)]
    return table(["#", "component", "rank", "at N", "efficiency back", "why", "what to do"], rows,
                 caption="Ranked by the efficiency each could recover", text_cols=[5, 6],
                 label_cols=[1])


def what_if(r: dict) -> str:
    """Each remedy predicted from components, then run: predicted against measured."""
    rows = r.get("what_if") or []
    if not rows:
        return ""
    body = [[row["name"], row["world_size"], num(row["predicted_iter_s"]),
             num(row["measured_iter_s"]), num(row["prediction_error"], "{:+.1%}"),
             num(row.get("in_launch_prediction_error"), "{:+.1%}"),
             num(row.get("efficiency_before"), "{:.2f}"),
             num(row.get("efficiency_after"), "{:.2f}"),
             _what_if_verdict(row)] for row in rows]
    out = table(["remedy", "N", "predicted s", "measured s", "error", "own launch's error",
                 "E before", "E after", "verdict"], body, text_cols=[8],
                label_cols=[0],
                caption="Predicted from the components before the remedy ran, then measured "
                        "(efficiency against the baseline's smallest run)")
    corr = {ws: v for ws, v in (r.get("what_if_rank_correlation") or {}).items() if v is not None}
    if corr:
        out += para("Ranking of remedies, predicted against measured (Spearman): "
                    + ", ".join(f"N={ws}: {v:+.2f}" for ws, v in corr.items()) + ".")
    return out + "".join(_precision_shift(s) for s in r.get("what_if_precision_shift") or [])


def _precision_shift(s: dict) -> str:
    """A precision what-if's lost time split beside the baseline's (the text report's lines
    as a table), and the loader's demand per rank in each precision."""
    b, w = s["baseline"], s["remedy"]
    names = [precision_name(label) for label in (s["baseline_precision"], s["precision"])]
    rows = [[phase, shift_cell(b, phase), shift_cell(w, phase)] for phase in b["lost_s"]]
    rows.append(["total", num(b["total_s"], "{:+.4f}"), num(w["total_s"], "{:+.4f}")])
    out = table(["phase", *names], rows, label_cols=[0],
                caption=f"Lost time at N={s['world_size']} against N="
                        f"{s['reference_world_size']}, s per iteration (share of the loss): "
                        f"{s['baseline_precision']} beside {s['precision']} ({s['name']})")
    demand = s["loader_demand_images_per_s"]
    if demand["baseline"] and demand["remedy"]:
        out += para(f"Loader demand per rank: {demand['baseline']:.1f} images/s in {names[0]}, "
                    f"{demand['remedy']:.1f} in {names[1]}.")
    return out


def _what_if_verdict(row: dict) -> str:
    """Whether the prediction held (asv's stored rows carry no noise floor: 10 % alone)."""
    if "holds" not in row:
        return "within 10 %" if abs(row["prediction_error"]) <= 0.10 else "more than 10 % off"
    if row["holds"] is None:
        return f"no change beyond noise ({row['noise_floor_s'] * 1e3:.1f} ms)"
    return "prediction holds (within 10 %)" if row["holds"] else f"prediction off: {row['why_not']}"


def grad_accum(r: dict, pngs: dict) -> str:
    """Communication per image by accumulation K beside the ideal 1/K, with its figure."""
    groups = r.get("grad_accum") or []
    if not groups:
        return ""
    rows = []
    for g in groups:
        for row in g["by_k"]:
            wire = row["wire_bytes_per_image"]
            rows.append([g["engine"] or "-", g["world_size"], row["grad_accum"],
                         num(row["comm_per_image_s"], "{:.5f}"), num(row["ratio"], "{:.2f}"),
                         num(row["ideal_ratio"], "{:.2f}"),
                         num(row["comm_rounds_per_step"], "{:g}"),
                         num(row["step_s"]), num(None if wire is None else wire / 2**20, "{:.3f}")])
    numbers = table(["engine", "N", "K", "comm/img s", "ratio", "ideal", "rounds/step", "step s",
                     "wire MB/img"], rows, label_cols=[0],
                    caption="Exposed communication per image by K (ratio to K=1)")
    verdicts = bullets(f"{g['engine'] or '-'} N={g['world_size']}: {g['verdict']}" for g in groups)
    fig = figure(pngs.get("grad_accum.png"), "communication per image by K",
                 "Communication per image relative to K=1, beside the ideal 1/K.")
    return pair(numbers + verdicts, fig)


def loader(r: dict) -> str:
    """Loader supply against the ranks' demand per world size, and where it would bind."""
    head = r.get("loader_headroom") or {}
    per = head.get("per_world_size") or {}
    if not per:
        return ""
    rows = [[ws, num(v.get("supply"), "{:.1f}"), num(v.get("demand"), "{:.1f}"),
             num(v["headroom"], "{:.2f}")] for ws, v in per.items()]
    if head.get("binds_at_world_size"):
        note = f"Loading is the bottleneck from world size {head['binds_at_world_size']}."
    elif head.get("projected_binding_world_size"):
        note = (f"Projection: loading would bind at about world size "
                f"{head['projected_binding_world_size']} on this machine.")
    else:
        note = ""
    numbers = table(["N", "supply img/s", "demand img/s", "headroom"], rows,
                    caption="Images per second per rank the loader supplies, against what "
                            "the rank consumes (headroom = supply / demand)")
    return numbers + (para(note) if note else "")


def against(r: dict) -> str:
    """Which component moved most against another commit, per shared world size."""
    other = r.get("against")
    if not other:
        return ""
    rows = [[ws, num(v["iter_change_s"], "{:+.4f}"), v["moved_most"],
             num(v["growth_s"][v["moved_most"]], "{:+.4f}")]
            for ws, v in other["per_world_size"].items()]
    return table(["N", "iteration change s", "moved most", "its change s"], rows, label_cols=[2],
                 caption=f"Against commit {other.get('commit')}: which component moved most")


def notes(r: dict) -> str:
    """The analysis's notes and the result files it could not read."""
    items = list(r.get("notes") or []) + [f"skipped unreadable result file {f}"
                                          for f in r.get("skipped_files") or []]
    return bullets(items)
