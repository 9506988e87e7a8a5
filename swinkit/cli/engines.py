"""``swinkit engines``: the same workload under each engine, side by side; and ``swinkit ddp
--engine NAME [--zero S] [--grad-accum K]``, one run under another engine (docs/engines.md).

    python -m swinkit engines --preset test                      # every engine at 1 and 2
    python -m swinkit engines ddp,zero1,fsdp2 --world-sizes 2 --grad-accum 1,2,4 --json e.json
    python -m swinkit engines ddp,zero1,fsdp2 --precision bf16     # every engine in bf16
    python -m swinkit engines --list                             # the engines and their keys
    python -m swinkit ddp --engine all --world-size 2            # the same table, DDP's options

Engines this machine cannot run are listed with the reason. A comparison writes one JSON
(:func:`comparison_json`, whichever command ran it): ``rows`` (one per engine, world size and
K that ran), ``grad_accum`` (communication per image by K; null with one K), ``runs`` (each
run's full result, keyed ``engine@N``, ``@K<k>`` added where K is not 1), ``skipped`` and
``failed`` (the reason, same keys).
"""
from __future__ import annotations

import argparse
import sys

from swinkit.cli import options
from swinkit.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, describe

ALL = "all"


def add_parser(sub) -> None:
    p = sub.add_parser("engines", help="the workload under every engine, side by side",
                       description=__doc__, epilog=describe((0, 1, 2)),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("engine", nargs="?", default=ALL, metavar="KEYS",
                   help="engine keys, comma-separated, or all (default; see --list)")
    p.add_argument("--list", dest="list_engines", action="store_true",
                   help="list the engines, their keys and what this machine can run")
    options.add_workload(p)
    p.add_argument("--grad-accum", metavar="K", type=options.comma_ints("--grad-accum"),
                   help="micro-batches per optimizer step, comma-separated (default 1): each "
                        "engine runs at each K, and the report says whether communication per "
                        "image falls with K as the ideal 1/K")
    options.add_precision(p, "training precision of every engine (default: the preset's, "
                             "fp32), each the DDP loop's way: autocast around forward and loss, "
                             "fp32 weights, gradients and reductions; deepspeed and fsdp2 "
                             "refuse fp16 (docs/precision.md)")
    p.add_argument("--json", help="write the comparison as JSON here")
    p.add_argument("--html", help="write the comparison's figure beside this path "
                                  "(engines.png)")


def list_engines(world_size: int = 2) -> int:
    """The registry: each engine, its keys, how it starts, and whether it runs here."""
    from swinkit.runs.ddp_run import DDPRunSpec
    from swinkit.runs.engine_records import ENGINES, SHAPES
    from swinkit.runs.engine_spec import EngineSpec
    for e in ENGINES.values():
        why = e.unavailable(EngineSpec(engine=e.name, run=DDPRunSpec(nproc_per_node=world_size)))
        print(f"{e.name:<11} keys {', '.join(e.keys):<20} {e.what}")
        print(f"{'':<11} {SHAPES[e.shape]}; entry {e.entry}")
        print(f"{'':<11} here at world size {world_size}: {why or 'runs'}")
    return EXIT_OK


def command(args) -> int:
    """``swinkit engines`` (and ``tools/attribute.py --run --engine``): run, print, write."""
    if getattr(args, "list_engines", False):
        return list_engines()
    from swinkit.runs.ddp_run import DDPRunSpec
    from swinkit.runs.engine_records import keys_named
    from swinkit.runs.engine_run import run_engines_by_k
    options.export_data_root(args)
    options.default_iters(args, per_preset=False)
    keys = keys_named(args.engine)   # ValueError naming the unknown ones
    precision = getattr(args, "precision", None)   # tools/attribute.py --run --engine has it too
    run = DDPRunSpec(preset=args.preset, iters=args.iters, precision=precision)
    options.check_precision(precision, run.launch_config())   # before any launch
    runs = run_engines_by_k(keys, args.world_sizes, run, args.grad_accum or [1])
    figure = None
    if getattr(args, "html", None):
        from pathlib import Path
        figure = Path(args.html).with_name("engines.png")
    return report_comparison(runs, args.json, figure)


def report_comparison(runs: dict, json_path, figure) -> int:
    """The table (and communication per image by K), the one JSON, the figure; 1 if nothing
    ran."""
    from swinkit.attribution.grad_accum import summarize
    from swinkit.report.engine_compare import compare_figure, compare_table
    from swinkit.report.text import grad_accum_lines
    from swinkit.runs.engine_run import compare_rows
    rows = compare_rows(runs)
    accum = summarize(rows) or None   # null with one K: nothing to compare
    print(compare_table(rows, runs["skipped"], runs["failed"]))
    if accum:
        print("\n".join(grad_accum_lines(accum)[1:]))
    if json_path:
        from swinkit.result_files import write_json_atomic
        write_json_atomic(json_path, comparison_json(runs, rows, accum))
        print(f"JSON report: {json_path}")
    if figure and rows:
        from pathlib import Path
        Path(figure).parent.mkdir(parents=True, exist_ok=True)
        Path(figure).write_bytes(compare_figure(rows))
        print(f"figure: {figure}")
    return EXIT_OK if rows else EXIT_FAILED


def comparison_json(runs: dict, rows: list[dict], accum) -> dict:
    """The engine comparison's one schema (see the module doc)."""
    def name(key, ws, k=1):
        return f"{key}@{ws}" + (f"@K{k}" if k != 1 else "")
    return {"rows": rows, "grad_accum": accum,
            "runs": {name(*key): r for key, r in runs["results"].items()},
            "skipped": {name(*key): why for key, why in runs["skipped"].items()},
            "failed": {name(*key): why for key, why in runs["failed"].items()}}


def engine_command(args) -> int:
    """``swinkit ddp --engine NAME|all``: one run under another engine, or the comparison at
    world size 1 and ``--world-size`` with the ddp command's launch options."""
    from swinkit.cli.launch import launch_and_report, run_spec
    from swinkit.runs.engine_records import record
    from swinkit.runs.engine_spec import EngineSpec, EngineUnavailable

    if args.engine == ALL:
        return _all(args, run_spec(args))
    rec = record(args.engine)   # ValueError naming the known engines
    if args.figure:
        raise ValueError("--figure needs --engine all (one figure comparing the engines)")
    run = run_spec(args)
    timers = {"ds_timers": args.ddp_timers} if "ds_timers" in rec.options else {}
    spec = EngineSpec(engine=rec.name, zero=args.zero, grad_accum=args.grad_accum, run=run,
                      **timers)
    try:
        spec.validate()
    except EngineUnavailable as exc:
        print(f"swinkit ddp --engine {args.engine}: cannot run here: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from swinkit.report.ddp_table import ddp_table
    from swinkit.report.engine_compare import engine_table
    from swinkit.runs.engine_run import run_engine

    def report(result) -> int:
        title = rec.table_title or spec.key   # "zero2 iteration", ...
        table = ddp_table(result).replace("DDP iteration", f"{title} iteration", 1)
        print(table)
        print(engine_table(result))
        if args.json_path:
            print(f"result written to {args.json_path}")
        return EXIT_OK

    return launch_and_report(args, f"swinkit ddp --engine {args.engine}",
                             lambda: run_engine(spec, quiet=False), report)


def _all(args, run) -> int:
    from swinkit.runs.engine_records import COMPARED
    from swinkit.runs.engine_run import run_engines_by_k
    if args.zero is not None:
        raise ValueError("--zero with --engine all: the comparison runs ZeRO-1 and ZeRO-2")
    runs = run_engines_by_k(COMPARED, sorted({1, args.world_size}), run, [args.grad_accum],
                            quiet=True, ds_timers=args.ddp_timers)
    return report_comparison(runs, args.json_path, args.figure)
