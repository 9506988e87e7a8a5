"""Writing the planned rewrite: all or nothing, so a reader never sees half a page."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from swinkit.report.asv_offline.assets import FETCHED, VENDOR
from swinkit.report.asv_offline.plan import Replacement, plan


def make_offline(html_dir: Path, cache_dir: Path | None = None) -> list[Replacement]:
    """Copy the cached libraries into ``html_dir/vendor`` and point every page at them.

    All or nothing: the plan (every asset found, every page rewritten in memory) is made first;
    then ``vendor/`` is written into a temporary folder and renamed into place, then each page is
    replaced atomically. Running it again on a rewritten folder changes nothing.

    Returns:
        What became of each remote reference (address, local path, integrity kept/dropped).

    Raises:
        OfflineAssetsError: an asset is missing or unknown; nothing was written.
    """
    html_dir = Path(html_dir)
    todo = plan(html_dir, cache_dir)
    if todo.packages:
        _replace_vendor(html_dir, todo.packages)
    for page, text in todo.html.items():
        _replace_file(page, text)
    return todo.replacements


def _replace_vendor(html_dir: Path, packages: dict[str, Path]) -> None:
    """``vendor/`` built beside the pages and renamed into place (the old one removed)."""
    tmp = Path(tempfile.mkdtemp(prefix=".vendor-", dir=html_dir))
    try:
        for folder, src in packages.items():
            shutil.copytree(src, tmp / folder, ignore=shutil.ignore_patterns(FETCHED))
        dest = html_dir / VENDOR
        if dest.exists():
            old = dest.with_name(f".{VENDOR}-old-{os.getpid()}")
            dest.rename(old)
            shutil.rmtree(old)
        tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def _replace_file(page: Path, text: str) -> None:
    """``page`` replaced by ``text`` in one rename (readable by the web server: 0644)."""
    fd, name = tempfile.mkstemp(prefix=f".{page.name}.", dir=page.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(name, 0o644)
    os.replace(name, page)
