"""swinkit command line: ``python -m swinkit COMMAND``.

Commands:
    describe     the workload as data: parameters, GMACs, crop, batch, gradient bytes
    train        a short single-process training run (per-iteration time and loss)
    make-data    write the synthetic ADE20K (done automatically on first use)
    verify-data  decode every image and label map of a data root; name the bad files
    ddp          the instrumented DDP iteration on N ranks: per-phase table and JSON
    validate     blame checked against injected, known causes on this machine (docs/validate.md)
    scorecard    a held-out prediction scored over K fresh launches (docs/prediction.md)
    converge     steps to a held-out target as batch and world size grow, and goodput
                 (docs/converge.md)
    attribute    lost parallel efficiency split over components, from asv or a run now
                 (docs/report.md; tools/attribute.py is the same with every option at once)
    what-if      remedies predicted from their components, then run and scored (docs/whatif.md)
    predict      world sizes and nodes not run, predicted (docs/prediction.md)
    engines      the workload under every engine (DDP, DeepSpeed ZeRO, FSDP2, DataParallel),
                 side by side (docs/engines.md)

Examples:
    python -m swinkit describe --preset thesis --json
    python -m swinkit train --preset cpu --iters 20
    python -m swinkit train --preset cpu --iters 20 --precision bf16
    python -m swinkit verify-data --data-root /data/ADEChallengeData2016
    python -m swinkit ddp --preset test --world-size 2 --json r.json
    python -m swinkit ddp --preset test --world-size 2 --inject compute_ms=20,ranks=1
    python -m swinkit ddp --preset test --world-size 2 --precision bf16
    python -m swinkit validate --preset test --world-sizes 1,2
    python -m swinkit scorecard --preset test --launches 5
    python -m swinkit converge --preset test --world-sizes 1,2 --batches 2,4 --lr-rule linear,none
    python -m swinkit attribute --run --preset test --world-sizes 1,2 --html a.html
    python -m swinkit engines --preset test --world-sizes 1,2

Exit codes: one table for every command (swinkit/cli/exit_codes.py), printed under --help.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from swinkit.cli import attribute as attribute_cli
from swinkit.cli import converge as converge_cli
from swinkit.cli import engines as engines_cli
from swinkit.cli import options
from swinkit.cli import predict as predict_cli
from swinkit.cli import scorecard as scorecard_cli
from swinkit.cli import validate as validate_cli
from swinkit.cli.exit_codes import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NO_DATA,
                                    EXIT_OK, describe)
from swinkit.cli.launch import add_node_args
from swinkit.config import PRESETS, default_data_root, load_config
from swinkit.injection import spec_help
from swinkit.runs.engine_records import DEFAULT_ENGINE, ENGINES


def _parse_option(text: str) -> tuple[str, object]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--cfg-options entries look like key=value, got {text!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, tuple(value) if isinstance(value, list) else value


def _add_workload_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="cpu", choices=PRESETS, help="workload preset (default: cpu)")
    p.add_argument("--data-root", help="ADEChallengeData2016 folder (default: $SWINKIT_DATA_ROOT, "
                                       f"else the synthetic set at {default_data_root()})")
    p.add_argument("--cfg-options", nargs="+", type=_parse_option, default=[], metavar="KEY=VALUE",
                   help="override preset fields, e.g. images_per_rank=4 crop_size=[64,64]")
    p.add_argument("--device", choices=("cpu", "cuda"), help="override the preset's device")


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swinkit", description=__doc__.split("\n")[0],
                                     epilog=describe(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("describe", help="the workload as data")
    _add_workload_args(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")

    p = sub.add_parser("train", help="a short single-process training run")
    _add_workload_args(p)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1 = one rank)")
    options.add_precision(p, "training precision (default: the preset's, fp32; "
                             "docs/precision.md)")

    p = sub.add_parser("make-data", help="write the synthetic ADE20K")
    p.add_argument("--data-root", default=str(default_data_root()))
    p.add_argument("--train", type=int, default=256, help="training images (default 256)")
    p.add_argument("--val", type=int, default=32, help="validation images (default 32)")

    p = sub.add_parser("verify-data", help="decode every file of a data root, name bad ones")
    p.add_argument("--data-root", default=None, help="default: $SWINKIT_DATA_ROOT or synthetic")

    _add_ddp_parser(sub)
    validate_cli.add_parser(sub)
    scorecard_cli.add_parser(sub)
    converge_cli.add_parser(sub, _add_workload_args)
    attribute_cli.add_parsers(sub)
    predict_cli.add_parser(sub)
    engines_cli.add_parser(sub)
    return parser


def _add_ddp_parser(sub) -> None:
    """``swinkit ddp``: one instrumented run (or another engine's, or all of them)."""
    p = sub.add_parser("ddp", help="the instrumented DDP iteration on N ranks")
    _add_workload_args(p)
    p.add_argument("--world-size", type=int, default=2,
                   help="ranks per node, torchrun's --nproc-per-node (default 2; all ranks: "
                        "this x --nnodes)")
    p.add_argument("--iters", type=int, default=10, help="measured iterations (default 10)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up iterations dropped (default 3)")
    p.add_argument("--workers", type=int, help="loader workers per rank (default: the preset's)")
    p.add_argument("--inject", action="append", metavar="SPEC",
                   help=f"known costs, comma-separated: {spec_help()}; repeat it "
                        "for costs on other ranks (--inject data_ms=60,ranks=0 --inject "
                        "backward_ms=50,ranks=1: two stragglers; a kind given twice for one "
                        "rank is refused) (see docs/blame.md, 'Injecting known costs')")
    p.add_argument("--json", dest="json_path", help="write the result JSON here (atomically)")
    p.add_argument("--trace", help="write torch.profiler traces here, one file per rank, and the "
                                   "ranks' timeline beside them (swinkit-timeline.json)")
    p.add_argument("--timeline", help="write the ranks' timelines here as one Chrome/Perfetto "
                                      "trace (a track per rank)")
    p.add_argument("--ddp-timers", action=argparse.BooleanOptionalAction, default=None,
                   help="sample DDP's reducer timers for the cross-check (default: on CPU only; "
                        "on GPU they synchronise inside the step)")
    p.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"))
    p.add_argument("--threads-per-rank", type=int, default=1)
    p.add_argument("--oversubscribe", action="store_true", help="allow more CPU ranks than cores")
    p.add_argument("--timeout", type=float, default=600.0, help="wall-clock watchdog, s (default 600)")
    p.add_argument("--pg-timeout", type=float, default=60.0, help="process-group timeout, s")
    add_node_args(p)
    p.add_argument("--bare", action="store_true",
                   help="no instrumentation, iteration time only (to measure its cost)")
    p.add_argument("--engine", default=None,
                   help=f"{', '.join(ENGINES)} (default {DEFAULT_ENGINE}), or all (every engine "
                        "at world size 1 and --world-size, one table; swinkit engines; "
                        "docs/engines.md)")
    p.add_argument("--zero", type=int, help="DeepSpeed ZeRO stage 0, 1 or 2 (default 1)")
    p.add_argument("--grad-accum", type=int, default=1,
                   help="micro-batches per optimizer step (default 1)")
    p.add_argument("--figure", help="with --engine all: write the comparison figure (PNG) here")
    options.add_precision(p, "training precision (default: the preset's, fp32): autocast "
                             "around forward and loss, fp32 weights, gradients and all-reduce, "
                             "in every engine (docs/precision.md); deepspeed and fsdp2 refuse "
                             "fp16")


def _config(args):
    device = args.device
    if device is None and args.command == "describe":
        device = "cpu"  # counting needs no GPU
    overrides = dict(args.cfg_options)
    if getattr(args, "precision", None):
        overrides["precision"] = args.precision
    return load_config(args.preset, args.data_root, overrides, device=device)


def _describe(args) -> int:
    from swinkit.runs.describe import describe
    info = describe(_config(args))
    if args.json:
        print(json.dumps(info, indent=2))
        return EXIT_OK
    for key, value in info.items():
        shown = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else value
        shown = f"{value:.3f}" if isinstance(value, float) else shown
        print(f"{key:>28}  {shown}")
    return EXIT_OK


def _train(args) -> int:
    from swinkit.components.train import train
    result = train(_config(args), iters=args.iters, threads=args.threads)
    s = result.summary()
    print(f"median iteration {s['median_iter_s']:.3f} s in {s['precision']}; mean loss {s['first_half_mean_loss']:.4f}"
          f" (first half) -> {s['second_half_mean_loss']:.4f} (second half)")
    return EXIT_OK


def _make_data(args) -> int:
    from swinkit.data.synthetic import write_synthetic_ade20k
    root = write_synthetic_ade20k(args.data_root, n_train=args.train, n_val=args.val)
    print(f"synthetic ADE20K at {root}")
    return EXIT_OK


def _verify_data(args) -> int:
    from swinkit.config import resolve_data_root
    from swinkit.data.loader import check_data_root
    from swinkit.data.verify import verify_data
    root = check_data_root(resolve_data_root(args.data_root)[0])
    report = verify_data(root)
    for problem in report.problems:
        print(problem)
    print(f"{report.checked} samples checked, {len(report.problems)} problems, root {root}")
    return EXIT_OK if report.ok else EXIT_FAILED


def _ddp(args) -> int:
    if args.engine is not None or args.zero is not None or args.grad_accum != 1 or args.figure:
        from swinkit.cli.engines import engine_command
        args.engine = args.engine or DEFAULT_ENGINE
        return engine_command(args)
    from swinkit.cli.launch import launch_and_report, run_spec
    from swinkit.result_files import write_json_atomic
    from swinkit.measure.timeline import chrome_trace
    from swinkit.report.ddp_table import ddp_table
    from swinkit.runs.ddp_run import run_ddp

    spec = run_spec(args)

    def timeline(result) -> None:
        if args.trace and not args.timeline:  # the ranks' timeline beside the profiler's
            args.timeline = str(Path(args.trace) / "swinkit-timeline.json")
        if args.timeline and result is not None and not args.bare:
            write_json_atomic(args.timeline, chrome_trace(
                {r["rank"]: r["timeline"] for r in result["ranks"]}, result["warmup"]))

    def report(result) -> int:
        print(f"median iteration {result['iter_s']:.4f} s (bare loop)" if args.bare
              else ddp_table(result))
        if args.json_path:
            print(f"result written to {args.json_path}")
        if args.timeline and not args.bare:
            print(f"timeline (chrome://tracing, ui.perfetto.dev) written to {args.timeline}")
        return EXIT_OK

    return launch_and_report(args, "swinkit ddp", lambda: run_ddp(spec, quiet=False), report,
                             also_locked=timeline)


COMMANDS = {"describe": _describe, "train": _train, "make-data": _make_data,
            "verify-data": _verify_data, "ddp": _ddp, "validate": validate_cli.command,
            "scorecard": scorecard_cli.command, "converge": converge_cli.command,
            "attribute": attribute_cli.command, "what-if": attribute_cli.command,
            "predict": predict_cli.command, "engines": engines_cli.command}


def warn_untested_torch() -> None:
    """One line on stderr where torch is newer than the newest release swinkit is tested with
    (ValueError below the oldest it supports). The version is read without importing torch
    where this process has not (a second or more that commands reading stored results do not
    need); where it has, from the module, the torch this process runs."""
    from importlib import metadata

    from swinkit.supported import check_torch
    if "torch" in sys.modules:
        version = sys.modules["torch"].__version__
    else:
        try:
            version = metadata.version("torch")
        except metadata.PackageNotFoundError:
            return  # the command that needs torch says so
    warning = check_torch(version)
    if warning:
        print(f"swinkit: warning: {warning}", file=sys.stderr)


def main(argv: list[str] | None = None, prog: str = "swinkit") -> int:
    """Parse, run the command, and answer with one of :mod:`swinkit.cli.exit_codes`."""
    args = get_parser().parse_args(argv)
    return run_command(COMMANDS[args.command], args, f"{prog} {args.command}")


def run_command(command, args, label: str) -> int:
    """``command(args)``, its failures turned into the exit-code table's answers: a failed
    launch (the rank named), nothing stored to read, bad input, an interruption."""
    from swinkit.attribution.inputs import InputError
    from swinkit.launch import LaunchError
    try:
        warn_untested_torch()
        return command(args)
    except KeyboardInterrupt:
        print(f"{label}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except LaunchError as exc:
        print(f"{label}: a measurement failed: {exc.diagnosis.summary}", file=sys.stderr)
        return EXIT_FAILED
    except InputError as exc:  # before ValueError, which it is
        print(f"{label}: {exc}", file=sys.stderr)
        return EXIT_NO_DATA
    except ValueError as exc:  # config and data errors (DataError is a ValueError)
        print(f"{label}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
