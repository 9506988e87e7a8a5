"""The GPU check in one command: on a GPU node, after ``bash tools/setup.sh``, the gpu-marked
tests, a short set of measurements of the thesis preset, and the users' main command (asv run
and publish for the current commit) timed; one pass/fail table, one JSON.

Example::

    .venv/bin/python tools/gpu_check.py                       # all four parts
    .venv/bin/python tools/gpu_check.py --parts tests,measure # no asv run
    .venv/bin/python tools/gpu_check.py --parts precision     # docs/precision.md's GPU table
    .venv/bin/python tools/gpu_check.py --preset test --batch 2 --parts measure --allow-no-gpu

Parts:
    tests     ``pytest -m gpu`` over tests/ (the test configuration hides GPUs from every other
              run); its checks' own table comes along (tests/test_gpu.py)
    measure   forward/backward of the preset's segmentor at ``--batch`` images with its MFU
              against the peak of the math it runs in, in a fresh process; one rank's DDP
              iteration instrumented against the bare loop, interleaved in one launch
    precision the precision table: forward+backward at fp32, tf32 and bf16 with the heads in
              NCHW and channels_last, the optimizer step grouped three ways, one rank's DDP
              iteration per precision; written as markdown to OUT/precision_table.md
              (docs/precision.md, "Measured on a GPU")
    asv       ``tools/suite.py``: asv run for the current commit (the suite's preset is the
              thesis on CUDA, ``SWINKIT_PRESET`` otherwise) and asv publish, its wall time

Writes ``OUT/gpu_check.json`` (default results/gpu/) before the first part and after every
part, the parts not yet run listed (``parts_not_run``; ``pass`` null until all have run), so a
job stopped at its time limit keeps what it finished (give the part that matters first:
``--parts precision,tests``); the precision part's variants go to
``OUT/precision_variants.json`` as each finishes; the tests' ``junit.xml`` beside it; prints
the table. Exit codes: 0 every check passed, 1 one failed, 2 bad input.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("tests", "measure", "precision", "asv")
OVERHEAD_BOUND = 0.05   # what the instrumentation may cost a GPU iteration (docs/method.md)


def row(part: str, check: str, figure: str, bound: str, ok: bool | None) -> dict:
    """One line of the table; ``ok`` None: not judged here (skipped, or a figure only)."""
    return {"part": part, "check": check, "figure": figure, "bound": bound, "pass": ok}


def junit_counts(path: Path) -> dict:
    """{tests, failures, errors, skipped} summed over a junit file's suites."""
    counts = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for suite in ElementTree.parse(path).getroot().iter("testsuite"):
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    return counts


def run_tests(out: Path, timeout_s: float, select: str | None = None) -> list[dict]:
    """The gpu-marked tests (``select``: a pytest ``-k`` expression, for a short device
    lease); their own check table is read back from the JSON they write."""
    env = dict(os.environ, SWINKIT_GPU_CHECK_JSON=str(out / "gpu_tests.json"))
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-q", "-rfE",
           f"--junitxml={out / 'junit.xml'}", "tests", *(["-k", select] if select else [])]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, timeout=timeout_s)
    took = time.monotonic() - started
    if not (out / "junit.xml").is_file():
        return [row("tests", "pytest -m gpu", f"exit {proc.returncode}, no junit", "", False)]
    n = junit_counts(out / "junit.xml")
    passed = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
    ok = None if passed == 0 else n["failures"] + n["errors"] == 0   # all skipped: no GPU
    rows = [row("tests", "pytest -m gpu", f"{passed} passed, {n['failures'] + n['errors']} "
                f"failed, {n['skipped']} skipped in {took / 60:.1f} min", "none failed", ok)]
    if (out / "gpu_tests.json").is_file():
        rows += [row("tests", r["check"], str(r["figure"]), r["bound"], r["pass"])
                 for r in json.loads((out / "gpu_tests.json").read_text())["rows"]]
    return rows


def run_measurements(preset: str, batch: int, iters: int) -> tuple[list[dict], dict]:
    """Forward/backward with MFU, and the instrumentation's cost at one rank."""
    from swinkit.components.forward_backward import measure_isolated
    from swinkit.experiments.overhead import instrumentation_overhead
    from swinkit.report.precision_table import flops_text
    from swinkit.runs.ddp_run import DDPRunSpec

    fb = measure_isolated(preset, batch, samples=5)
    step = fb["results"]["segmentor/forward_backward"]
    median_ms = 1e3 * statistics.median(step["seconds"])
    math = fb["matmul_peak_math"]
    rows = [row("measure", f"{preset} forward+backward, {batch} images ({fb['device']})",
                f"{median_ms:.1f} ms, {flops_text(step['achieved_flops'])}, MFU "
                f"{100 * step['mfu']:.1f} % of the {math} peak "
                f"({flops_text(fb['matmul_peak_flops'])} measured), peak memory "
                f"{fb['peak_memory_mib']:.0f} MiB", "a figure", None)]
    over = instrumentation_overhead(DDPRunSpec(preset=preset, nproc_per_node=1, iters=iters,
                                               warmup=2), repeats=2)
    rows.append(row("measure", f"{preset} DDP iteration at 1 rank: instrumented vs bare",
                    f"{1e3 * over['instrumented_median_s']:.1f} vs "
                    f"{1e3 * over['bare_median_s']:.1f} ms ({100 * over['overhead']:+.1f} %)",
                    f"< {100 * OVERHEAD_BOUND:.0f} %", over["overhead"] < OVERHEAD_BOUND))
    return rows, {"forward_backward": fb, "overhead": over}


def run_precision_table(preset: str, batch: int, iters: int, out: Path,
                        timeout_s: float = 3600) -> tuple[list[dict], dict]:
    """The precision table (docs/precision.md, "Measured on a GPU"), written as markdown to
    ``out/precision_table.md``; each variant is judged on whether it ran as asked (the peak
    its MFU divides by is its precision's, TF32 on or off as its precision says when its
    steps had run, its heads in the layout asked; a merged optimizer on the kernel asked),
    and each variant or launch that failed is a FAIL row."""
    from swinkit.experiments.precision_table import precision_table
    from swinkit.precision import PRECISIONS
    from swinkit.report.precision_table import markdown
    from swinkit.result_files import write_text_atomic

    table = precision_table(preset, batch, iters=iters, timeout_s=timeout_s,
                            keep_variants_at=out / "precision_variants.json")
    write_text_atomic(out / "precision_table.md", markdown(table))
    rows = []
    for v in table["variants"]["forward_backward"]:
        heads = "channels_last" if v["channels_last_heads"] else "NCHW"
        asked = PRECISIONS[v["precision"]]
        ran_as_asked = (v["matmul_peak_math"] == asked.peak
                        and v["tf32_after"]["matmul"] == asked.tf32
                        and v["heads_are_channels_last"] == v["channels_last_heads"])
        rows.append(row("precision", f"forward+backward {v['precision']}, heads {heads}",
                        f"{1e3 * statistics.median(v['seconds']):.1f} ms, MFU "
                        f"{100 * v['mfu']:.1f} % of the {v['matmul_peak_math']} peak",
                        "its precision's peak and TF32, its heads' layout", ran_as_asked))
    for name, step in table["variants"]["optimizer"].items():
        merged = step["kernel"] in ("fused", "foreach")   # per parameter: torch's default
        rows.append(row("precision", f"AdamW step, {name.replace('_', ' ')}",
                        f"{1e3 * statistics.median(step['seconds']):.2f} ms, "
                        f"{step['groups']} groups, ran {step['kernel_ran']}",
                        f"ran {step['kernel']}" if merged else "a figure",
                        step["kernel_ran"] == step["kernel"] if merged else None))
    for what, why in table["variants"].get("failed", {}).items():
        rows.append(row("precision", what, f"failed: {why}", "runs", False))
    for precision, run in table["ddp"].items():
        figure = (f"skipped: {run['skipped']}" if "skipped" in run
                  else f"failed: {run['failed']}" if "failed" in run
                  else f"{1e3 * run['iter_s']:.1f} ms per iteration")
        rows.append(row("precision", f"DDP iteration at 1 rank, {precision}", figure,
                        "a figure", False if "failed" in run else None))
    return rows, table


def run_asv(timeout_s: float) -> list[dict]:
    """The users' main command, timed: asv run for this commit, then publish."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "suite.py")], cwd=ROOT,
                          timeout=timeout_s)
    took = time.monotonic() - started
    return [row("asv", "tools/suite.py: asv run + publish", f"exit {proc.returncode} in "
                f"{took / 60:.1f} min", "exit 0", proc.returncode == 0)]


def print_table(rows: list[dict], header: str) -> None:
    width = max(len(r["check"]) for r in rows)
    part = max(8, *(len(r["part"]) for r in rows))
    print(f"\n{header}\n{'part':<{part}} {'check':<{width}}  {'result':<6}  figure  (bound)")
    for r in rows:
        mark = {True: "pass", False: "FAIL", None: "-"}[r["pass"]]
        print(f"{r['part']:<{part}} {r['check']:<{width}}  {mark:<6}  {r['figure']}  "
              f"({r['bound']})")


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {PARTS}")
    p.add_argument("--preset", default="thesis", help="the measurements' preset (default thesis)")
    p.add_argument("--batch", type=int, default=8, help="images in forward/backward (default 8)")
    p.add_argument("--iters", type=int, default=10, help="DDP iterations per loop (default 10)")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "gpu")
    p.add_argument("--timeout", type=float, default=3600,
                   help="seconds per part (the precision part: its variants' process; each of "
                        "its DDP launches has the run's own limits)")
    p.add_argument("--tests-k", metavar="EXPR", default=None,
                   help="only the gpu-marked tests pytest's -k EXPR selects (e.g. 'precision "
                        "or bf16 or fp16')")
    p.add_argument("--allow-no-gpu", action="store_true",
                   help="run where torch sees no GPU (a CPU check of this script): without it, "
                        "no GPU is a failure, not a pass with every GPU test skipped")
    return p


def check_args(args, cuda: bool) -> str | None:
    """What is wrong with the arguments, before any part runs (None: nothing)."""
    from swinkit.config import PRESETS
    parts = [p for p in args.parts.split(",") if p]
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        return f"--parts: {bad or 'none'} not among {PARTS}"
    if args.preset not in PRESETS:
        return f"--preset: {args.preset!r} not among {PRESETS}"
    if args.batch < 2:
        return f"--batch must be >= 2 (UPerHead cannot train at batch 1), got {args.batch}"
    if args.iters < 1:
        return f"--iters must be >= 1, got {args.iters}"
    if not cuda and not args.allow_no_gpu:
        return ("torch sees no GPU here (a CPU build, or CUDA_VISIBLE_DEVICES empty): nothing "
                "would be checked; --allow-no-gpu runs it anyway")
    return None


def run_part(part: str, args, report: dict) -> list[dict]:
    """One part's rows; a part that raises or times out is a FAIL row, the others still run."""
    try:
        if part == "tests":
            return run_tests(args.out, args.timeout, args.tests_k)
        if part == "measure":
            rows, report["parts"]["measure"] = run_measurements(args.preset, args.batch, args.iters)
            return rows
        if part == "precision":
            rows, report["parts"]["precision"] = run_precision_table(
                args.preset, args.batch, args.iters, args.out, args.timeout)
            return rows
        return run_asv(args.timeout)
    except (subprocess.TimeoutExpired, RuntimeError, OSError, ValueError) as exc:
        return [row(part, f"{part} did not finish", f"{type(exc).__name__}: {exc}", "", False)]


def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    import torch
    problem = check_args(args, torch.cuda.is_available())
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    parts = [p for p in args.parts.split(",") if p]
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    report = {"device": device, "gpus": torch.cuda.device_count(), "torch": torch.__version__,
              "python": platform.python_version(), "parts": {}, "rows": []}
    from swinkit.result_files import write_json_atomic
    # written before the first part and after every part: a job killed at its time limit
    # keeps the parts it finished, and no earlier run's file passes for this one; "pass" is
    # null until every part has run
    report.update(parts_not_run=parts, **{"pass": None})
    write_json_atomic(args.out / "gpu_check.json", report)
    for n, part in enumerate(parts):
        started = time.monotonic()
        print(f"[gpu_check] {part} ...", flush=True)
        report["rows"] += run_part(part, args, report)
        print(f"[gpu_check] {part} done in {(time.monotonic() - started) / 60:.1f} min", flush=True)
        report["parts_not_run"] = parts[n + 1:]
        report["pass"] = (all(r["pass"] is not False for r in report["rows"])
                          if not report["parts_not_run"] else None)
        write_json_atomic(args.out / "gpu_check.json", report)
    print_table(report["rows"], f"GPU check on {device} (torch {torch.__version__})")
    print(f"\n{'PASS' if report['pass'] else 'FAIL'}: {args.out / 'gpu_check.json'}")
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
