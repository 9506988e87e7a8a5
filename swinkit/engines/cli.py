"""``swinkit ddp --engine NAME [--zero S] [--grad-accum K]``: the same workload under another
engine (``swinkit ddp`` with the default engine and no engine option keeps its own path).

``--engine all`` runs every compared engine (ddp, zero1, zero2, dp, dp_vanilla) at world size 1
and at ``--world-size``, prints one side-by-side table, and writes one JSON (``--json``) and one
figure (``--figure``). Engines this machine cannot run are listed with the reason.
"""
from __future__ import annotations

import sys
from contextlib import nullcontext

ALL = "all"


def _run_spec(args):
    from swinkit.dist import LaunchConfig
    from swinkit.workloads.ddp_run import DDPRunSpec
    from swinkit.workloads.inject import parse_injection
    launch = LaunchConfig(
        world_size=args.world_size, nnodes=args.nnodes, node_rank=args.node_rank,
        rdzv_endpoint=args.rdzv_endpoint, backend=args.backend, pg_timeout_s=args.pg_timeout,
        join_timeout_s=args.pg_timeout, wall_timeout_s=args.timeout,
        threads_per_rank=args.threads_per_rank, allow_oversubscribe=args.oversubscribe)
    return DDPRunSpec(preset=args.preset, world_size=args.world_size, iters=args.iters,
                      warmup=args.warmup, workers=args.workers,
                      injection=parse_injection(args.inject), data_root=args.data_root,
                      overrides=dict(args.cfg_options), trace_dir=args.trace, bare=args.bare,
                      launch=launch, ddp_timers=args.ddp_timers)


def engine_command(args) -> int:
    from swinkit.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
    from swinkit.dist import LaunchError
    from swinkit.engines.spec import ENGINES, EngineSpec, EngineUnavailable
    from swinkit.files import RunLock, write_json_atomic

    if args.engine not in ENGINES + (ALL,):
        raise ValueError(f"engine must be one of {', '.join(ENGINES + (ALL,))}; got {args.engine!r}")
    if args.figure and args.engine != ALL:
        raise ValueError("--figure needs --engine all (one figure comparing the engines)")
    run = _run_spec(args)
    if args.engine == ALL:
        return _all(args, run)
    spec = EngineSpec(engine=args.engine, zero=args.zero, grad_accum=args.grad_accum, run=run,
                      ds_timers=args.ddp_timers)
    try:
        spec.validate()
    except EngineUnavailable as exc:
        print(f"swinkit ddp --engine {args.engine}: cannot run here: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from swinkit.engines.compare import engine_table
    from swinkit.report.ddp_table import ddp_table
    from swinkit.workloads.engine_run import run_engine
    try:
        with RunLock(args.json_path) if args.json_path and args.nnodes == 1 else nullcontext():
            result = run_engine(spec, quiet=False)
            if args.json_path and result is not None:
                write_json_atomic(args.json_path, result)
    except LaunchError as exc:
        print(f"swinkit ddp --engine {args.engine}: FAILED: {exc.diagnosis.summary}", file=sys.stderr)
        if exc.diagnosis.detail:
            print(exc.diagnosis.detail, file=sys.stderr)
        return EXIT_FAILED
    if result is None:
        print("this node's ranks finished; the node that hosted rank 0 reports the results")
        return EXIT_OK
    table = ddp_table(result)
    if spec.engine != "ddp":
        table = table.replace("DDP iteration", f"{spec.key} iteration", 1)
    print(table)
    print(engine_table(result))
    if args.json_path:
        print(f"result written to {args.json_path}")
    return EXIT_OK


def _all(args, run) -> int:
    from swinkit.cli import EXIT_OK
    from swinkit.engines.compare import compare_figure, compare_table
    from swinkit.engines.spec import COMPARED
    from swinkit.files import write_json_atomic
    from swinkit.workloads.engine_run import compare_rows, run_engines

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
