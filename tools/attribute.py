"""Where does the scaling go? Attribute lost parallel efficiency to components.

Examples:
    .venv/bin/python tools/attribute.py                      # latest asv results of this machine
    .venv/bin/python tools/attribute.py --commit 1a2b3c4d --against 5e6f7a8b
    .venv/bin/python tools/attribute.py --run --preset test --world-sizes 1,2 \
        --json a.json --html a.html
    .venv/bin/python tools/attribute.py --run --preset test --world-sizes 1,2 \
        --inject data_ms=40,ranks=1                          # a slow loader on rank 1
    .venv/bin/python tools/attribute.py --run --preset test --what-if bf16_hook,accum_2
    .venv/bin/python tools/attribute.py --list-remedies      # the what-if catalogue
    .venv/bin/python tools/attribute.py --run --preset test --engine ddp,zero1 --grad-accum 1,2,4
    .venv/bin/python tools/attribute.py --run --preset cpu --world-sizes 1,2 --predict-from 1
                                                             # 2 predicted from 1, then run: held out
    .venv/bin/python tools/attribute.py --run --preset cpu --world-sizes 1 --predict 2,4 \
        --json p.json                                        # predicted only, nothing run at 2, 4
    .venv/bin/python tools/attribute.py --stored p.json --predict 8 --nodes 2,4 \
        --inter-link 12.5,5                                  # from stored: ring model, 2 and 4 nodes
    .venv/bin/python tools/attribute.py --stored p.json --nodes 2,4 --inter-link localhost
                                                             # the link timed across 2 simulated nodes
    .venv/bin/python tools/attribute.py --predict 4,8 --nodes 2   # from what asv's bench_predict kept
    .venv/bin/python tools/attribute.py --preset thesis --predict 1,2,4,8   # the thesis, projected

Exit codes: 0 report written; 1 a measurement failed (the failing rank is named);
2 bad arguments; 3 no usable measurements (the message says which command makes them).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--results", default=str(ROOT / ".asv" / "results"), help="asv results folder")
    p.add_argument("--commit", help="commit (prefix) of the asv results (default: latest)")
    p.add_argument("--machine", help="asv machine name (default: any)")
    p.add_argument("--against", help="another commit to compare with")
    p.add_argument("--run", action="store_true", help="measure now instead of reading asv results")
    p.add_argument("--preset", default="cpu")
    p.add_argument("--data-root", help="with --run: the ADE20K root (real, or the synthetic set "
                                       "`python -m swinkit make-data` writes); default "
                                       "$SWINKIT_DATA_ROOT, else the synthetic set in the cache")
    p.add_argument("--world-sizes", default="1,2", type=_comma_ints("--world-sizes"),
                   help="with --run (default 1,2)")
    p.add_argument("--iters", type=int, default=None,
                   help="with --run: measured iterations per launch (default: for the "
                        "attribution the preset's measured_iters, 10 for the real presets, 100 "
                        "for test; 10 for --engine and --what-if)")
    p.add_argument("--repeats", type=int, default=3,
                   help="with --run: launches per world size, interleaved (default 3): the lost "
                        "time's noise floor and intervals come from their spread")
    p.add_argument("--inject", action="append", metavar="SPEC",
                   help="with --run: known costs, e.g. data_ms=40,ranks=1 (see swinkit ddp); "
                        "repeat it for costs on other ranks; a one-rank injection applies "
                        "only at world sizes where that rank exists")
    p.add_argument("--scaling", choices=("weak", "strong"), default="weak",
                   help="with --run: weak = images per rank fixed (the thesis's runs); strong = "
                        "the global batch fixed (the preset's images per rank x the largest "
                        "world size), divided among the ranks")
    p.add_argument("--engine", help="with --run: compare engines instead of attributing DDP: "
                                    "ddp, zero1, zero2, dp, dp_vanilla (comma-separated) or all; "
                                    "one table, and with --html a figure beside it")
    p.add_argument("--grad-accum", metavar="K", type=_comma_ints("--grad-accum"),
                   help="with --run --engine: micro-batches per optimizer step, comma-separated "
                        "(default 1): each engine runs at each K, and the report says whether "
                        "communication per image falls with K as the ideal 1/K")
    p.add_argument("--what-if", metavar="NAMES",
                   help="with --run: predict each remedy (comma-separated names, 'default' or "
                        "'all'; see --list-remedies) from its components, write the "
                        "predictions, then run it and report predicted vs measured; without "
                        "--run: the what-ifs asv's bench_whatif stored for the commit")
    p.add_argument("--list-remedies", action="store_true", help="list the what-if catalogue")
    _add_predict_options(p)
    p.add_argument("--json", help="write the report as JSON here")
    p.add_argument("--html", help="write an offline HTML report here (PNGs beside it)")
    return p


def _comma_ints(name: str):
    """An argparse ``type``: the option parsed once, where argparse reports a bad value (exit 2)."""
    def parse(text: str) -> list[int]:
        from swinkit.input_checks import int_list
        try:
            return int_list(name, text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


def _latest_validation(report: dict) -> dict | None:
    """The newest ``swinkit validate`` of this machine at the commit the report reads (the
    checkout's own for --run), so the report can say how far its blame was checked here."""
    import socket

    from swinkit.attribution.validation import latest_validation
    from swinkit.experiments.provenance import git_commit
    commit = report.get("commit") or git_commit(ROOT)["commit"]
    return latest_validation(Path("results"), socket.gethostname(), commit or "")

def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    if args.data_root:  # every rank, worker and child reads it as $SWINKIT_DATA_ROOT
        from swinkit.config import DATA_ROOT_ENV
        os.environ[DATA_ROOT_ENV] = str(Path(args.data_root).expanduser().resolve())
    if args.list_remedies:
        from swinkit.experiments.remedies import CATALOGUE, DEFAULT
        for name, remedy in CATALOGUE.items():
            print(f"{name:20s}{'*' if name in DEFAULT else ' '} {remedy.what}")
        print("* run by default (asv's bench_whatif; --what-if default)")
        return 0
    from swinkit.attribution.analysis import analyse
    from swinkit.attribution.inputs import InputError, from_asv
    from swinkit.experiments.attribution_run import from_run
    from swinkit.launch import LaunchError
    from swinkit.result_files import write_json_atomic
    from swinkit.report.page import write_html
    from swinkit.report.text import text_report
    from swinkit.injection import parse_injections

    if args.run and args.iters is None and not args.engine and not args.what_if:
        try:  # the attribution: the preset says how many its iteration time needs
            from swinkit.config import load_config
            args.iters = int(getattr(load_config(args.preset), "measured_iters", 10))
        except ValueError as exc:
            return _failed(exc)
    args.iters = 10 if args.iters is None else args.iters  # engines, what-ifs: 10 as before
    if args.in_launch:
        from swinkit.predict.supervisor.held_out import IN_LAUNCH_REMOVED
        return _failed(ValueError(IN_LAUNCH_REMOVED))
    if args.scaling == "strong" and (args.predict or args.predict_from):
        return _failed(ValueError("--scaling strong: a prediction of world sizes not run "
                                  "assumes weak scaling (each rank's work as in the run it "
                                  "is predicted from); use --scaling weak"))
    # --nodes alone predicts from a stored report (--stored, or the one asv kept)
    if args.predict or args.predict_from or args.stored or (args.nodes and not args.run):
        return _predict(args)
    if args.engine:
        return _engines(args)
    if args.grad_accum is not None:
        return _failed(ValueError("--grad-accum applies to the engine comparison: use it with "
                                  "--run --engine NAMES"))
    try:
        remedies = None
        if args.what_if and args.run:
            from swinkit.experiments.remedies import select
            remedies = select(args.what_if)  # unknown names fail here, before any launch
        if args.run:
            inputs = from_run(args.preset, args.world_sizes,
                              parse_injections(args.inject), iters=args.iters,
                              repeats=args.repeats, scaling=args.scaling)
        else:
            inputs = from_asv(Path(args.results), args.machine, args.commit)
        against = from_asv(Path(args.results), args.machine, args.against) if args.against else None
        report = analyse(inputs, against)
        report["validation"] = _latest_validation(report)
        if args.what_if and not args.run:  # what bench_whatif stored for this commit
            from swinkit.attribution.inputs import what_if_from_asv
            stored = what_if_from_asv(Path(args.results), args.machine, args.commit)
            if not stored:
                raise InputError("no what-if results for this commit: run `python tools/suite.py "
                                 "-b bench_whatif` first, or use --run --what-if")
            report.update(stored)
        if remedies is not None:
            from swinkit.experiments.whatif_run import what_if
            predictions = (Path(args.json).with_suffix(".predictions.json") if args.json
                           else ROOT / "results" / "what-if.predictions.json")
            report.update(what_if(args.preset, args.world_sizes, remedies,
                                  iters=args.iters, injection=parse_injections(args.inject),
                                  predictions_path=predictions))
    except InputError as exc:
        print(f"attribute: {exc}", file=sys.stderr)
        return 3
    except (LaunchError, ValueError) as exc:
        return _failed(exc)
    print(text_report(report))
    if args.json:
        write_json_atomic(args.json, report)
        print(f"JSON report: {args.json}")
    if args.html:
        paths = write_html(report, args.html)
        print(f"HTML report: {paths[0]}")
    return 0


def _failed(exc: Exception) -> int:
    """Exit code and message for a failed measurement (1, the failing rank named) or bad
    arguments (2)."""
    from swinkit.launch import LaunchError
    if isinstance(exc, LaunchError):
        print(f"attribute: a measurement failed: {exc.diagnosis.summary}", file=sys.stderr)
        return 1
    print(f"attribute: error: {exc}", file=sys.stderr)
    return 2


def _engines(args) -> int:
    """--run --engine: the same workload under each engine, side by side (table, JSON, figure)."""
    from swinkit.attribution.grad_accum import summarize
    from swinkit.launch import LaunchError
    from swinkit.report.engine_compare import compare_figure, compare_table
    from swinkit.runs.engine_spec import COMPARED
    from swinkit.result_files import write_json_atomic
    from swinkit.report.text import grad_accum_lines
    from swinkit.runs.ddp_run import DDPRunSpec
    from swinkit.runs.engine_run import compare_rows, run_engines_by_k

    # `swinkit ddp --engine dp-vanilla` spells it so; the comparison's keys are asv's names
    keys = (list(COMPARED) if args.engine == "all"
            else [k.strip().replace("-", "_") for k in args.engine.split(",")])
    unknown = [k for k in keys if k not in COMPARED]
    if not args.run or unknown:
        print("attribute: error: " + (f"--engine: unknown {unknown}; known: {list(COMPARED)}"
                                      if unknown else "--engine runs the engines: it needs --run"),
              file=sys.stderr)
        return 2
    try:
        ks = args.grad_accum or [1]
        runs = run_engines_by_k(keys, args.world_sizes,
                                DDPRunSpec(preset=args.preset, iters=args.iters), ks)
    except (LaunchError, ValueError) as exc:
        return _failed(exc)
    rows = compare_rows(runs)
    accum = summarize(rows) or None   # null with one K: nothing to compare
    print(compare_table(rows, runs["skipped"], runs["failed"]))
    if accum:
        print("\n".join(grad_accum_lines(accum)[1:]))
    if args.json:
        write_json_atomic(args.json, {"engines": rows, "grad_accum": accum,
                                      "skipped": _reasons(runs["skipped"]),
                                      "failed": _reasons(runs["failed"])})
        print(f"JSON report: {args.json}")
    if args.html:
        figure = Path(args.html).with_name("engines.png")
        figure.parent.mkdir(parents=True, exist_ok=True)
        figure.write_bytes(compare_figure(rows))
        print(f"figure: {figure}")
    return 0


def _add_predict_options(p: argparse.ArgumentParser) -> None:
    """The held-out prediction's options (docs/prediction.md)."""
    p.add_argument("--predict", metavar="N1,N2", type=_comma_ints("--predict"),
                   help="predict these world sizes without running them: with --run from the "
                        "--world-sizes run now (plus the collectives and loaders timed at each "
                        "N'), with --stored from a saved --predict JSON, on the thesis preset "
                        "as a projection from stated figures; otherwise from the held-out "
                        "report asv's bench_predict kept (--results, --commit, --machine)")
    p.add_argument("--predict-from", metavar="N1,N2", type=_comma_ints("--predict-from"),
                   help="with --run: predict each --world-sizes size above these from them "
                        "only, then run it and report the error per launch (held out)")
    p.add_argument("--in-launch", "--same-launch", dest="in_launch", action="store_true",
                   help="removed, refused: use --predict-from (held out) or the paired oracle "
                        "of --run (docs/prediction.md)")
    p.add_argument("--stored", metavar="JSON", help="a --predict --json report to predict from")
    p.add_argument("--link", metavar="GBPS,LATENCY_US", type=_link("--link"),
                   help="the ring model's link (from a stored report: default fitted to its "
                        "timings; with the thesis projection: replaces every system's link)")
    p.add_argument("--inter-link", metavar="GBPS,LATENCY_US|localhost",
                   type=_link("--inter-link", localhost=True),
                   help="with --nodes: the link between nodes; 'localhost' times the stored "
                        "run's buckets across two simulated nodes on this host (two elastic "
                        "agents on localhost) and fits the link to them")
    p.add_argument("--nodes", metavar="K1,K2", type=_comma_ints("--nodes"), default=[],
                   help="from a stored report (--stored, or asv's): predict K nodes of the "
                        "stored run's size each")
    p.add_argument("--device-iter-s", type=float,
                   help="thesis projection: one device's iteration alone (default: stated)")


def _link(name: str, localhost: bool = False):
    """An argparse ``type`` for GBPS,LATENCY_US (or, where ``localhost``, the word)."""
    def parse(text: str):
        from swinkit.predict.numbers.links import Link
        if localhost and text == "localhost":
            return text
        try:
            gbps, us = (float(x) for x in text.split(","))
            return Link(gbps, us * 1e-6)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{name}: want GBPS,LATENCY_US ({exc})") from None
    return parse


def _predict(args) -> int:
    """--predict / --predict-from: held out, predicted only, from stored, or the projection."""
    import json

    from swinkit.launch import LaunchError
    from swinkit.predict.report.text import held_out_lines
    from swinkit.result_files import write_json_atomic
    from swinkit.attribution.inputs import InputError
    try:
        if args.stored:
            report = _from_stored(args, json.loads(Path(args.stored).read_text()))
            lines = held_out_lines(report)
        elif args.run:
            from swinkit.predict.supervisor.held_out import held_out
            from swinkit.injection import parse_injections
            sources = args.predict_from or args.world_sizes
            sizes = args.predict or [ws for ws in args.world_sizes if ws > max(sources)]
            report = held_out(args.preset, sizes, sources, iters=args.iters,
                              repeats=args.repeats, score=not args.predict,
                              injection=parse_injections(args.inject))
            lines = held_out_lines(report)
        elif args.preset == "thesis" and args.predict:
            report, lines = _projection(args)
        elif args.predict_from or not (args.predict or args.nodes):
            raise ValueError("--predict-from needs --run (measure, then score); --predict N "
                             "without --run predicts from what asv's bench_predict kept, "
                             "--stored JSON from a saved prediction, --preset thesis projects")
        else:  # from the held-out report asv's bench_predict kept for the commit
            from swinkit.attribution.inputs import held_out_from_asv
            kept, path = held_out_from_asv(Path(args.results), args.machine, args.commit)
            print(f"from the held-out prediction kept by asv's bench_predict: {path}")
            report = _from_stored(args, kept)
            report["source"] = str(path)
            lines = held_out_lines(report)
    except InputError as exc:
        print(f"attribute: {exc}", file=sys.stderr)
        return 3
    except (LaunchError, ValueError, OSError) as exc:
        return _failed(exc)
    print("\n".join(lines))
    if args.json:
        write_json_atomic(args.json, report)
        print(f"JSON report: {args.json}")
    return 0


def _from_stored(args, stored: dict) -> dict:
    """Predictions at --predict sizes and --nodes from a stored held-out report, the
    inter-node link stated or (localhost) timed across two simulated nodes here."""
    from swinkit.predict.supervisor.stored import from_stored
    inter, timed_inter = args.inter_link, None
    if inter == "localhost":
        if not args.nodes:
            raise ValueError("--inter-link localhost: give --nodes K1,K2 to predict")
        from swinkit.predict.supervisor.internode import localhost_inter_link
        timed_inter = localhost_inter_link(_stored_buckets(stored))
        inter = timed_inter["link"]
    report = from_stored(stored, args.predict or [], args.link, args.nodes, inter)
    if timed_inter:
        report["inter_link"] = {"source": "timed across 2 simulated nodes on localhost",
                                "bandwidth_gbps": inter.bandwidth_gbps,
                                "latency_s": inter.latency_s, "fit": timed_inter["fit"],
                                "timed_s": timed_inter["timed_s"]}
    return report


def _stored_buckets(stored: dict) -> list[int]:
    """The buckets' bytes of a stored prediction (every launch has the same model)."""
    try:
        return list(stored["launches"][0]["basis"]["bucket_bytes"])
    except (KeyError, IndexError, TypeError):
        raise ValueError("--stored: no launch with a basis's bucket_bytes in it (not a "
                         "--predict --json report?)") from None


def _projection(args) -> tuple[dict, list[str]]:
    """The thesis's systems projected from stated figures (--link, --device-iter-s replace them)."""
    from dataclasses import replace

    from swinkit.predict.numbers.links import THESIS_DEVICES, thesis_projection
    from swinkit.predict.report.text import projection_lines
    devices = {k: replace(d, link=args.link or d.link, iter_s=args.device_iter_s or d.iter_s)
               for k, d in THESIS_DEVICES.items()}
    proj = thesis_projection(devices, sorted(set(args.predict) | {1}))
    return {"projection": proj, "predicted": True}, projection_lines(proj)


def _reasons(reasons: dict) -> dict:
    """JSON keys for skipped/failed runs: ``engine@N``, and ``@K`` where K is not 1 (so one K's
    keys read as before)."""
    return {f"{key}@{ws}" + (f"@K{k}" if k != 1 else ""): why
            for (key, ws, k), why in reasons.items()}


if __name__ == "__main__":
    raise SystemExit(main())
