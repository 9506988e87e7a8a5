"""What ``swinkit ddp`` does around a launch, with or without ``--engine``.

Both paths (``swinkit.cli`` for DDP, ``swinkit.cli.engines`` for the other engines) build the
run from the same options, hold the same lock on the result file, and must answer a failed
launch or a node that does not host rank 0 with the same messages and exit codes: one place, so
the two cannot drift apart. What each prints for a result stays with its command.
"""
from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext
from typing import Callable

from swinkit.cli.exit_codes import EXIT_FAILED, EXIT_OK

# Prose, not a table: argparse re-wraps a group's description.
NODES_HELP = (
    "Every node runs the same command with its own --node-rank. What the nodes talk on: "
    "--local-addr, the address this node publishes (default: its FQDN, which the other nodes "
    "may not resolve; the rank-0 node's becomes MASTER_ADDR); $NCCL_SOCKET_IFNAME, "
    "NCCL's interface (e.g. ib0); $GLOO_SOCKET_IFNAME, gloo's interface (CPU runs, and the "
    "clock-offset group beside NCCL): by default the one NCCL_SOCKET_IFNAME selects, else the "
    "one the host name resolves to, which can be 127.0.1.1 or unroutable: then set it.")


def add_node_args(parser: argparse.ArgumentParser) -> None:
    """The multi-node options of ``swinkit ddp``, as one group whose help names the network
    settings (flags and environment) that a second node needs."""
    g = parser.add_argument_group("several nodes", NODES_HELP)
    g.add_argument("--nnodes", type=int, default=1)
    g.add_argument("--node-rank", type=int, default=0)
    g.add_argument("--rdzv-endpoint", help="host:port of node 0 (required with --nnodes > 1)")
    g.add_argument("--local-addr", help="this node's address for the others (like torchrun's "
                                        "--local-addr; default: its FQDN)")
    g.add_argument("--join-timeout", type=float, default=600.0,
                   help="how long the nodes wait for each other at the rendezvous, s (default "
                        "600; --pg-timeout bounds collectives once running)")


def run_spec(args):
    """The :class:`~swinkit.runs.ddp_run.DDPRunSpec` the ``ddp`` options describe
    (``--world-size``: ranks per node, the spec's ``nproc_per_node``; ``--precision``: the
    preset's ``precision`` override, checked against the backend's device here)."""
    from swinkit.input_checks import check_int
    from swinkit.launch import LaunchConfig
    from swinkit.runs.ddp_run import DDPRunSpec
    from swinkit.injection import parse_injections
    check_int("--world-size", args.world_size)  # named as the user gave it
    overrides = dict(args.cfg_options)
    if getattr(args, "precision", None):
        overrides["precision"] = args.precision   # the preset knob, as swinkit train sets it
    launch = LaunchConfig(
        nnodes=args.nnodes, node_rank=args.node_rank,
        rdzv_endpoint=args.rdzv_endpoint, local_addr=args.local_addr, backend=args.backend,
        pg_timeout_s=args.pg_timeout, join_timeout_s=args.join_timeout, wall_timeout_s=args.timeout,
        threads_per_rank=args.threads_per_rank, allow_oversubscribe=args.oversubscribe)
    spec = DDPRunSpec(preset=args.preset, nproc_per_node=args.world_size, iters=args.iters,
                      warmup=args.warmup, workers=args.workers,
                      injection=parse_injections(args.inject), data_root=args.data_root,
                      overrides=overrides, trace_dir=args.trace, bare=args.bare,
                      launch=launch, ddp_timers=args.ddp_timers)
    # before any launch, named as the user gave it: fp16 on the CPU the backend decides
    from swinkit.cli.options import check_precision
    check_precision(getattr(args, "precision", None), launch)
    return spec


def launch_and_report(args, label: str, run: Callable[[], dict | None],
                      report: Callable[[dict], int],
                      also_locked: Callable[[dict | None], None] | None = None) -> int:
    """Run ``run()``, write its result to ``--json``, and hand it to ``report``.

    ``also_locked`` writes what else belongs beside the result while the lock is held. A failed
    launch prints ``{label}: FAILED: <diagnosis>`` (and its detail) and returns 1; a node whose
    ranks did not include rank 0 (``run()`` returns None) says so and returns 0.
    """
    from swinkit.launch import LaunchError
    from swinkit.result_files import RunLock, write_json_atomic
    try:
        # Multi-node runs share the JSON path across hosts, where a pid means nothing: no lock.
        locked = args.json_path and args.nnodes == 1
        with RunLock(args.json_path) if locked else nullcontext():
            result = run()
            if args.json_path and result is not None:
                write_json_atomic(args.json_path, result)
            if also_locked is not None:
                also_locked(result)
    except LaunchError as exc:
        print(f"{label}: FAILED: {exc.diagnosis.summary}", file=sys.stderr)
        if exc.diagnosis.detail:
            print(exc.diagnosis.detail, file=sys.stderr)
        return EXIT_FAILED
    if result is None:
        print("this node's ranks finished; the node that hosted rank 0 reports the results")
        return EXIT_OK
    return report(result)
