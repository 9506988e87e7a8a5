"""Make asv's published HTML work without internet: local copies of the libraries it loads.

``asv publish`` writes a page that loads jQuery, flot (and plugins), stupidtable, blueimp-md5
and Bootstrap from public CDNs and sends the browser to ``error.html`` when one fails to load,
so on a machine without internet the history cannot be viewed. The same versions are npm
packages: ``tools/fetch_asv_assets.py`` (run by ``tools/setup.sh``) packs them once into a
local cache, and :func:`make_offline` (run by ``tools/suite.py`` after ``asv publish``) copies
them into the published folder (``vendor/``) and points the page at them:

* every ``src``/``href`` to a CDN becomes the local copy's relative path;
* ``integrity`` is kept where the local bytes have that hash (the file is the CDN's file) and
  dropped where they differ (the npm package ships another build of the same version, e.g.
  flot's unminified sources where the CDN serves minified ones), with an HTML comment saying so;
* ``js_load_failure`` (which redirected to asv's "no internet connection" page) now shows a
  banner naming the file that failed, since a failure can only be a missing local file;
* outbound links (asv's own home page in the navigation bar) lose their ``href``; the address
  stays in the link's ``title``.

Nothing is written unless every asset is in the cache: a missing one raises
:class:`OfflineAssetsError` naming it, and the page is left as asv published it. Pure Python,
standard library only (no torch), so the fetch script and the tests can import it cheaply.

    python -m swinkit.report.asv_offline .asv/html     # rewrite a published folder by hand
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

VENDOR = "vendor"
FETCHED = "swinkit-fetched.json"  # per package folder in the cache: what was fetched, hashes


@dataclass(frozen=True)
class NpmPackage:
    """One npm package and the files of it the page needs.

    ``files`` maps a path inside the package tarball (under ``package/``) to the path under this
    package's folder (in the cache and in ``vendor/``); ``optional`` the same for files copied
    when present (licences, source maps). ``fallbacks`` are versions used only when the registry
    does not offer ``version``; the page then says which version it got.
    """

    name: str
    version: str
    files: dict[str, str]
    optional: dict[str, str] = field(default_factory=dict)
    fallbacks: tuple[str, ...] = ()
    differs: str = ""  # why its files are not the CDN's bytes, when known

    @property
    def folder(self) -> str:
        return f"{self.name}-{self.version}"


_LICENCE = {"LICENSE.txt": "LICENSE.txt", "LICENSE": "LICENSE"}

PACKAGES: tuple[NpmPackage, ...] = (
    NpmPackage("jquery", "3.3.1", {"dist/jquery.min.js": "jquery.min.js"},
               {"dist/jquery.min.map": "jquery.min.map", **_LICENCE}),
    # The CDN serves minified builds of 0.8.3 that the npm package does not ship: the package's
    # sources of the same release are used, so these keep no integrity attribute.
    NpmPackage("flot", "0.8.3", {name: name for name in (
        "jquery.flot.js", "jquery.flot.time.js", "jquery.flot.selection.js",
        "jquery.flot.categories.js")}, dict(_LICENCE),
        differs="the npm package has this release's unminified sources; the CDN serves minified "
                "builds of them"),
    NpmPackage("flot-orderbars", "1.0.0",
               {"js/jquery.flot.orderBars.js": "jquery.flot.orderBars.js"}, dict(_LICENCE)),
    # The CDN's stupidtable 1.0.1 is the project's git tag; the npm package reached from here
    # offers 1.1.3 only. 1.1.3 keeps the API asv uses (stupidtable(sortFns), stupidsort(dir),
    # the aftertablesort event); its bytes differ, so the integrity attribute is dropped.
    NpmPackage("stupid-table-plugin", "1.0.1", {"stupidtable.min.js": "stupidtable.min.js"},
               dict(_LICENCE), fallbacks=("1.1.3",)),
    NpmPackage("blueimp-md5", "2.19.0", {"js/md5.min.js": "md5.min.js"},
               {"js/md5.min.js.map": "md5.min.js.map", **_LICENCE}),
    NpmPackage("bootstrap", "3.1.1", {
        "dist/js/bootstrap.min.js": "js/bootstrap.min.js",
        "dist/css/bootstrap.min.css": "css/bootstrap.min.css",
        # bootstrap.min.css loads its icon font from ../fonts/
        **{f"dist/fonts/glyphicons-halflings-regular.{ext}":
           f"fonts/glyphicons-halflings-regular.{ext}" for ext in ("eot", "svg", "ttf", "woff")},
    }, dict(_LICENCE)),
)
PACKAGE = {p.name: p for p in PACKAGES}

# Every remote address in asv's page template (asv 0.6.x), and the local file that replaces it.
CDN_FILES: dict[str, tuple[str, str]] = {
    "https://code.jquery.com/jquery-3.3.1.min.js": ("jquery", "jquery.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.min.js":
        ("flot", "jquery.flot.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.time.min.js":
        ("flot", "jquery.flot.time.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.selection.min.js":
        ("flot", "jquery.flot.selection.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.categories.min.js":
        ("flot", "jquery.flot.categories.js"),
    "https://cdn.jsdelivr.net/npm/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js":
        ("flot-orderbars", "jquery.flot.orderBars.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/stupidtable/1.0.1/stupidtable.min.js":
        ("stupid-table-plugin", "stupidtable.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/blueimp-md5/2.19.0/js/md5.min.js":
        ("blueimp-md5", "md5.min.js"),
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/js/bootstrap.min.js":
        ("bootstrap", "js/bootstrap.min.js"),
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css":
        ("bootstrap", "css/bootstrap.min.css"),
}


class OfflineAssetsError(RuntimeError):
    """The page cannot be made offline (an asset is missing or unknown); nothing was written."""


def default_cache_dir() -> Path:
    """``$SWINKIT_ASV_ASSETS``, else ``$XDG_CACHE_HOME/swinkit/asv-assets`` (~/.cache default)."""
    if os.environ.get("SWINKIT_ASV_ASSETS"):
        return Path(os.environ["SWINKIT_ASV_ASSETS"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "swinkit" / "asv-assets"


def read_fetched(cache_dir: Path, package: NpmPackage) -> dict | None:
    """The record the fetch script wrote for ``package`` (None if it is not in the cache)."""
    path = Path(cache_dir) / package.folder / FETCHED
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def sri_matches(integrity: str, data: bytes) -> bool:
    """Whether ``data`` satisfies a subresource-integrity value (the strongest algorithm named)."""
    hashes: dict[str, list[str]] = {}
    for token in integrity.split():
        alg, _, digest = token.partition("-")
        if alg in ("sha256", "sha384", "sha512") and digest:
            hashes.setdefault(alg, []).append(digest.split("?")[0])
    if not hashes:
        return False
    alg = max(hashes, key=lambda a: int(a[3:]))
    ours = base64.b64encode(hashlib.new(alg, data).digest()).decode()
    return ours in hashes[alg]


# --- HTML ------------------------------------------------------------------------------------

_TAG = re.compile(r"<(?P<name>[a-zA-Z][a-zA-Z0-9]*)\b(?P<attrs>[^<>]*?)(?P<end>/?)>", re.S)
_ATTR = re.compile(r"""(?P<sp>\s+)(?P<key>[a-zA-Z_:][-a-zA-Z0-9_:.]*)"""
                   r"""(?:\s*=\s*(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<uq>[^\s"'=<>`]+)))?""")
_REMOTE = re.compile(r"^\s*(?:https?:)?//", re.I)
_REDIRECT = re.compile(r"function\s+js_load_failure\s*\(\s*\)\s*\{\s*window\.location\s*=\s*"
                       r"""["']error\.html["']\s*;?\s*\}""")
_LOAD_FAILURE_JS = """function js_load_failure(el) {
        // swinkit: the libraries are local copies (vendor/), so a failure is a missing file,
        // not a missing internet connection: name it here instead of going to error.html.
        var what = (el && (el.src || el.href)) || "a bundled library";
        if (window.console) { console.error("asv page: failed to load " + what); }
        var show = function () {
          var d = document.getElementById("swinkit-load-failure");
          if (!d) {
            d = document.createElement("div");
            d.id = "swinkit-load-failure";
            d.style.cssText = "background:#fdd;padding:1em;font-weight:bold;" +
              "position:relative;z-index:9999";
            d.textContent = "This published page is incomplete (re-run tools/suite.py, or " +
              "python -m swinkit.report.asv_offline on this folder). Failed to load:";
            document.body.insertBefore(d, document.body.firstChild);
          }
          d.textContent += " " + what;
        };
        if (document.body) { show(); } else { document.addEventListener("DOMContentLoaded", show); }
      }"""


def _attrs(text: str) -> list[tuple[str, str | None]]:
    out = []
    for m in _ATTR.finditer(text):
        value = next((m.group(g) for g in ("dq", "sq", "uq") if m.group(g) is not None), None)
        out.append((m.group("key").lower(), value))
    return out


def _render(name: str, attrs: list[tuple[str, str | None]], end: str) -> str:
    parts = [name]
    for key, value in attrs:
        if value is None:
            parts.append(key)
        else:
            parts.append(f'{key}="{value.replace(chr(34), "&quot;")}"')
    return "<" + " ".join(parts) + end + ">"


def remote_references(html: str) -> list[tuple[str, str, str]]:
    """Every (tag, attribute, address) in ``html`` whose src or href is an http(s) address."""
    found = []
    for m in _TAG.finditer(_without_comments(html)):
        for key, value in _attrs(m.group("attrs")):
            if key in ("src", "href") and value and _REMOTE.match(value):
                found.append((m.group("name").lower(), key, value))
    return found


def _without_comments(html: str) -> str:
    return re.sub(r"<!--.*?-->", lambda m: " " * len(m.group(0)), html, flags=re.S)


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
    """Everything :func:`make_offline` will write, computed before anything is written."""

    html: dict[Path, str]                   # file -> new text
    packages: dict[str, Path]               # vendor folder name -> cached folder to copy
    replacements: list[Replacement]


def _resolve(url: str, cache_dir: Path) -> tuple[NpmPackage, dict, Path] | str:
    """(package, fetched record, cached file) for a CDN address, or why there is none."""
    if url not in CDN_FILES:
        return (f"{url}: no local copy is known for this address (asv's page template changed?"
                " add it to CDN_FILES and PACKAGES in swinkit/report/asv_offline.py)")
    name, path = CDN_FILES[url]
    package = PACKAGE[name]
    fetched = read_fetched(cache_dir, package)
    wanted = f"{package.name}@{package.version}"
    if fetched is None:
        return (f"{url}: {wanted} is not in the asset cache {cache_dir} "
                f"(fetch it: python tools/fetch_asv_assets.py, needs npm)")
    local = Path(cache_dir) / package.folder / path
    refetch = "re-fetch: python tools/fetch_asv_assets.py --force"
    if not local.is_file():
        return f"{url}: {wanted} in {cache_dir} lacks {path} ({refetch})"
    recorded = fetched.get("files", {}).get(path)
    if recorded != hashlib.sha256(local.read_bytes()).hexdigest():
        return f"{url}: {local} is not the file that was fetched (sha256 differs; {refetch})"
    return package, fetched, local


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
        text = page.read_text(encoding="utf-8")
        comments = [(m.start(), m.end()) for m in re.finditer(r"<!--.*?-->", text, flags=re.S)]

        def rewrite_tag(m: re.Match, page=page) -> str:
            if any(a <= m.start() < b for a, b in comments):
                return m.group(0)
            name = m.group("name").lower()
            attrs = _attrs(m.group("attrs"))
            keys = dict(attrs)
            remote = [(k, v) for k, v in attrs if k in ("src", "href") and v and _REMOTE.match(v)]
            if not remote:
                if name == "script" and keys.get("onerror") == "js_load_failure()":
                    attrs = [(k, "js_load_failure(this)" if k == "onerror"
                              and v == "js_load_failure()" else v) for k, v in attrs]
                    return _render(m.group("name"), attrs, m.group("end"))
                return m.group(0)
            key, url = remote[0]
            if name == "a":  # an outbound link, not something the page loads
                out.replacements.append(Replacement(url, None, note="link: href dropped"))
                attrs = [(k, v) for k, v in attrs if k != "href"]
                if "title" not in keys:
                    attrs.append(("title", url))
                return _render(m.group("name"), attrs, m.group("end"))
            found = _resolve(url, cache_dir)
            if isinstance(found, str):
                problems.append(f"{page.name}: <{name}> {found}")
                return m.group(0)
            package, fetched, local = found
            rel_path = CDN_FILES[url][1]
            # named after the version really fetched (a declared fallback says so in its name)
            folder = f"{package.name}-{fetched.get('version', package.version)}"
            vendored = f"{VENDOR}/{folder}/{rel_path}"
            out.packages[folder] = Path(cache_dir) / package.folder
            href = os.path.relpath(html_dir / vendored, page.parent).replace(os.sep, "/")
            got = f"{fetched.get('name', package.name)}@{fetched.get('version', package.version)}"
            rep = Replacement(url, href, source=f"{got} {rel_path}")
            comment = ""
            integrity = keys.get("integrity")
            new_attrs = []
            for k, v in attrs:
                if k == key:
                    v = href
                elif k == "integrity":
                    if sri_matches(v or "", local.read_bytes()):
                        rep.integrity = "kept"
                    else:
                        rep.integrity = "dropped"
                        continue
                elif k == "onerror" and v == "js_load_failure()":
                    v = "js_load_failure(this)"
                new_attrs.append((k, v))
            if integrity and rep.integrity == "dropped":
                why = (f"the registry had {got}, not {package.name}@{package.version}"
                       if got != f"{package.name}@{package.version}" else
                       package.differs or "the npm package ships another build of this version")
                rep.note = f"integrity dropped: bytes differ from the CDN file ({why})"
                comment = (f"<!-- swinkit offline: {vendored} is {got} {rel_path}; its bytes "
                           f"differ from the CDN file ({why}), so the integrity attribute was "
                           f"dropped -->\n    ")
            elif rep.integrity == "kept":
                rep.note = "integrity kept: bytes match the CDN file"
            out.replacements.append(rep)
            return comment + _render(m.group("name"), new_attrs, m.group("end"))

        new = _TAG.sub(rewrite_tag, text)
        new, n = _REDIRECT.subn(lambda _m: _LOAD_FAILURE_JS, new)
        if n == 0 and re.search(r"""location[^;]*["']error\.html["']""", new):
            problems.append(f"{page.name}: redirects to error.html in a way this rewrite does "
                            "not know (asv's page template changed?): see _REDIRECT in "
                            "swinkit/report/asv_offline.py")
        if new != text:
            out.html[page] = new
    if problems:
        raise OfflineAssetsError(
            f"cannot make {html_dir} work offline; it was left as asv published it "
            f"(its libraries still load from CDNs):\n  " + "\n  ".join(problems))
    for page, new in out.html.items():
        left = remote_references(new)
        left = [r for r in left if r[0] != "a"]
        if left:  # cannot happen unless the rewrite itself is wrong: refuse to write it
            raise OfflineAssetsError(f"{page}: remote references left after rewrite: {left}")
    return out


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
        tmp = Path(tempfile.mkdtemp(prefix=".vendor-", dir=html_dir))
        try:
            for folder, src in todo.packages.items():
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
    for page, text in todo.html.items():
        fd, name = tempfile.mkstemp(prefix=f".{page.name}.", dir=page.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(name, 0o644)
        os.replace(name, page)
    return todo.replacements


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
    p = argparse.ArgumentParser(description="make an `asv publish` folder work offline")
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


if __name__ == "__main__":
    raise SystemExit(main())
