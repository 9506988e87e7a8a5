"""Options the commands share (``swinkit attribute``, ``what-if``, ``predict``, ``engines`` and
``tools/attribute.py``, which takes them all; ``--precision`` also ``swinkit ddp`` and
``train``): each group added by one function, so a flag means the same everywhere and each
parser is the sum of its groups."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

RESULTS = Path(".asv") / "results"   # asv's results folder, under the checkout


def comma_ints(name: str):
    """An argparse ``type``: the option parsed once, where argparse reports a bad value (exit 2)."""
    def parse(text: str) -> list[int]:
        from swinkit.input_checks import int_list
        try:
            return int_list(name, text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


def link(name: str, localhost: bool = False):
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


def add_stored(p: argparse.ArgumentParser) -> None:
    """Where stored asv results are read (``--results``, ``--commit``, ``--machine``)."""
    p.add_argument("--results", help=f"asv results folder (default: {RESULTS} in the checkout)")
    p.add_argument("--commit", help="commit (prefix) of the asv results (default: latest)")
    p.add_argument("--machine", help="asv machine name (default: any)")


def add_workload(p: argparse.ArgumentParser, world_sizes: str = "1,2") -> None:
    """What a measurement now runs: preset, data, world sizes, iterations, injections."""
    p.add_argument("--preset", default="cpu")
    p.add_argument("--data-root", help="the ADE20K root (real, or the synthetic set "
                                       "`python -m swinkit make-data` writes); default "
                                       "$SWINKIT_DATA_ROOT, else the synthetic set in the cache")
    p.add_argument("--world-sizes", default=world_sizes, type=comma_ints("--world-sizes"),
                   help=f"world sizes to run (default {world_sizes})")
    p.add_argument("--iters", type=int, default=None,
                   help="measured iterations per launch (default: for the attribution the "
                        "preset's measured_iters, 10 for the real presets, 100 for test; 10 "
                        "for engines and what-ifs)")


def add_repeats_and_injections(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repeats", type=int, default=3,
                   help="launches per world size, interleaved (default 3): the lost time's "
                        "noise floor and intervals come from their spread")
    p.add_argument("--inject", action="append", metavar="SPEC",
                   help="known costs, e.g. data_ms=40,ranks=1 (see swinkit ddp); repeat it for "
                        "costs on other ranks; a one-rank injection applies only at world sizes "
                        "where that rank exists")


def add_outputs(p: argparse.ArgumentParser, html: bool = True) -> None:
    p.add_argument("--json", help="write the report as JSON here")
    if html:
        p.add_argument("--html", help="write an offline HTML report here (PNGs beside it)")


def checkout(args) -> Path:
    """Where asv's results (``.asv/results``) and the what-ifs' predictions (``results/``) are
    by default: ``tools/attribute.py`` passes its checkout; a ``swinkit`` command uses the
    current folder."""
    return Path(getattr(args, "checkout", None) or ".")


def results_dir(args) -> Path:
    return Path(args.results) if args.results else checkout(args) / RESULTS


def export_data_root(args) -> None:
    """``--data-root`` for every rank, worker and child: they read ``$SWINKIT_DATA_ROOT``."""
    if getattr(args, "data_root", None):
        from swinkit.config import DATA_ROOT_ENV
        os.environ[DATA_ROOT_ENV] = str(Path(args.data_root).expanduser().resolve())


def default_iters(args, per_preset: bool) -> None:
    """``--iters`` left out: the preset's measured_iters (``per_preset``, the attribution),
    else 10 (engines, what-ifs)."""
    if args.iters is not None:
        return
    if per_preset:
        from swinkit.config import load_config
        args.iters = int(getattr(load_config(args.preset), "measured_iters", 10))
    else:
        args.iters = 10


def add_precision(p: argparse.ArgumentParser, help: str, default: str | None = None) -> None:
    """``--precision``: a training precision by name (argparse refuses an unknown one, naming
    the option); None (the default) means the preset's (docs/precision.md)."""
    from swinkit.precision import PRECISIONS
    p.add_argument("--precision", choices=tuple(PRECISIONS), default=default, help=help)


def check_precision(precision: str | None, launch) -> None:
    """``--precision`` against the device ``launch``'s backend decides (gloo ranks run on CPU),
    before any process starts: fp16 on a CPU refused naming the option (ValueError); a label
    (tf32 on a CPU is fp32 math) said on stderr. Nothing to check where it is None."""
    if not precision:
        return
    import sys

    from swinkit.precision import check_precision as check
    device = "cuda" if launch.resolved_backend() == "nccl" else "cpu"
    plan = check(precision, device, field="--precision")
    if plan.note:
        print(f"precision: {plan.label}: {plan.note}", file=sys.stderr)
