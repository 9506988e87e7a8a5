"""Benchmark the current commit with asv on this machine and publish the HTML history.

Example:
    .venv/bin/python tools/suite.py                 # the whole suite (CPU default: ~minutes)
    .venv/bin/python tools/suite.py -b bench_ddp    # one benchmark file
    .venv/bin/python tools/suite.py --publish-only  # re-publish the stored results, no run
Environment: SWINKIT_PRESET (thesis with CUDA, cpu without), SWINKIT_OVERSUBSCRIBE=1.

After ``asv publish`` the page is made to work offline: the libraries asv's page loads from
CDNs are copied from the cache that tools/setup.sh fills (tools/fetch_asv_assets.py) into the
published folder, and the page points at them (swinkit/report/asv_offline/). Exit codes: 0 done,
1 a step failed (a missing asset is named; the stored results are kept either way). At the end
it prints what the run cost: asv run's and publish's seconds with the load average around
them, and each benchmark file's setup_cache seconds as asv recorded them.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from swinkit.report.asv_offline import OfflineAssetsError, describe, make_offline

ROOT = Path(__file__).resolve().parents[1]


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-b", "--bench", help="regular expression of benchmarks to run (asv -b)")
    p.add_argument("--quick", action="store_true", help="asv --quick (one sample each)")
    p.add_argument("--publish-only", action="store_true",
                   help="no benchmark run: asv publish the stored results and make the page "
                        "work offline")
    return p


def publish() -> Path:
    """``asv publish`` of the stored results; the HTML folder."""
    from swinkit.run_suite import read_conf
    print("$ asv publish", flush=True)
    cmd = [sys.executable, "-m", "asv", "--config", str(ROOT / "asv.conf.json"), "publish"]
    if subprocess.run(cmd, cwd=ROOT).returncode != 0:
        raise RuntimeError("asv publish failed (no stored results yet? run tools/suite.py "
                           "without --publish-only first)")
    return ROOT / read_conf()["html_dir"]


def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    if args.publish_only:
        try:
            html = publish()
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    run_code, timings = 0, {}
    if not args.publish_only:
        from swinkit.run_suite import run_suite, timing_lines
        try:
            html, run_code = run_suite(args.bench, args.quick, timings)
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print("\n".join(timing_lines(timings)))
    try:
        replaced = make_offline(html)
    except OfflineAssetsError as e:
        print(f"error: {e}\nThe results are stored. Fetch the assets (python3 "
              "tools/fetch_asv_assets.py, needs npm), then: .venv/bin/python tools/suite.py "
              "--publish-only", file=sys.stderr)
        return 1
    if replaced:
        print(f"offline page: {len(replaced)} remote reference(s) replaced; libraries in "
              f"{html}/vendor\n{describe(replaced)}")
    print(f"HTML history: {html}/index.html")
    if run_code:
        print("error: some benchmarks failed (asv says which, above, and the page shows them "
              "as failed); the others' results are stored and published", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
