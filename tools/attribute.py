"""Where does the scaling go? Attribute lost parallel efficiency to components.

Every option of the report commands at once, the program chosen by which are given; the same
programs are subcommands of swinkit (attribute, what-if, predict, engines: the clear way), and
this entry point delegates to them (swinkit/cli/attribute_compat.py says which runs when).

Examples:
    .venv/bin/python tools/attribute.py                      # latest asv results of this machine
    .venv/bin/python tools/attribute.py --commit 1a2b3c4d --against 5e6f7a8b
    .venv/bin/python tools/attribute.py --run --preset test --world-sizes 1,2 \\
        --json a.json --html a.html
    .venv/bin/python tools/attribute.py --run --preset test --world-sizes 1,2 \\
        --inject data_ms=40,ranks=1                          # a slow loader on rank 1
    .venv/bin/python tools/attribute.py --run --preset test --what-if bf16_hook,accum_2
    .venv/bin/python tools/attribute.py --list-remedies      # the what-if catalogue
    .venv/bin/python tools/attribute.py --run --preset test --engine ddp,zero1 --grad-accum 1,2,4
    .venv/bin/python tools/attribute.py --run --preset cpu --world-sizes 1,2 --predict-from 1
                                                             # 2 predicted from 1, then run: held out
    .venv/bin/python tools/attribute.py --run --preset cpu --world-sizes 1 --predict 2,4 \\
        --json p.json                                        # predicted only, nothing run at 2, 4
    .venv/bin/python tools/attribute.py --stored p.json --predict 8 --nodes 2,4 \\
        --inter-link 12.5,5                                  # from stored: ring model, 2 and 4 nodes
    .venv/bin/python tools/attribute.py --stored p.json --nodes 2,4 --inter-link localhost
                                                             # the link timed across 2 simulated nodes
    .venv/bin/python tools/attribute.py --predict 4,8 --nodes 2   # from what asv's bench_predict kept
    .venv/bin/python tools/attribute.py --preset thesis --predict 1,2,4,8   # the thesis, projected

The same as subcommands:
    .venv/bin/python -m swinkit attribute --run --preset test --world-sizes 1,2 --html a.html
    .venv/bin/python -m swinkit what-if bf16_hook,accum_2 --run --preset test
    .venv/bin/python -m swinkit engines ddp,zero1 --preset test --grad-accum 1,2,4
    .venv/bin/python -m swinkit predict --run --preset cpu --world-sizes 1,2 --predict-from 1
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def get_parser():
    from swinkit.cli.attribute_compat import get_parser as parser
    return parser(__doc__)


def main(argv: list[str] | None = None) -> int:
    """Run what the options choose; asv's results and ``results/`` default to this checkout's."""
    from swinkit.cli.attribute_compat import main as delegate
    return delegate(argv, checkout=ROOT, doc=__doc__)


if __name__ == "__main__":
    raise SystemExit(main())
