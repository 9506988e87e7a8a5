"""The rewrite of a published folder, worked out in memory before anything is written.

Every remote ``src``/``href`` becomes the relative path of its local copy under ``vendor/``
(with the integrity verdict), outbound links lose their ``href`` (kept in ``title``), and the
error.html redirect becomes a banner. Every problem of every page is collected first, so one
:class:`OfflineAssetsError` names them all and the folder is left as asv published it.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from swinkit.report.asv_offline import load_failure, tags
from swinkit.report.asv_offline.assets import (CDN_FILES, VENDOR, default_cache_dir,
                                               fetched_label, resolve, vendor_folder)
from swinkit.report.asv_offline.integrity import judge


class OfflineAssetsError(RuntimeError):
    """The page cannot be made offline (an asset is missing or unknown); nothing was written."""


@dataclass
class Replacement:
    """What became of one remote reference."""

    url: str
    local: str | None           # relative path the page now loads (None: a link, href dropped)
    source: str = ""            # "flot@0.8.3 jquery.flot.js"
    integrity: str = "none"     # "kept" (bytes match), "dropped" (they differ), "none" (had none)
    note: str = ""


@dataclass
class Plan:
    """Everything :func:`~swinkit.report.asv_offline.write.make_offline` will write, computed
    before anything is written."""

    html: dict[Path, str]                   # file -> new text
    packages: dict[str, Path]               # vendor folder name -> cached folder to copy
    replacements: list[Replacement]


def _rewrite_link(m: re.Match, attrs: list, url: str, out: Plan) -> str:
    """An outbound link (not something the page loads): href dropped, address kept in title."""
    out.replacements.append(Replacement(url, None, note="link: href dropped"))
    kept = [(k, v) for k, v in attrs if k != "href"]
    if "title" not in dict(attrs):
        kept.append(("title", url))
    return tags.render(m.group("name"), kept, m.group("end"))


def _rewrite_asset(m: re.Match, attrs: list, key: str, url: str, page: Path, html_dir: Path,
                   cache_dir: Path, out: Plan, problems: list[str]) -> str:
    """A library the page loads: pointed at its copy under ``vendor/``, or a problem noted."""
    name = m.group("name").lower()
    found = resolve(url, cache_dir)
    if isinstance(found, str):
        problems.append(f"{page.name}: <{name}> {found}")
        return m.group(0)
    package, fetched, local = found
    rel_path = CDN_FILES[url][1]
    folder = vendor_folder(package, fetched)
    vendored = f"{VENDOR}/{folder}/{rel_path}"
    out.packages[folder] = Path(cache_dir) / package.folder
    href = os.path.relpath(html_dir / vendored, page.parent).replace(os.sep, "/")
    got = fetched_label(package, fetched)
    rep = Replacement(url, href, source=f"{got} {rel_path}")
    verdict = None
    new_attrs = []
    for k, v in attrs:
        if k == key:
            v = href
        elif k == "integrity":
            verdict = judge(v, local.read_bytes(), package, got, vendored, rel_path)
            rep.integrity = verdict.integrity
            if verdict.integrity == "dropped":
                continue
        elif k == "onerror" and v == load_failure.ONERROR:
            v = load_failure.ONERROR_NAMED
        new_attrs.append((k, v))
    if verdict is not None:
        rep.note = verdict.note
    out.replacements.append(rep)
    return (verdict.comment if verdict else "") + tags.render(m.group("name"), new_attrs,
                                                              m.group("end"))


def _rewrite_page(page: Path, html_dir: Path, cache_dir: Path, out: Plan,
                  problems: list[str]) -> None:
    text = page.read_text(encoding="utf-8")
    comments = tags.comment_spans(text)

    def rewrite_tag(m: re.Match) -> str:
        if any(a <= m.start() < b for a, b in comments):
            return m.group(0)
        attrs = tags.attrs(m.group("attrs"))
        remote = [(k, v) for k, v in attrs if k in ("src", "href") and tags.is_remote(v)]
        if not remote:
            if m.group("name").lower() == "script" and \
                    dict(attrs).get("onerror") == load_failure.ONERROR:
                return tags.render(m.group("name"), load_failure.name_the_element(attrs),
                                   m.group("end"))
            return m.group(0)
        key, url = remote[0]
        if m.group("name").lower() == "a":
            return _rewrite_link(m, attrs, url, out)
        return _rewrite_asset(m, attrs, key, url, page, html_dir, cache_dir, out, problems)

    new, problem = load_failure.replace_redirect(tags.TAG.sub(rewrite_tag, text))
    if problem:
        problems.append(f"{page.name}: {problem}")
    if new != text:
        out.html[page] = new


def plan(html_dir: Path, cache_dir: Path | None = None) -> Plan:
    """Work out the rewrite of every .html under ``html_dir``; raise before writing anything.

    Raises:
        OfflineAssetsError: naming every asset that is missing from the cache or unknown.
    """
    html_dir = Path(html_dir)
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    files = sorted(p for p in html_dir.rglob("*.html")
                   if VENDOR not in p.relative_to(html_dir).parts[:1])
    problems: list[str] = []
    out = Plan(html={}, packages={}, replacements=[])
    for page in files:
        _rewrite_page(page, html_dir, cache_dir, out, problems)
    if problems:
        raise OfflineAssetsError(
            f"cannot make {html_dir} work offline; it was left as asv published it "
            f"(its libraries still load from CDNs):\n  " + "\n  ".join(problems))
    for page, new in out.html.items():
        left = [r for r in tags.remote_references(new) if r[0] != "a"]
        if left:  # cannot happen unless the rewrite itself is wrong: refuse to write it
            raise OfflineAssetsError(f"{page}: remote references left after rewrite: {left}")
    return out
