"""``swinkit ddp --engine NAME [--zero S] [--grad-accum K]``: the same workload under another
engine (``swinkit ddp`` with the default engine and no engine option keeps its own path).

``--engine all`` runs every compared engine (ddp, zero1, zero2, dp, dp_vanilla) at world size 1
and at ``--world-size``, prints one side-by-side table, and writes one JSON (``--json``) and one
figure (``--figure``). Engines this machine cannot run are listed with the reason.
"""
from __future__ import annotations

import sys

from swinkit.cli.exit_codes import EXIT_BAD_INPUT, EXIT_OK

ALL = "all"


def engine_command(args) -> int:
    from swinkit.cli.launch import launch_and_report, run_spec
    from swinkit.runs.engine_spec import ENGINES, EngineSpec, EngineUnavailable

    args.engine = args.engine.replace("_", "-")  # tools/attribute.py's key is dp_vanilla
    if args.engine not in ENGINES + (ALL,):
        raise ValueError(f"engine must be one of {', '.join(ENGINES + (ALL,))}; got {args.engine!r}")
    if args.figure and args.engine != ALL:
        raise ValueError("--figure needs --engine all (one figure comparing the engines)")
    run = run_spec(args)
    if args.engine == ALL:
        return _all(args, run)
    spec = EngineSpec(engine=args.engine, zero=args.zero, grad_accum=args.grad_accum, run=run,
                      ds_timers=args.ddp_timers)
    try:
        spec.validate()
    except EngineUnavailable as exc:
        print(f"swinkit ddp --engine {args.engine}: cannot run here: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from swinkit.report.engine_compare import engine_table
    from swinkit.report.ddp_table import ddp_table
    from swinkit.runs.engine_run import run_engine

    def report(result) -> int:
        table = ddp_table(result)
        if spec.engine != "ddp":
            table = table.replace("DDP iteration", f"{spec.key} iteration", 1)
        print(table)
        print(engine_table(result))
        if args.json_path:
            print(f"result written to {args.json_path}")
        return EXIT_OK

    return launch_and_report(args, f"swinkit ddp --engine {args.engine}",
                             lambda: run_engine(spec, quiet=False), report)


def _all(args, run) -> int:
    from swinkit.report.engine_compare import compare_figure, compare_table
    from swinkit.runs.engine_spec import COMPARED
    from swinkit.result_files import write_json_atomic
    from swinkit.runs.engine_run import compare_rows, run_engines

    if args.zero is not None:
        raise ValueError("--zero with --engine all: the comparison runs ZeRO-1 and ZeRO-2")
    world_sizes = sorted({1, args.world_size})
    runs = run_engines(COMPARED, world_sizes, run, grad_accum=args.grad_accum, quiet=True,
                       ds_timers=args.ddp_timers)
    rows = compare_rows(runs)
    print(compare_table(rows, runs["skipped"], runs["failed"]))
    if args.json_path:
        write_json_atomic(args.json_path, {
            "rows": rows,
            "runs": {f"{key}@{ws}": r for (key, ws), r in runs["results"].items()},
            "skipped": {f"{key}@{ws}": why for (key, ws), why in runs["skipped"].items()},
            "failed": {f"{key}@{ws}": why for (key, ws), why in runs["failed"].items()}})
        print(f"result written to {args.json_path}")
    if args.figure and rows:
        from pathlib import Path
        Path(args.figure).write_bytes(compare_figure(rows))
        print(f"figure written to {args.figure}")
    return EXIT_OK if rows else 1
