"""Benchmark the current commit with asv on this machine and publish the HTML history.

Example:
    .venv/bin/python tools/suite.py                 # the whole suite (CPU default: ~minutes)
    .venv/bin/python tools/suite.py -b bench_ddp    # one benchmark file
Environment: SWINKIT_PRESET (thesis with CUDA, cpu without), SWINKIT_OVERSUBSCRIBE=1.
"""
from __future__ import annotations

import argparse

from swinkit.asv_suite import run_suite


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-b", "--bench", help="regular expression of benchmarks to run (asv -b)")
    p.add_argument("--quick", action="store_true", help="asv --quick (one sample each)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    html = run_suite(args.bench, args.quick)
    print(f"HTML history: {html}/index.html")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
