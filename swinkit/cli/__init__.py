"""Every command line of ``python -m swinkit`` (``swinkit`` once installed), thin over the
package: parse, validate, call, report, exit with a code that says what happened.

    commands.py    the parser and the commands (describe, train, make-data, verify-data, ddp),
                   and the exit-code answers every command shares
    launch.py      what every launching command does around a launch: spec, lock, JSON, report
    engines.py     ``swinkit engines`` and ``swinkit ddp --engine NAME|all``: the comparison,
                   its one JSON schema
    exit_codes.py  the exit codes every command shares, one table
    options.py     options the report commands share (results, workload, outputs)
    attribute.py   ``swinkit attribute`` and ``swinkit what-if``: the attribution report
    predict.py     ``swinkit predict``: world sizes and nodes not run, predicted
    attribute_compat.py  ``tools/attribute.py``: every report option at once, the program
                   chosen by which are given
    validate.py    ``swinkit validate``: the ground-truth matrix on this machine
    scorecard.py   ``swinkit scorecard``: a held-out prediction over K fresh launches
    converge.py    ``swinkit converge``: steps to a held-out target, time to it, goodput
"""
from swinkit.cli.commands import get_parser, main

__all__ = ["get_parser", "main"]
