"""``swinkit converge``: steps to a held-out target as batch and world size grow, and goodput.

Trains each cell (world size x images per rank x learning-rate rule) from several seeds to a
held-out target fixed before the run (the decode head's cross-entropy on the validation split,
checked every --eval-every steps; --target-miou adds or replaces it), and reports steps,
epochs and images to the target with their spread, the time to target (steps x the step time
of ``swinkit ddp --bare`` at that configuration), efficiency in steps beside efficiency in
time, and Pollux's goodput from the gradient noise scale measured during the runs
(docs/converge.md). A cell that does not reach the target within --max-steps is reported as
missed. CPU runs use SyncBN's CPU stand-in in the heads (--cfg-options cpu_sync_bn=false
for plain BN).

    python -m swinkit converge --preset test --world-sizes 1,2 --batches 2,4 \\
        --lr-rule linear,none --seeds 3 --json converge.json

Exit codes: 0 every launch ran (cells may have missed the target), 1 a launch failed,
2 bad input, 130 interrupted.
"""
from __future__ import annotations

import argparse
import socket
import sys

from swinkit.cli.exit_codes import EXIT_FAILED, EXIT_OK

OPTIONS = (("target_loss", "--target-loss"), ("target_miou", "--target-miou"),
           ("lr_rule", "--lr-rule"), ("seeds", "--seeds"), ("world_sizes", "--world-sizes"),
           ("world_size", "--world-sizes"), ("batches", "--batches"),
           ("max_steps", "--max-steps"), ("eval_every", "--eval-every"), ("warmup", "--warmup"),
           ("step_iters", "--step-iters"), ("workers", "--workers"))


def add_parser(sub, add_workload_args) -> None:
    """The ``converge`` subcommand on ``sub``; ``add_workload_args`` adds --preset,
    --data-root, --cfg-options and --device as every workload command has them."""
    p = sub.add_parser("converge", help="steps to a held-out target per batch and world size",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(p)
    p.set_defaults(preset="test")
    p.add_argument("--world-sizes", default="1,2", help="comma-separated (default 1,2)")
    p.add_argument("--batches", help="images per rank, comma-separated (default: the preset's)")
    p.add_argument("--lr-rule", default="linear",
                   help="learning-rate rules as the global batch grows: none, linear, sqrt "
                        "(comma-separated; default linear)")
    p.add_argument("--seeds", default="3", help="seeds per cell (default 3)")
    p.add_argument("--target-loss", help="held-out loss target (default: the preset's, "
                                         "docs/converge.md)")
    p.add_argument("--target-miou", help="held-out mIoU target, percent (optional)")
    p.add_argument("--eval-every", type=int, help="steps between held-out checks (default: "
                                                  "the preset's, 10 for test)")
    p.add_argument("--max-steps", type=int, help="step budget per run (default: the preset's)")
    p.add_argument("--warmup", type=int, help="linear warm-up steps (default: the preset's)")
    p.add_argument("--step-iters", type=int, default=30,
                   help="measured iterations of the step-time launch (default 30)")
    p.add_argument("--workers", type=int, help="loader workers per rank (default: the preset's)")
    p.add_argument("--oversubscribe", action="store_true", help="allow more CPU ranks than cores")
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="wall-clock watchdog per launch, s (default 3600)")
    p.add_argument("--json", dest="json_path",
                   help="write the result here (default results/converge/<host>-<commit>.json)")


def _ints(field: str, text: str | None):
    if text is None:
        return None
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise ValueError(f"{field} must be integers joined by commas, got {text!r}") from None


def spec_from_args(args):
    """The checked :class:`~swinkit.experiments.converge_spec.ConvergeSpec` of the options; a
    ValueError names the option (before any process starts)."""
    try:
        seeds = int(args.seeds)
    except ValueError:
        seeds = args.seeds  # the spec's check names it
    try:
        return _spec(args, seeds).validate()
    except ValueError as exc:
        raise ValueError(as_option(str(exc))) from None


def _spec(args, seeds):
    from swinkit.experiments.converge_spec import ConvergeSpec
    return ConvergeSpec(
        preset=args.preset, world_sizes=_ints("world_sizes", args.world_sizes),
        batches=_ints("batches", args.batches),
        lr_rules=tuple(r.strip() for r in args.lr_rule.split(",") if r.strip()), seeds=seeds,
        target_loss=args.target_loss, target_miou=args.target_miou, eval_every=args.eval_every,
        max_steps=args.max_steps, warmup=args.warmup, step_iters=args.step_iters,
        data_root=args.data_root, overrides=dict(args.cfg_options), workers=args.workers,
        oversubscribe=args.oversubscribe, wall_timeout_s=args.timeout,
        # the device decides the backend (gloo ranks on CPU, NCCL ones on GPUs)
        backend={"cpu": "gloo", "cuda": "nccl"}.get(args.device, "auto"))


def as_option(message: str) -> str:
    """The spec's message with its field written as the option the user typed.

    >>> as_option("seeds must be an integer >= 1, got 0")
    '--seeds must be an integer >= 1, got 0'
    """
    for name, option in OPTIONS:
        if message.startswith(name):
            return option + message[len(name):]
    return message.replace("pass allow_oversubscribe", "pass --oversubscribe")


def command(args) -> int:
    from swinkit.experiments.converge import run_converge
    from swinkit.experiments.provenance import git_commit
    from swinkit.report.converge import text
    from swinkit.result_files import RunLock, write_json_atomic
    spec = spec_from_args(args)  # before any process starts
    path = args.json_path or (f"results/converge/{socket.gethostname()}-"
                              f"{(git_commit()['commit'] or 'no-git')[:8]}.json")
    with RunLock(path):
        result = run_converge(spec, progress=lambda s: print(s, flush=True))
        write_json_atomic(path, result)
    print()
    print(text(result))
    print(f"result written to {path}")
    sys.stdout.flush()
    return EXIT_FAILED if result["failed"] else EXIT_OK
