"""Text of the held-out prediction (``tools/attribute.py --predict``) and the thesis projection:
every predicted figure labelled as such, the two naive predictions beside swinkit's, the
assumptions listed. Rendering only: the numbers come from
:mod:`swinkit.predict.supervisor.held_out` and :mod:`swinkit.predict.numbers.links`."""
from __future__ import annotations

from swinkit.predict.numbers.scores import is_in_launch, summarize
from swinkit.predict.numbers.miss_split import TERMS, mean_terms
from swinkit.predict.numbers.assumptions import CPU_LIMIT, on_cpu
from swinkit.attribution.thesis import THESIS_SPEEDUPS
from swinkit.measure.bucket_spans import bucket_index

PREDICTORS = (("model", "swinkit (predicted)"), ("perfect", "perfect scaling T(1)"),
              ("plus_allreduce", "T(1) + all-reduce at N'"), ("no_network", "no network term"),
              ("paired", "oracle paired at N' (not held out)"))


def _heading(result: dict, scored: bool) -> str:
    """What was predicted from what, and how the prediction was kept apart from the run."""
    src = ",".join(str(s) for s in result["from"])
    sizes = ",".join(str(t) for t in result["targets"])
    if is_in_launch(result):
        return (f"IN-LAUNCH PREDICTION, NOT HELD OUT: world sizes {sizes} from world size 1 "
                f"({result['preset']} preset), made from the steps of each rank alone in turn "
                "(world size 1 in each rank's place) interleaved step by step with the DDP "
                "steps of the launch at that size, then scored against those DDP steps: the "
                "run predicted from shares the scored run's launch, which a user who has not "
                "run that size cannot have (held out: separate launches)")
    how = ("HELD OUT: every 'predicted' figure was made before, and apart from, any DDP run "
           "at that size" + (", then scored against it" if scored else ""))
    return (f"Predicted world sizes {sizes} (KxG: K nodes of G ranks) from world size(s) "
            f"{src} ({result['preset']} preset). {how}")


def held_out_lines(result: dict) -> list[str]:
    """The per-launch table, the per-size worst accuracy of each predictor, the predicted parts
    of the first launch and the assumptions."""
    scored = bool(result.get("summary"))
    out = [_heading(result, scored)]
    head = f"{'launch':>6} {'N':>3} {'T(1) s':>8} {'predicted s':>12} {'pred. E':>8}"
    head += f" {'perfect s':>10} {'+allreduce s':>13}"
    if scored:
        head += f" {'measured s':>11} {'meas. E':>8} {'acc. model':>10} {'perfect':>8} {'+allred.':>9}"
    out.append(head)
    for row in result["launches"]:
        for ws, p in sorted(row["targets"].items(), key=lambda kv: kv[1]["world_size"]):
            line = (f"{row['launch']:>6} {str(ws):>3} {p['t1_s']:8.4f} {p['predicted_iter_s']:12.4f} "
                    f"{p['predicted_efficiency']:8.3f} {p['perfect_scaling_s']:10.4f} "
                    f"{p['plus_allreduce_s']:13.4f}")
            if "measured_iter_s" in p:
                acc = p["accuracy"]
                line += (f" {p['measured_iter_s']:11.4f} {p['measured_efficiency']:8.3f} "
                         f"{acc['model']['accuracy_pct']:9.1f}% {acc['perfect']['accuracy_pct']:7.1f}%"
                         f" {acc['plus_allreduce']['accuracy_pct']:8.1f}%")
            out.append(line)
    inter = result.get("inter_link")
    if inter:
        timed = ", ".join(f"{t * 1e3:.2f}" for t in inter["timed_s"])
        out.append(f"inter-node link {inter['source']}: {inter['bandwidth_gbps']:.3g} GB/s, "
                   f"{inter['latency_s'] * 1e6:.3g} us ({inter['fit']}), fitted to the buckets' "
                   f"all-reduces across them: {timed} ms (one host: loopback, not a network)")
    loads = [row["load_average"] for row in result["launches"] if "load_average" in row]
    if loads:
        out.append("host load average (1 min) at each launch: "
                   + ", ".join(f"{x:.1f}" for x in loads))
    kind = "in-launch" if is_in_launch(result) else "held-out"
    out += accuracy_lines(result.get("summary") or {}, f"{kind} accuracy per launch")
    out += accuracy_lines(summarize(result["launches"], result["targets"], "accuracy_unpaired"),
                          "against the same configuration run unpaired (plain DDP steps, no "
                          "barrier between them), accuracy per launch")
    out += barrier_lines(result["launches"])
    out += repeatability_lines(result.get("repeatability") or {})
    first = result["launches"][0]["targets"] if result["launches"] else {}
    for ws, p in sorted(first.items(), key=lambda kv: kv[1]["world_size"]):
        parts = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in p["components_s"].items())
        slowed = p.get("compute_slowdown", p["core_slowdown"])
        out.append(f"predicted parts at N={ws} (launch 1, ms): {parts}; compute slowed "
                   f"x{slowed:.2f} by the shared host (x{p['core_slowdown']:.2f} by the cores' "
                   f"overcommit); communication {p['comm_source']}")
        if p.get("paired_components_s"):
            parts = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in p["paired_components_s"].items())
            out.append(f"  measured in the run at N={ws} afterwards (paired components, ms): "
                       f"{parts}")
    out += sharing_lines(result["launches"])
    out += miss_lines(result["launches"])
    out += bucket_span_lines(result["launches"])
    if first:
        out.append("assumptions:")
        out += [f"  - {a}" for a in next(iter(first.values()))["assumptions"]]
    if on_cpu(result):
        out.append(f"limit: {CPU_LIMIT}")
    return out


def accuracy_lines(summary: dict, what: str) -> list[str]:
    """Per target size, each predictor's accuracy in every launch, its worst and its range."""
    out = []
    for ws, by in sorted(summary.items(), key=lambda kv: int(kv[0])):
        out.append(f"world size {ws}, {what} (worst; range):")
        for key, label in PREDICTORS:
            if key in by:
                r = by[key]
                pcts = ", ".join(f"{v:.1f}" for v in r["per_launch_pct"])
                best = r.get("best_pct", max(r["per_launch_pct"]))
                out.append(f"  {label:38s} {pcts} % ({r['worst_pct']:.1f} %; "
                           f"{best - r['worst_pct']:.1f} points)")
    return out


def barrier_lines(launches: list[dict]) -> list[str]:
    """Per target size, what the paired launch's barrier hid: the unpaired run's iteration
    less the paired run's DDP steps', per launch."""
    out = []
    for ws in (launches[0]["targets"] if launches else {}):
        gaps = [(row["targets"][ws]["barrier_gap_s"], row["targets"][ws]["measured_iter_s"])
                for row in launches if "barrier_gap_s" in row["targets"].get(ws, {})]
        if gaps:
            out.append(f"world size {ws}, the unpaired run less the paired run's DDP steps "
                       "(what the barrier before each paired step hides), per launch: "
                       + ", ".join(f"{1e3 * g:+.1f} ms ({g / t:+.1%})" for g, t in gaps))
    return out


def sharing_lines(launches: list[dict]) -> list[str]:
    """Per target size, each launch's compute slowdown by the shared host as predicted with
    beside the stand-in's own reading at that launch's last timing: how much the averaging
    moved it. Only from a basis at 1:
    from more ranks the stand-in is not used (the basis's own compute already shares the
    host)."""
    out = []
    sizes = launches[0]["targets"] if len(launches) > 1 else {}
    for ws in sizes:
        if sizes[ws].get("from_world_size", 1) != 1:
            continue
        used = [row["targets"][ws].get("compute_slowdown") for row in launches]
        own = [(row.get("timed") or {}).get(ws, {}).get("compute_slowdown") for row in launches]
        if None in used or None in own:
            continue
        timings = 1 + len((launches[-1].get("timed_earlier") or {}).get(ws, []))
        how = f"averaged over the launch's own {timings} timings"
        out.append(f"compute slowed by the shared host at N={ws}, per launch: "
                   + ", ".join(f"x{x:.3f}" for x in used) + " (the stand-in's own reading at "
                   "each launch's last timing: " + ", ".join(f"x{x:.3f}" for x in own)
                   + f"; {how}, then the larger of it and the cores' overcommit)")
    return out


def miss_lines(launches: list[dict]) -> list[str]:
    """Per scored launch and size, where the miss lay, input by input
    (:mod:`swinkit.predict.numbers.miss_split`), and each term's mean over the launches."""
    rows = [(row["launch"], ws, p["miss_split"]) for row in launches
            for ws, p in row["targets"].items() if "miss_split" in p]
    failed = [f"  launch {launch}, N={ws}: not split ({split['error']})"
              for launch, ws, split in rows if "error" in split]
    rows = [r for r in rows if "terms_s" in r[2]]
    if not rows:
        return failed

    def terms(t: dict) -> str:
        return ", ".join(f"{name.replace('_', ' ')} {t[name] * 1e3:+.1f}" for name in TERMS)
    out = ["where the miss lay (ms, + where the prediction was short): the run's own inputs at "
           "N' (its paired components) swapped in one at a time in this order, the prediction "
           "remade after each; the terms add up to measured - predicted"]
    for launch, ws, split in rows:
        miss = split["measured_s"] - split["predicted_s"]
        out.append(f"  launch {launch}, N={ws}: {terms(split['terms_s'])} ({miss * 1e3:+.1f})")
    for ws in sorted({ws for _, ws, _ in rows}, key=int):
        mine = [split for _, w, split in rows if w == ws]
        if len(mine) > 1:
            out.append(f"  mean over {len(mine)} launches, N={ws}: {terms(mean_terms(mine))}")
    return out + failed


def bucket_span_lines(launches: list[dict]) -> list[str]:
    """Per scored launch and size, the buckets' all-reduces as the run at N' had them (last
    rank ready to last rank done, :mod:`swinkit.measure.bucket_spans`) beside the durations
    the prediction replays (timed alone at N').

    >>> launch = {"launch": 1, "targets": {"2": {"bucket_comm_s": [0.0024, 0.0023],
    ...     "bucket_spans": {"bucket0": {"span_s": 0.0046, "beside_backward_s": 0.0046},
    ...                      "bucket1": {"span_s": 0.0034, "beside_backward_s": 0.0}}}}}
    >>> print("\\n".join(bucket_span_lines([launch])))  # doctest: +NORMALIZE_WHITESPACE
    the buckets' all-reduces in the run (ms, median: last rank ready to done, of it beside
    backward) against the durations replayed (timed alone at N')
      launch 1, N=2: 4.6 (4.6), 3.4 (0.0) against 2.4, 2.3
    >>> del launch["targets"]["2"]["bucket_spans"]["bucket0"]  # none read: its column stays
    >>> bucket_span_lines([launch])[1]
    '  launch 1, N=2: -, 3.4 (0.0) against 2.4, 2.3'
    """
    rows = [(row["launch"], ws, p) for row in launches for ws, p in row["targets"].items()
            if p.get("bucket_spans") and p.get("bucket_comm_s")]
    if not rows:
        return []
    out = ["the buckets' all-reduces in the run (ms, median: last rank ready to done, of it "
           "beside backward) against the durations replayed (timed alone at N')"]
    for launch, ws, p in rows:
        spans, alone = p["bucket_spans"], p["bucket_comm_s"]
        count = max(len(alone), *(bucket_index(name) + 1 for name in spans))
        # by bucket index, "-" where the run read none (or nothing was timed alone)
        ran = [spans.get(f"bucket{j}") for j in range(count)]
        run = ", ".join(f"{s['span_s'] * 1e3:.1f} ({s['beside_backward_s'] * 1e3:.1f})"
                        if s else "-" for s in ran)
        timed = ", ".join(f"{alone[j] * 1e3:.1f}" if j < len(alone) else "-"
                          for j in range(count))
        out.append(f"  launch {launch}, N={ws}: {run} against {timed}")
    return out


def repeatability_lines(repeat: dict) -> list[str]:
    """The host's run-to-run spread (:func:`swinkit.predict.numbers.scores.repeatability`),
    in the predictors' columns."""
    if not repeat:
        return []
    out = ["the host's own repeatability (each launch's measured iteration as a prediction of "
           "the next launch's, same size; a score inside it cannot be told from the host's "
           "noise):"]
    for ws, r in sorted(repeat.items(), key=lambda kv: int(kv[0])):
        pcts = ", ".join(f"{v:.1f}" for v in r["per_pair_pct"])
        out.append(f"  {'world size ' + str(ws):38s} {pcts} % ({r['worst_pct']:.1f} %)")
    return out


def projection_lines(projection: dict, measured: dict | None = None) -> list[str]:
    """The thesis's table as a projection: predicted speedups beside the thesis's measured
    ones, with the stated inputs each came from."""
    measured = THESIS_SPEEDUPS if measured is None else measured
    out = ["PROJECTION (predicted from stated device and link figures, not measured): weak-"
           "scaling speedup S(N) = N x T(1) / T(N) beside the thesis's measured speedups"]
    for key, proj in projection.items():
        rows = proj["rows"]
        out.append(f"{key}: inputs: iteration alone {proj['iter_s']:.3f} s (backward "
                   f"{proj['backward_share']:.0%}), gradient {proj['gradient_bytes'] / 1e6:.1f} MB, "
                   f"link {proj['link_gbps']:g} GB/s, {proj['link_latency_s'] * 1e6:g} us")
        for n, r in rows.items():
            thesis = (measured.get(key) or {}).get(int(n))
            seen = f"{thesis:.2f}" if thesis is not None else "-"
            out.append(f"  N={int(n)}: predicted speedup {r['speedup']:.2f} (all-reduce "
                       f"{r['allreduce_s'] * 1e3:.1f} ms, exposed {r['exposed_s'] * 1e3:.1f} ms); "
                       f"thesis measured {seen}")
    out.append("  (where the projection is far above the thesis, the all-reduce on these links "
               "does not explain the thesis's loss: the rest lies in what the projection leaves "
               "out: loading, host cores, SyncBN, waiting for stragglers)")
    return out
