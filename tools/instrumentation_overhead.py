"""Measure what swinkit's DDP instrumentation costs (instrumented vs bare loop, one run).

Example:
    .venv/bin/python tools/instrumentation_overhead.py --preset cpu --world-size 2 --iters 20
"""
from __future__ import annotations

import argparse

from swinkit.runs.ddp_run import DDPRunSpec
from swinkit.experiments.overhead import instrumentation_overhead


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="cpu")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", help="write the result here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    spec = DDPRunSpec(preset=args.preset, nproc_per_node=args.world_size, iters=args.iters,
                      warmup=args.warmup)
    result = instrumentation_overhead(spec, repeats=args.repeats)
    print(f"bare {result['bare_median_s']:.4f} s, instrumented {result['instrumented_median_s']:.4f} s"
          f" per iteration: instrumentation costs {100 * result['overhead']:+.2f} % (per-pair range "
          f"{100 * result['overhead_interval'][0]:+.2f} to {100 * result['overhead_interval'][1]:+.2f} %)")
    if args.json:
        from swinkit.result_files import write_json_atomic
        write_json_atomic(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
