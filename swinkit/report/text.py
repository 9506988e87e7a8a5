"""The attribution report as terminal text."""
from __future__ import annotations

from swinkit.attribution.validation import validation_status_line
from swinkit.report.converge import efficiency_lines
from swinkit.report.precision_lines import shift_lines
from swinkit.injection import DELAY_FIELDS
from swinkit.measure.phases import BLAME_KEYS


def _f(value, fmt="{:.4f}", none="-"):
    return none if value is None else fmt.format(value)


def of_what(runs: list[dict]) -> str:
    """What the accuracy was computed on (analysis.analyse: per launch where launches were
    paired and repeated, else on the medians)."""
    if any(row.get("prediction_source") == "paired"
           and len(row.get("launch_prediction_error") or []) > 1 for row in runs):
        return "each launch's prediction against its own run, the launch of median error"
    return "medians"


def injection_text(inj: dict | None) -> str | None:
    """Injected costs in the report's words, None when nothing was injected.

    >>> injection_text({"backward_ms": 120.0, "comm_scale": 1.0, "ranks": [1]})
    'backward_ms=120 on ranks 1'
    >>> injection_text({"parts": [{"data_ms": 60, "ranks": [0]}, {"backward_ms": 50, "ranks": [1]}]})
    'data_ms=60 on ranks 0; backward_ms=50 on ranks 1'
    """
    inj = inj or {}
    if inj.get("parts"):  # several --inject specs, each with its own ranks
        return "; ".join(filter(None, (injection_text(p) for p in inj["parts"]))) or None
    parts = [f"{k}={inj[k]:g}" for k in DELAY_FIELDS if inj.get(k)]
    parts += [f"comm_scale={inj['comm_scale']:g}"] if inj.get("comm_scale", 1) > 1 else []
    if not parts:
        return None
    where = "all ranks" if inj.get("ranks") is None else "ranks " + "+".join(map(str, inj["ranks"]))
    return f"{','.join(parts)} on {where}"


KAHIRA = ("Kahira et al. report 97.57 % for their oracle on their own workloads (data "
          "parallelism): another method on other models, a reference, not a bar this one clears")


def prediction_lines(r: dict) -> list[str]:
    """The oracle's accuracy per world size: the launch of median error, the worst launch and
    the range over the launches; the mean over the world sizes that synchronise (N=1 replays
    timers only). Not held out: it measures inside the run it predicts."""
    rows = [row for row in r["runs"] if row.get("accuracy_pct") is not None]
    if not rows:
        return []
    sources = {row.get("prediction_source") for row in rows} - {None}
    where = {"paired": "measured in the DDP run's own launch (the oracle, not held out; scored "
                       "against that launch's DDP steps, each after a barrier)",
             "isolated": "measured by the component benchmarks, each in its own processes"}
    per_ws = []
    for row in rows:
        errors = row.get("launch_prediction_error") or []
        spread = (f", worst launch {row['worst_launch_accuracy_pct']:.1f} %, range "
                  f"{100 * (1 - max(map(abs, errors))):.1f}-{100 * (1 - min(map(abs, errors))):.1f}"
                  f" % over {len(errors)} launches" if len(errors) > 1
                  and "worst_launch_accuracy_pct" in row else "")
        timers = " (nothing to synchronise: a check of the timers)" if row["world_size"] == 1 else ""
        per_ws.append(f"N={row['world_size']}{timers}: {row['accuracy_pct']:.1f} %{spread}")
    mean = r.get("prediction_accuracy_pct")
    return ["", f"prediction from components, {'; '.join(where.get(s, s) for s in sorted(sources))}"
                f": {'; '.join(per_ws)}"
            + (f"; mean over N > 1: {mean:.1f} %" if mean is not None else ""),
            f"  accuracy = 100 % x (1 - |predicted - measured| / measured), "
            f"{of_what(r['runs'])}; {KAHIRA}"]


def text_report(r: dict) -> str:
    # Long: the report top to bottom, one section after another in the order it prints.
    lines = [f"swinkit attribution — preset {r.get('preset')}, backend {r.get('backend')}, "
             + (f"precision {r['precision']}, " if r.get("precision") else "")
             + f"source {r.get('source')}" + (f", commit {r['commit'][:8]}" if r.get("commit") else "")]
    injected = injection_text(r.get("injection"))
    if injected:
        lines.append(f"injected costs: {injected}")
    if "validation" in r:  # set by tools/attribute.py: the blame checked on this machine?
        lines.append(validation_status_line(r["validation"]))
    lines.append(f"{r.get('scaling', 'weak')} scaling: {r.get('scaling_formulas', '')}")
    head = f"{'N':>3} {'iter s':>9} {'speedup':>8} {'eff':>6} {'K-F':>6} {'pred s':>9} {'err':>7}"
    lines += ["", head, "-" * len(head)]
    for row in r["runs"]:
        # pred s and iter s are medians: err is theirs (the accuracy line below is per launch)
        err = row.get("prediction_error_of_medians", row.get("prediction_error"))
        lines.append(f"{row['world_size']:>3} {row['iter_s']:>9.4f} {_f(row['speedup'], '{:.2f}'):>8} "
                     f"{_f(row['efficiency'], '{:.2f}'):>6} {_f(row['karp_flatt'], '{:.3f}'):>6} "
                     f"{_f(row.get('predicted_iter_s')):>9} {_f(err, '{:+.1%}'):>7}"
                     + (f"  E in [{row['efficiency_interval'][0]:.2f}, "
                        f"{row['efficiency_interval'][1]:.2f}] over {row['launches']} launches"
                        if row.get("efficiency_interval") else "")
                     + ("  unstable" if row["unstable"] else ""))
    lines += ["", "blame (s per iteration, medians; residual = median iteration - their sum):",
              "  " + " " * 8 + "".join(f"{c:>14}" for c in BLAME_KEYS) + f"{'residual':>10}"]
    for row in r["runs"]:
        lines.append(f"  N={row['world_size']:<6}" + "".join(
            f"{row['components_s'].get(c, 0.0):>14.4f}" for c in BLAME_KEYS)
            + f"{row.get('residual_s', 0.0):>+10.4f}")
    lines += _verdicts(r)
    lines += prediction_lines(r)
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
            lines.append(f"  {i}. {rec['component']}"
                         + (f" on rank {rec['rank']}" if rec.get("rank") is not None else "")
                         + f" (+{rec['efficiency_recoverable']:.2f} efficiency "
                         f"at N={rec['world_size']}): {rec['why']} -> {rec['what']}")
    lines += _what_if(r)
    lines += grad_accum_lines(r.get("grad_accum"))
    lines += efficiency_lines(r.get("convergence"))
    if r.get("against"):
        lines += ["", f"against {r['against']['commit']}:"]
        for ws, v in r["against"]["per_world_size"].items():
            lines.append(f"  N={ws}: iteration {v['iter_change_s']:+.4f} s, moved most: "
                         f"{v['moved_most']} ({v['growth_s'][v['moved_most']]:+.4f} s)")
    for note in r["notes"] + [f"skipped unreadable result file {f}" for f in r["skipped_files"]]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def _verdicts(r: dict) -> list[str]:
    """Per world size: significant or not, where the lost time went, who caused it."""
    lines = []
    for v in r.get("verdicts", []):
        ws = v["world_size"]
        row = next(x for x in r["runs"] if x["world_size"] == ws)
        loss = row["loss"]
        floor = (f"noise floor {loss['noise_floor_s']:.4f} s from {loss['spread_from']}"
                 if loss["noise_floor_s"] is not None else "noise floor unknown")
        if loss.get("significant_only_by_every_launch"):
            floor += ("; the loss is under that floor, but each launch alone shows it beyond "
                      "its own noise, in the same direction")
        if not v["significant"]:
            lines += ["", f"N={ws}: no significant loss ({loss['lost_s']:+.4f} s per iteration "
                          f"against N=1; {floor})"]
            continue
        if v["kind"] == "gain":
            lines += ["", f"N={ws}: a gain of {-loss['lost_s']:.4f} s per iteration against N=1 "
                          f"({floor})"]
            continue
        interval = loss.get("lost_interval_s")
        lines += ["", f"N={ws}: {loss['lost_s']:.4f} s per iteration lost against N=1 "
                      f"(efficiency {row['efficiency']:.2f}"
                      + (f", lost in [{interval[0]:.4f}, {interval[1]:.4f}] s over launches"
                         if interval else "") + f"; {floor})"]
        cause = f"most of it ({v['share_pct']:.0f} %) comes from {v['plain']} ({v['component']})"
        if v.get("rank") is not None:
            cause += (f" on rank {v['rank']}: the others waited {v['wait_caused_s']:.4f} s per "
                      f"iteration for it")
        lines.append("  " + cause)
        lines.append("  share of the time that grew, by cause:")
        for comp, share in sorted(loss["shares_pct"].items(), key=lambda kv: -kv[1]):
            lines.append(f"    {comp:<13} {share:6.1f} %  {'#' * max(int(share / 4), 0)}")
        for comp, gain in sorted(loss["gains_s"].items(), key=lambda kv: kv[1]):
            lines.append(f"    {comp:<13} gained {-gain:.4f} s")
    return lines


def _what_if(r: dict) -> list[str]:
    """Predicted vs measured per remedy: the prediction was written before the remedy ran."""
    rows = r.get("what_if")
    if not rows:
        return []
    lines = ["", "what-ifs, predicted from components then run (s per iteration; efficiency "
                 "against the baseline's smallest run):",
             f"  {'remedy':<20}{'N':>3}{'predicted':>11}{'measured':>10}{'error':>8}"
             f"{'own':>8}{'E before':>10}{'E after':>9}  verdict"]
    for row in rows:
        if "holds" not in row:  # read back from asv: no noise floor stored with it
            verdict = ("within 10 %" if abs(row["prediction_error"]) <= 0.10
                       else "more than 10 % off")
        elif row["holds"] is None:
            verdict = f"no change beyond noise ({row['noise_floor_s'] * 1e3:.1f} ms)"
        elif row["holds"]:
            verdict = "prediction holds (within 10 %)"
        else:
            verdict = f"prediction off: {row['why_not']}"
        lines.append(f"  {row['name']:<20}{row['world_size']:>3}{row['predicted_iter_s']:>11.4f}"
                     f"{row['measured_iter_s']:>10.4f}{row['prediction_error']:>+8.1%}"
                     f"{_f(row.get('in_launch_prediction_error'), '{:+.1%}'):>8}"
                     f"{_f(row['efficiency_before'], '{:.2f}'):>10}"
                     f"{_f(row['efficiency_after'], '{:.2f}'):>9}  {verdict}")
    lines += [f"  note: {row['name']} at N={row['world_size']}: {row['note']}"
              for row in rows if row.get("note")]
    if any(row.get("in_launch_prediction_error") is not None for row in rows):
        lines.append("  own: the error of the prediction from the components the run's own "
                     "launch measured beside its DDP steps (written after, never shown them)")
    corr = {ws: v for ws, v in (r.get("what_if_rank_correlation") or {}).items() if v is not None}
    if corr:
        lines.append("  ranking of remedies, predicted vs measured (Spearman): "
                     + ", ".join(f"N={ws}: {v:+.2f}" for ws, v in corr.items()))
    return lines + shift_lines(r.get("what_if_precision_shift") or [])


def grad_accum_lines(summary: list[dict] | None) -> list[str]:
    """Communication per image at each K beside the ideal 1/K, and whether it falls, per
    (engine, world size): the case for accumulation is this number, not the step time (a step
    of K micro-batches is K times longer by design)."""
    if not summary:
        return []
    lines = ["", "gradient accumulation: exposed communication per image by K (ratio to K=1; "
                 "ideal accumulation gives 1/K)",
             f"  {'engine':<11}{'N':>3}{'K':>3}{'comm/img s':>12}{'ratio':>7}{'ideal':>7}"
             f"{'rounds/step':>13}{'step s':>9}{'wire MB/img':>13}"]
    for group in summary:
        engine = group["engine"] or "-"
        for row in group["by_k"]:
            wire = row["wire_bytes_per_image"]
            lines.append(f"  {engine:<11}{group['world_size']:>3}{row['grad_accum']:>3}"
                         f"{_f(row['comm_per_image_s'], '{:.5f}'):>12}"
                         f"{_f(row['ratio'], '{:.2f}'):>7}{row['ideal_ratio']:>7.2f}"
                         f"{_f(row['comm_rounds_per_step'], '{:g}'):>13}"
                         f"{_f(row['step_s']):>9}"
                         f"{_f(None if wire is None else wire / 2**20, '{:.3f}'):>13}")
        lines.append(f"  {engine} N={group['world_size']}: {group['verdict']}")
    return lines
