"""``tools/attribute.py``: every report command's options at once, the program chosen by which
are given, as before the subcommands existed (``swinkit attribute``, ``what-if``, ``predict``,
``engines`` are the clear way; this keeps the combinations users and scripts have working).

Which program a combination runs, in this order:

    --list-remedies                                   what-if --list
    --predict, --predict-from, --stored, --nodes      predict   (--nodes with --run: attribute)
    --engine NAMES (needs --run)                      engines
    --what-if NAMES                                   what-if
    otherwise                                         attribute

The parser is the sum of the subcommands' option groups (:mod:`swinkit.cli.options`), so a
flag means the same here and there; the exit codes are :mod:`swinkit.cli.exit_codes`'.
"""
from __future__ import annotations

import argparse

from swinkit.cli import attribute, engines, options, predict
from swinkit.cli.exit_codes import describe


def get_parser(doc: str = __doc__) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc.split("\n")[0], epilog=doc + "\n" + describe(
        (0, 1, 2, 3)), formatter_class=argparse.RawDescriptionHelpFormatter)
    attribute.add_attribute_args(p, precision_help=(
        f"{attribute.RUN_PRECISION_HELP}; with --preset thesis --predict N (no --run): "
        f"{predict.PROJECTION_PRECISION_HELP}"))
    p.add_argument("--engine", help="with --run: compare engines instead of attributing DDP: "
                                    "keys (ddp, zero1, zero2, fsdp2, dp, dp_vanilla; "
                                    "comma-separated) or all; one table, and with --html a "
                                    "figure beside it")
    p.add_argument("--grad-accum", metavar="K", type=options.comma_ints("--grad-accum"),
                   help="with --run --engine: micro-batches per optimizer step, comma-separated "
                        "(default 1)")
    p.add_argument("--what-if", metavar="NAMES",
                   help="with --run: predict each remedy (comma-separated names, 'default' or "
                        "'all'; see --list-remedies) from its components, write the "
                        "predictions, then run it and report predicted vs measured; without "
                        "--run: the what-ifs asv's bench_whatif stored for the commit")
    p.add_argument("--list-remedies", action="store_true", help="list the what-if catalogue")
    predict.add_predict_args(p, precision=False)   # --precision is the attribution's
    return p


def choose(args):
    """The subcommand a combination of options runs (ValueError: a combination none takes)."""
    if args.list_remedies:
        return attribute.command
    if args.in_launch:
        predict.check(args)   # the refusal names --in-launch whichever program was meant
    if args.predict or args.predict_from or args.stored or (args.nodes and not args.run):
        return predict.command
    if args.engine:
        if not args.run:
            raise ValueError("--engine runs the engines: it needs --run")
        return engines.command
    if args.grad_accum is not None:
        raise ValueError("--grad-accum applies to the engine comparison: use it with "
                         "--run --engine NAMES")
    return attribute.command


def main(argv: list[str] | None = None, checkout=None, doc: str = __doc__) -> int:
    """Parse the combined options and run what they choose; ``checkout``: where asv's results
    and ``results/`` are by default (the tool's own repository)."""
    from swinkit.cli.commands import run_command
    args = get_parser(doc).parse_args(argv)
    args.checkout = checkout
    return run_command(lambda chosen: choose(chosen)(chosen), args, "attribute")
