"""``swinkit scorecard``: how good is the held-out prediction, over K fresh launches?

Per launch: the timings at N' without the model, the run at the "from" size, the prediction
written, then the run at N' (paired: its components beside its DDP steps) and the same
configuration unpaired. Printed per target size: each predictor's accuracy in every launch
(swinkit's model, perfect scaling, T(1) + all-reduce, and the paired oracle, which is not held
out), its worst launch and its range, against the paired run and against the unpaired one; the
gap the paired launch's barrier makes; the host's own launch-to-launch spread. Saved as JSON,
atomically, with the commit, host, date and the command (default
``results/scorecard/<host>-<commit>-<preset>.json``): the figures docs quote come from here.

    python -m swinkit scorecard --preset test --launches 5
    python -m swinkit scorecard --preset cpu --launches 5 --json cpu-card.json

Exit codes: 0 the scorecard was written, 1 a launch failed (the rank named), 2 bad input.
"""
from __future__ import annotations

import argparse
import shlex
import socket
import sys
from pathlib import Path

from swinkit.cli.exit_codes import EXIT_FAILED, EXIT_OK


def add_parser(sub) -> None:
    """The ``scorecard`` subcommand on ``sub`` (the parser's subparsers)."""
    p = sub.add_parser("scorecard", help="a held-out prediction scored over K fresh launches",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="test", help="workload preset (default: test)")
    p.add_argument("--data-root", help="ADEChallengeData2016 folder (default: synthetic)")
    p.add_argument("--launches", type=int, default=5, help="fresh launches (default 5)")
    p.add_argument("--world-sizes", default="1,2",
                   help="the sizes run: the 'from' sizes and those predicted (default 1,2)")
    p.add_argument("--predict-from", default="1", help="the sizes predicted from (default 1)")
    p.add_argument("--iters", type=int, help="measured iterations per run (default: the "
                                             "preset's measured_iters)")
    p.add_argument("--inject", action="append", metavar="SPEC",
                   help="known costs at N' (see swinkit ddp; repeat for other ranks)")
    p.add_argument("--json", dest="json_path",
                   help="write the scorecard here (default results/scorecard/"
                        "<host>-<commit>-<preset>.json)")


def command(args) -> int:
    import os

    from swinkit.config import DATA_ROOT_ENV
    from swinkit.predict.supervisor.scorecard import check_scorecard, run_scorecard
    from swinkit.experiments.provenance import git_commit
    from swinkit.injection import parse_injections
    from swinkit.input_checks import int_list
    from swinkit.launch import LaunchError
    from swinkit.predict.report.scorecard import text
    from swinkit.result_files import RunLock, write_json_atomic
    if args.data_root:  # every rank, worker and child reads it as $SWINKIT_DATA_ROOT
        os.environ[DATA_ROOT_ENV] = str(Path(args.data_root).expanduser().resolve())
    sizes = int_list("--world-sizes", args.world_sizes)
    sources = int_list("--predict-from", args.predict_from)
    injection = parse_injections(args.inject)  # a bad spec: exit 2 before any process
    iters = check_scorecard(args.preset, args.launches, args.iters, sizes, sources)
    commit = git_commit()["commit"] or "no-git"
    path = args.json_path or (Path("results") / "scorecard"
                              / f"{socket.gethostname()}-{commit[:12]}-{args.preset}.json")
    typed = "python -m swinkit scorecard " + shlex.join(sys.argv[2:] if len(sys.argv) > 2
                                                        and sys.argv[1] == "scorecard" else [])
    try:
        with RunLock(path):
            record = run_scorecard(args.preset, args.launches, sizes, sources, iters,
                                   injection, command=typed.strip(),
                                   progress=lambda s: print(s, flush=True))
            write_json_atomic(path, record)
    except LaunchError as exc:
        print(f"swinkit scorecard: a launch failed: {exc.diagnosis.summary}", file=sys.stderr)
        return EXIT_FAILED
    print()
    print(text(record))
    print(f"scorecard written to {path}")
    return EXIT_OK
