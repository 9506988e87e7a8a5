"""Which libraries asv's page loads, where their local copies are cached, and finding one.

The list is asv's page template (asv 0.6.x) read by hand: every CDN address it names and the
npm package file that replaces it. ``tools/fetch_asv_assets.py`` fills the cache from this list
(it needs npm); the rewrite only reads the cache, and trusts a file only when its bytes still
have the sha256 recorded when it was fetched.
"""
from __future__ import annotations

import hashlib
import json
import os
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


def resolve(url: str, cache_dir: Path) -> tuple[NpmPackage, dict, Path] | str:
    """(package, fetched record, cached file) for a CDN address, or why there is none.

    The reason is a sentence for the user (which command fills or repairs the cache), because
    the caller collects every missing asset before refusing to write anything.
    """
    if url not in CDN_FILES:
        return (f"{url}: no local copy is known for this address (asv's page template changed?"
                " add it to CDN_FILES and PACKAGES in swinkit/report/asv_offline/assets.py)")
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


def fetched_label(package: NpmPackage, fetched: dict) -> str:
    """``name@version`` of what was really fetched (a declared fallback version says so)."""
    return f"{fetched.get('name', package.name)}@{fetched.get('version', package.version)}"


def vendor_folder(package: NpmPackage, fetched: dict) -> str:
    """The folder under ``vendor/``: named after the version really fetched, so a fallback
    version shows in the page's paths too."""
    return f"{package.name}-{fetched.get('version', package.version)}"
