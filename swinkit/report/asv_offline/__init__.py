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

    assets.py        the libraries, their CDN addresses, the cache and finding a file in it
    tags.py          just enough HTML start-tag syntax to find and rewrite references
    integrity.py     keep or drop a tag's ``integrity`` attribute, and the comment saying why
    load_failure.py  the error.html redirect replaced by a banner naming the missing file
    plan.py          the whole rewrite worked out in memory; every problem named at once
    write.py         writing the plan, all or nothing
    cli.py           ``python -m swinkit.report.asv_offline .asv/html`` (rewrite by hand)

The names below are re-exported here so that callers (``tools/suite.py``,
``tools/fetch_asv_assets.py``, the tests) keep importing them from
``swinkit.report.asv_offline``, as before it was split into these modules.
"""
from __future__ import annotations

from swinkit.report.asv_offline.assets import (CDN_FILES, FETCHED, PACKAGE, PACKAGES, VENDOR,
                                               NpmPackage, default_cache_dir, read_fetched)
from swinkit.report.asv_offline.cli import describe, main
from swinkit.report.asv_offline.integrity import sri_matches
from swinkit.report.asv_offline.plan import OfflineAssetsError, Plan, Replacement, plan
from swinkit.report.asv_offline.tags import remote_references
from swinkit.report.asv_offline.write import make_offline

__all__ = ["CDN_FILES", "FETCHED", "PACKAGE", "PACKAGES", "VENDOR", "NpmPackage",
           "OfflineAssetsError", "Plan", "Replacement", "default_cache_dir", "describe", "main",
           "make_offline", "plan", "read_fetched", "remote_references", "sri_matches"]
