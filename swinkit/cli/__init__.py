"""Every command line of ``python -m swinkit`` (``swinkit`` once installed), thin over the
package: parse, validate, call, report, exit with a code that says what happened.

    commands.py    the parser and the commands (describe, train, make-data, verify-data, ddp)
    launch.py      what every launching command does around a launch: spec, lock, JSON, report
    engines.py     ``swinkit ddp --engine NAME``: DeepSpeed ZeRO and DataParallel, or all
    exit_codes.py  the exit codes every command shares
    validate.py    ``swinkit validate``: the ground-truth matrix on this machine
    scorecard.py   ``swinkit scorecard``: a held-out prediction over K fresh launches
    converge.py    ``swinkit converge``: steps to a held-out target, time to it, goodput
"""
from swinkit.cli.commands import get_parser, main

__all__ = ["get_parser", "main"]
