"""``swinkit attribute`` and ``swinkit what-if``: where the scaling goes, and what a remedy
would give.

``attribute`` splits the lost parallel efficiency over components, from the latest asv results
of this machine (``--commit``, ``--against`` another commit) or measured now (``--run``).
``what-if`` adds remedies to that report: with ``--run`` each remedy is predicted from its
components, the predictions written, then run and scored; without, the what-ifs asv's
bench_whatif stored for the commit (docs/whatif.md).

    python -m swinkit attribute                                  # asv's latest, this machine
    python -m swinkit attribute --commit 1a2b3c4d --against 5e6f7a8b --html a.html
    python -m swinkit attribute --run --preset test --world-sizes 1,2 --inject data_ms=40,ranks=1
    python -m swinkit attribute --run --preset test --world-sizes 1,2 --precision bf16
    python -m swinkit what-if bf16_hook,accum_2 --run --preset test
    python -m swinkit what-if --list                             # the what-if catalogue
"""
from __future__ import annotations

import argparse
import socket

from swinkit.cli import options
from swinkit.cli.exit_codes import EXIT_OK, describe


def add_parsers(sub) -> None:
    """The ``attribute`` and ``what-if`` subcommands on ``sub`` (the parser's subparsers)."""
    p = sub.add_parser("attribute", help="lost parallel efficiency split over components",
                       description=__doc__, epilog=describe((0, 1, 2, 3)),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_attribute_args(p)
    p = sub.add_parser("what-if", help="remedies predicted, then run and scored",
                       description=__doc__, epilog=describe((0, 1, 2, 3)),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what_if", nargs="?", default="default", metavar="NAMES",
                   help="remedies, comma-separated, 'default' or 'all' (default: default)")
    p.add_argument("--list", dest="list_remedies", action="store_true",
                   help="list the what-if catalogue")
    # no --precision: each what-if runs the preset's precision beside its own (amp_bf16 and
    # tf32 are the precision what-ifs), so the option could only be refused here
    add_attribute_args(p, precision_help=None)


RUN_PRECISION_HELP = ("with --run: the training precision the runs apply, autocast around "
                      "forward and loss with fp32 weights, gradients and all-reduce (default: "
                      "the preset's, fp32; docs/precision.md)")


def add_attribute_args(p: argparse.ArgumentParser,
                       precision_help: str | None = RUN_PRECISION_HELP) -> None:
    """The attribution's options on ``p``; ``precision_help`` None: no ``--precision``."""
    options.add_stored(p)
    p.add_argument("--against", help="another commit to compare with")
    p.add_argument("--run", action="store_true", help="measure now instead of reading asv results")
    options.add_workload(p)
    options.add_repeats_and_injections(p)
    p.add_argument("--scaling", choices=("weak", "strong"), default="weak",
                   help="with --run: weak = images per rank fixed (the thesis's runs); strong = "
                        "the global batch fixed (the preset's images per rank x the largest "
                        "world size), divided among the ranks")
    if precision_help is not None:
        options.add_precision(p, precision_help)
    options.add_outputs(p)


def list_remedies() -> int:
    from swinkit.experiments.remedies import CATALOGUE, DEFAULT
    for name, remedy in CATALOGUE.items():
        print(f"{name:20s}{'*' if name in DEFAULT else ' '} {remedy.what}")
    print("* run by default (asv's bench_whatif; swinkit what-if default)")
    return EXIT_OK


def command(args) -> int:
    """The attribution report (with what-ifs where ``args.what_if`` names them): text, and
    JSON and HTML where asked."""
    if getattr(args, "list_remedies", False):
        return list_remedies()
    what_if = getattr(args, "what_if", None)
    options.export_data_root(args)
    options.default_iters(args, per_preset=args.run and not what_if)
    report = _report(args, what_if)
    from swinkit.report.text import text_report
    print(text_report(report))
    write_report(args, report)
    return EXIT_OK


def _report(args, what_if: str | None) -> dict:
    """Measured now or read from asv, analysed, with the validation and what-ifs beside it.
    Raises ValueError (bad input), InputError (nothing stored), LaunchError (a rank failed)."""
    from swinkit.attribution.analysis import analyse
    from swinkit.attribution.inputs import InputError, from_asv
    from swinkit.injection import parse_injections
    results = options.results_dir(args)
    precision = getattr(args, "precision", None)
    if precision and (what_if or not args.run):
        raise ValueError(f"--precision {precision} applies to the attribution measured now "
                         "(attribute --run): stored results ran the precision their header "
                         "names, and the what-ifs run the preset's beside their own (amp_bf16, "
                         "tf32 change it)")
    remedies = None
    if what_if and args.run:
        from swinkit.experiments.remedies import select
        remedies = select(what_if)  # unknown names fail here, before any launch
    if args.run:
        from swinkit.experiments.attribution_run import from_run
        from swinkit.launch import LaunchConfig
        options.check_precision(precision, LaunchConfig())  # before any launch, as swinkit ddp
        inputs = from_run(args.preset, args.world_sizes, parse_injections(args.inject),
                          iters=args.iters, repeats=args.repeats, scaling=args.scaling,
                          precision=precision)
    else:
        inputs = from_asv(results, args.machine, args.commit)
    against = from_asv(results, args.machine, args.against) if args.against else None
    report = analyse(inputs, against)
    report["validation"] = _latest_validation(args, report)
    if what_if and not args.run:  # what bench_whatif stored for this commit
        from swinkit.attribution.inputs import what_if_from_asv
        stored = what_if_from_asv(results, args.machine, args.commit)
        if not stored:
            raise InputError("no what-if results for this commit: run `python tools/suite.py "
                             "-b bench_whatif` first, or use --run with the what-ifs")
        report.update(stored)
    if remedies is not None:
        from pathlib import Path

        from swinkit.experiments.whatif_run import what_if as run_what_ifs
        predictions = (Path(args.json).with_suffix(".predictions.json") if args.json
                       else options.checkout(args) / "results" / "what-if.predictions.json")
        report.update(run_what_ifs(args.preset, args.world_sizes, remedies, iters=args.iters,
                                   injection=parse_injections(args.inject),
                                   predictions_path=predictions))
    return report


def _latest_validation(args, report: dict) -> dict | None:
    """The newest ``swinkit validate`` of this machine at the commit the report reads (for
    --run, the commit of the swinkit that ran), so the report can say how far its blame was
    checked here."""
    from pathlib import Path

    from swinkit.attribution.validation import latest_validation
    from swinkit.experiments.provenance import git_commit
    commit = report.get("commit") or git_commit(getattr(args, "checkout", None))["commit"]
    # swinkit validate saves under results/ in the folder it runs in: looked for there
    return latest_validation(Path("results"), socket.gethostname(), commit or "")


def write_report(args, report: dict) -> None:
    """The report as JSON (atomically) and as an offline HTML page, where asked."""
    if args.json:
        from swinkit.result_files import write_json_atomic
        write_json_atomic(args.json, report)
        print(f"JSON report: {args.json}")
    if getattr(args, "html", None):
        from swinkit.report.page import write_html
        paths = write_html(report, args.html)
        print(f"HTML report: {paths[0]}")
