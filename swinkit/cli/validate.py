"""``swinkit validate``: blame checked against injected, known causes on this machine.

For each world size, each injection and each placement (all ranks; the last rank alone) one
run with the injection on every 2nd iteration; then per world size the confusion matrix
(injected cause x blamed cause), recovery of the injected amount on every rank, the straggler
named, and a verdict per cell; and two cells that tell ways of charging waits apart: two
stragglers at once (rank 0's loading and the last rank's backward, held to each delay run
alone) and a small delay near the noise floor (its detection threshold reported)
(docs/validate.md). Saved as JSON with the machine and the git commit (default
``results/validation/<host>-<commit>.json``), where the attribution report finds it.

    python -m swinkit validate --preset test --world-sizes 1,2
    python -m swinkit validate --world-sizes 4 --oversubscribe --cases compute_ms,backward_ms

Exit codes: 0 every cell that ran passed, 1 a cell failed (or none ran), 2 bad input.
"""
from __future__ import annotations

import argparse
import socket
import sys

from swinkit.attribution.validation import CASES
from swinkit.cli.exit_codes import EXIT_FAILED, EXIT_OK

CASES_DEFAULT = ",".join(CASES)  # each injection kind of the table, and the charging cells


def add_parser(sub) -> None:
    """The ``validate`` subcommand on ``sub`` (the parser's subparsers)."""
    p = sub.add_parser("validate", help="blame checked against injected causes, on this machine",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="test", help="workload preset (default: test)")
    p.add_argument("--data-root", help="ADEChallengeData2016 folder (default: synthetic)")
    p.add_argument("--world-sizes", default="1,2", help="comma-separated (default 1,2)")
    p.add_argument("--cases", default=CASES_DEFAULT,
                   help=f"injections, comma-separated (default {CASES_DEFAULT})")
    p.add_argument("--placements", default="all,one",
                   help="all = every rank, one = the last rank alone (default all,one)")
    p.add_argument("--amount-ms", type=float, default=120.0,
                   help="injected per injected iteration, ms (default 120)")
    p.add_argument("--iters", type=int, default=10, help="measured iterations per run (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up iterations (default 2)")
    p.add_argument("--small-ms", type=float, default=5.0,
                   help="the small_backward cell's delay per injected iteration, ms (default "
                        "5; it runs 10 x --iters)")
    p.add_argument("--pair-data-ms", type=float, default=15.0,
                   help="the two_stragglers cell's loading delay per injected iteration, ms "
                        "(default 15: loading must stay shorter than forward for the cell to "
                        "tell charging rules apart)")
    p.add_argument("--min-share", type=float, default=0.85,
                   help="least share of the added time on the injected cause (default 0.85)")
    p.add_argument("--max-share", type=float, default=1.15,
                   help="largest share of the added time on the injected cause (default 1.15)")
    p.add_argument("--max-residual", type=float, default=0.10,
                   help="the row's residual must lie within +- this (default 0.10)")
    p.add_argument("--recovery-tolerance", type=float, default=0.20,
                   help="recovery must lie within 1 +- this, on every rank (default 0.20)")
    p.add_argument("--oversubscribe", action="store_true",
                   help="allow more CPU ranks than cores (the ranks then share cores)")
    p.add_argument("--timeout", type=float, default=600.0, help="per run, s (default 600)")
    p.add_argument("--json", dest="json_path",
                   help="write the result here (default results/validation/<host>-<commit>.json)")
    p.add_argument("--html", dest="html_path", help="also write the matrix as an HTML page here")


def _split(field: str, text: str, kind=str) -> tuple:
    items = [t.strip() for t in text.split(",") if t.strip()]
    try:
        return tuple(kind(t) for t in items)
    except ValueError:
        raise ValueError(f"--{field} must be comma-separated {kind.__name__}s, got {text!r}") from None


def spec_from_args(args):
    """The :class:`~swinkit.experiments.validate.ValidateSpec` of the options, checked; a
    ValueError names the option."""
    from swinkit.attribution.validation import Thresholds
    from swinkit.experiments.validate import ValidateSpec
    spec = ValidateSpec(
        preset=args.preset, world_sizes=_split("world-sizes", args.world_sizes, int),
        cases=_split("cases", args.cases), placements=_split("placements", args.placements),
        amount_ms=args.amount_ms, small_ms=args.small_ms, pair_data_ms=args.pair_data_ms,
        iters=args.iters, warmup=args.warmup,
        oversubscribe=args.oversubscribe, data_root=args.data_root, wall_timeout_s=args.timeout,
        thresholds=Thresholds(min_share=args.min_share, max_share=args.max_share,
                              max_residual=args.max_residual,
                              recovery_tol=args.recovery_tolerance))
    try:
        spec.validate()
    except ValueError as exc:  # name the option the user typed, not the field
        raise ValueError(_as_option(str(exc))) from None
    return spec


def _as_option(message: str) -> str:
    for name, option in (("world_sizes", "--world-sizes"), ("min_share", "--min-share"),
                         ("max_share", "--max-share"), ("max_residual", "--max-residual"),
                         ("small_ms", "--small-ms"), ("pair_data_ms", "--pair-data-ms"),
                         ("recovery_tol", "--recovery-tolerance"), ("amount_ms", "--amount-ms"),
                         ("cases", "--cases"), ("placements", "--placements"),
                         ("iters", "--iters"), ("warmup", "--warmup"),
                         ("world_size", "--world-sizes")):
        if message.startswith(name):
            message = option + message[len(name):]
            break
    return message.replace("pass allow_oversubscribe", "pass --oversubscribe")


def command(args) -> int:
    from swinkit.attribution.validation import all_passed, default_path
    from swinkit.experiments.provenance import git_commit
    from swinkit.experiments.validate import run_validation, shares_cores
    from swinkit.report import validation as render
    from swinkit.result_files import RunLock, write_json_atomic
    spec = spec_from_args(args)  # before any process starts
    for ws in spec.world_sizes:
        if shares_cores(ws):
            print(f"world size {ws}: more ranks than CPU cores, oversubscribed: the ranks share "
                  "cores, so their waits include waiting for a core")
    path = args.json_path or default_path("results", socket.gethostname(),
                                          git_commit()["commit"] or "no-git")
    with RunLock(path):
        result = run_validation(spec, progress=lambda s: print(s, flush=True))
        write_json_atomic(path, result)
    print()
    print(render.text(result))
    print(f"result written to {path}")
    if args.html_path:
        print(f"HTML written to {render.write_html(result, args.html_path)}")
    sys.stdout.flush()
    return EXIT_OK if all_passed(result) else EXIT_FAILED

