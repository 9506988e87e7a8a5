"""The attribution report as terminal text."""
from __future__ import annotations

from swinkit.measure.phases import PHASES as COMPONENTS


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
