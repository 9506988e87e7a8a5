"""What the page does when a library fails to load, once the libraries are local copies.

asv's page sends the browser to ``error.html`` ("no internet connection") from
``js_load_failure()``. Offline, a failure can only be a missing local file, so the function is
replaced by one that shows a banner naming the file, and each ``onerror`` passes the element
(``js_load_failure(this)``) so the banner can name it.
"""
from __future__ import annotations

import re

ONERROR = "js_load_failure()"
ONERROR_NAMED = "js_load_failure(this)"

_REDIRECT = re.compile(r"function\s+js_load_failure\s*\(\s*\)\s*\{\s*window\.location\s*=\s*"
                       r"""["']error\.html["']\s*;?\s*\}""")
_ANY_REDIRECT = re.compile(r"""location[^;]*["']error\.html["']""")
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


def name_the_element(attrs: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """The attributes with asv's ``onerror`` handler passing the failed element."""
    return [(k, ONERROR_NAMED if k == "onerror" and v == ONERROR else v) for k, v in attrs]


def replace_redirect(html: str) -> tuple[str, str | None]:
    """(new text, problem): asv's redirect to error.html replaced by the banner; the problem
    says so when the page still redirects in a way this does not know (a changed template),
    since the offline page would then still claim there is no internet connection."""
    new, n = _REDIRECT.subn(lambda _m: _LOAD_FAILURE_JS, html)
    if n == 0 and _ANY_REDIRECT.search(new):
        return new, ("redirects to error.html in a way this rewrite does not know (asv's page "
                     "template changed?): see _REDIRECT in "
                     "swinkit/report/asv_offline/load_failure.py")
    return new, None
