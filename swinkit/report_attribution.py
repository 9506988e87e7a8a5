"""Rendering of the attribution report: a terminal summary, PNG figures and offline HTML."""
from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from swinkit.attribution import COMPONENTS


def _f(value, fmt="{:.4f}", none="-"):
    return none if value is None else fmt.format(value)


def text_report(r: dict) -> str:
    lines = [f"swinkit attribution — preset {r.get('preset')}, backend {r.get('backend')}, "
             f"source {r.get('source')}" + (f", commit {r['commit'][:8]}" if r.get("commit") else "")]
    if r.get("injection") and any(v for k, v in r["injection"].items() if k != "ranks"):
        lines.append(f"injected delays: {r['injection']}")
    head = f"{'N':>3} {'iter s':>9} {'speedup':>8} {'eff':>6} {'K-F':>6} {'pred s':>9} {'err':>7}"
    lines += ["", head, "-" * len(head)]
    for row in r["runs"]:
        err = row.get("prediction_error")
        lines.append(f"{row['world_size']:>3} {row['iter_s']:>9.4f} {_f(row['speedup'], '{:.2f}'):>8} "
                     f"{_f(row['efficiency'], '{:.2f}'):>6} {_f(row['karp_flatt'], '{:.3f}'):>6} "
                     f"{_f(row.get('predicted_iter_s')):>9} {_f(err, '{:+.1%}'):>7}"
                     + ("  unstable" if row["unstable"] else ""))
    lines += ["", "phases (s):  " + "  ".join(f"{c:>12}" for c in COMPONENTS)]
    for row in r["runs"]:
        lines.append(f"  N={row['world_size']:<8} " + "  ".join(
            f"{row['components_s'][c]:>12.4f}" for c in COMPONENTS))
    for ws, shares in r["loss_shares"].items():
        row = next(x for x in r["runs"] if str(x["world_size"]) == ws)
        lines += ["", f"where the {row['loss']['lost_s']:.4f} s lost at N={ws} went "
                      f"(efficiency {row['efficiency']:.2f}):"]
        for comp, share in sorted(shares.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {comp:<13} {share:6.1f} %  {'#' * max(int(share / 4), 0)}")
    if r.get("prediction_accuracy_pct") is not None:
        lines += ["", f"prediction from isolated components: {r['prediction_accuracy_pct']:.1f} % "
                      "accurate on average (Kahira et al.'s oracle: 97.57 % for data parallelism)"]
    head = r.get("loader_headroom")
    if head and head["per_world_size"]:
        parts = ", ".join(f"N={ws}: {v['headroom']:.2f}" for ws, v in head["per_world_size"].items())
        lines.append(f"loader headroom (supply/demand per rank): {parts}")
        if head["binds_at_world_size"]:
            lines.append(f"  loading is the bottleneck from world size {head['binds_at_world_size']}")
        elif head["projected_binding_world_size"]:
            lines.append(f"  projection: loading would bind at about world size "
                         f"{head['projected_binding_world_size']} on this machine")
    if r["recommendations"]:
        lines += ["", "recommendations (ranked by efficiency they could recover):"]
        for i, rec in enumerate(r["recommendations"], 1):
            lines.append(f"  {i}. {rec['component']} (+{rec['efficiency_recoverable']:.2f} efficiency "
                         f"at N={rec['world_size']}): {rec['why']} -> {rec['what']}")
    if r.get("against"):
        lines += ["", f"against {r['against']['commit']}:"]
        for ws, v in r["against"]["per_world_size"].items():
            lines.append(f"  N={ws}: iteration {v['iter_change_s']:+.4f} s, moved most: "
                         f"{v['moved_most']} ({v['growth_s'][v['moved_most']]:+.4f} s)")
    for note in r["notes"] + [f"skipped unreadable result file {f}" for f in r["skipped_files"]]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def figures(r: dict) -> dict[str, bytes]:
    """PNG bytes: stacked phases per world size, efficiency vs ideal (+ thesis), loss split."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}
    runs = r["runs"]
    ws = [row["world_size"] for row in runs]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bottom = [0.0] * len(runs)
    for comp in COMPONENTS:
        vals = [row["components_s"][comp] for row in runs]
        ax.bar([str(w) for w in ws], vals, bottom=bottom, label=comp)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set(xlabel="world size", ylabel="seconds per iteration", title="DDP iteration phases")
    ax.legend(fontsize=7)
    out["phases.png"] = _png(fig, plt)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    eff = [(row["world_size"], row["efficiency"]) for row in runs if row["efficiency"] is not None]
    if eff:
        ax.plot(*zip(*eff), "o-", label="measured (swinkit)")
    xs = sorted(set(ws) | {1, 2, 4})
    ax.plot(xs, [1.0] * len(xs), "k--", label="ideal")
    for name, speedups in r["thesis_speedups"].items():
        pts = sorted((int(n), s / int(n)) for n, s in speedups.items())
        ax.plot(*zip(*pts), "x:", label=f"thesis: {name}")
    ax.set(xlabel="world size", ylabel="parallel efficiency", ylim=(0, 1.15),
           title="Efficiency vs ideal (weak scaling)")
    ax.legend(fontsize=7)
    out["efficiency.png"] = _png(fig, plt)

    if r["loss_shares"]:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        keys = list(COMPONENTS) + ["residual"]
        left = [0.0] * len(r["loss_shares"])
        labels = [f"N={k}" for k in r["loss_shares"]]
        for key in keys:
            vals = [shares.get(key, 0.0) for shares in r["loss_shares"].values()]
            ax.barh(labels, vals, left=left, label=key)
            left = [a + b for a, b in zip(left, vals)]
        ax.set(xlabel="% of lost time", title="Where the lost time goes")
        ax.legend(fontsize=7)
        out["loss_split.png"] = _png(fig, plt)
    return out


def _png(fig, plt) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def write_html(r: dict, path: str | Path) -> list[Path]:
    """One self-contained HTML file (figures embedded, no CDN) plus the PNGs beside it."""
    from swinkit.measure.atomic import write_text_atomic
    path = Path(path)
    pngs = figures(r)
    written = []
    for name, data in pngs.items():
        target = path.with_name(f"{path.stem}-{name}")
        target.write_bytes(data)
        written.append(target)
    imgs = "\n".join(f'<h2>{html.escape(n[:-4].replace("_", " "))}</h2><img alt="{n}" '
                     f'src="data:image/png;base64,{base64.b64encode(d).decode()}">'
                     for n, d in pngs.items())
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>swinkit attribution"
            f"</title><style>body{{font-family:sans-serif;max-width:60em;margin:auto}}"
            f"pre{{background:#f4f4f4;padding:1em}}</style></head><body>"
            f"<h1>swinkit: where the scaling goes</h1><pre>{html.escape(text_report(r))}</pre>"
            f"{imgs}</body></html>")
    write_text_atomic(path, page)
    return [path, *written]
