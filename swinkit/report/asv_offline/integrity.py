"""Whether a local copy may keep the page's ``integrity`` attribute, and what the page says if not.

A browser refuses a file whose bytes do not have the hash the attribute names. The attribute is
kept where the local copy is the CDN's file (the check then still protects the page), and
dropped where the npm package ships another build of the same version (or a declared fallback
version), with an HTML comment beside the tag saying why: dropping it silently would hide that
the page no longer loads the exact bytes asv chose.
"""
from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

from swinkit.report.asv_offline.assets import NpmPackage


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


@dataclass(frozen=True)
class Verdict:
    """What becomes of one tag's ``integrity`` attribute."""

    integrity: str     # "kept" (the bytes match) or "dropped" (they differ)
    note: str = ""     # for the terminal
    comment: str = ""  # put before the tag in the page


def judge(value: str | None, data: bytes, package: NpmPackage, got: str, vendored: str,
          rel_path: str) -> Verdict:
    """The verdict on an ``integrity`` attribute (``value``; None when it is bare) for the local
    bytes ``data`` of ``got`` (``name@version`` fetched), served from ``vendored``."""
    if sri_matches(value or "", data):
        return Verdict("kept", "integrity kept: bytes match the CDN file")
    if not value:  # a bare attribute names no hash: nothing to explain
        return Verdict("dropped")
    why = (f"the registry had {got}, not {package.name}@{package.version}"
           if got != f"{package.name}@{package.version}" else
           package.differs or "the npm package ships another build of this version")
    return Verdict("dropped", f"integrity dropped: bytes differ from the CDN file ({why})",
                   f"<!-- swinkit offline: {vendored} is {got} {rel_path}; its bytes differ "
                   f"from the CDN file ({why}), so the integrity attribute was dropped -->\n    ")
