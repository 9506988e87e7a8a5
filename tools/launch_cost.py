"""Where a launch's seconds go before any work: a no-op entry launched on N gloo ranks, timed.

Examples:
    .venv/bin/python tools/launch_cost.py                          # world sizes 1, 2; 5 each
    .venv/bin/python tools/launch_cost.py --against /tmp/old       # another checkout beside it
                                                                   # (before/after, one run)
    git worktree add /tmp/old <commit> && .venv/bin/python tools/launch_cost.py --against /tmp/old

Phases (swinkit/launch/cost.py): to_ranks (the agent's start and the rendezvous, until the
first rank's process exists), rank_start (the ranks' start and process group), finish (the
results gathered, every process ended, the supervisor's clean-up), total. Each launch is a
fresh supervisor process; checkouts are measured interleaved, under the same load, and the
load average is printed beside the medians.
"""
from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def get_parser() -> argparse.ArgumentParser:
    from swinkit.cli.options import comma_ints
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world-sizes", default="1,2", type=comma_ints("--world-sizes"))
    p.add_argument("--repeats", type=int, default=5, help="launches per checkout and world "
                                                          "size (default 5)")
    p.add_argument("--against", help="another checkout (its root folder), measured beside")
    p.add_argument("--json", help="write every sample here")
    return p


def main(argv: list[str] | None = None) -> int:
    from swinkit.launch.cost import measure, table
    from swinkit.result_files import write_json_atomic
    args = get_parser().parse_args(argv)
    checkouts = {"this": ROOT}
    if args.against:
        checkouts = {"against": Path(args.against).resolve(), **checkouts}
    result = measure(checkouts, args.world_sizes, args.repeats)
    print(table(result))
    if args.json:
        write_json_atomic(args.json, result)
        print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
