"""``python -m swinkit.report.asv_offline HTML_DIR``: rewrite a published folder by hand."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from swinkit.report.asv_offline.assets import default_cache_dir
from swinkit.report.asv_offline.plan import OfflineAssetsError, Replacement
from swinkit.report.asv_offline.write import make_offline


def describe(replacements: list[Replacement]) -> str:
    """One line per replaced address, for the terminal."""
    lines = []
    for r in replacements:
        if r.local is None:
            lines.append(f"  link {r.url}: {r.note}")
        else:
            lines.append(f"  {r.local}  <- {r.source}  ({r.note or 'no integrity attribute'})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    # prog named here: run as a package, argparse would call it "__main__.py"
    p = argparse.ArgumentParser(prog="python -m swinkit.report.asv_offline",
                                description="make an `asv publish` folder work offline")
    p.add_argument("html_dir", type=Path)
    p.add_argument("--cache", type=Path, default=None,
                   help=f"asset cache (default {default_cache_dir()})")
    args = p.parse_args(argv)
    try:
        reps = make_offline(args.html_dir, args.cache)
    except OfflineAssetsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{args.html_dir}: {len(reps)} remote reference(s) replaced by local copies")
    if reps:
        print(describe(reps))
    return 0
