"""Just enough HTML tag syntax to find and rewrite asv's remote references.

asv's page template is small and regular, so a start-tag regular expression is enough, and
substituting only the matched tags leaves every other byte of the page as asv wrote it.
Comments are never rewritten: a reference inside one loads nothing.
"""
from __future__ import annotations

import re

TAG = re.compile(r"<(?P<name>[a-zA-Z][a-zA-Z0-9]*)\b(?P<attrs>[^<>]*?)(?P<end>/?)>", re.S)
_ATTR = re.compile(r"""(?P<sp>\s+)(?P<key>[a-zA-Z_:][-a-zA-Z0-9_:.]*)"""
                   r"""(?:\s*=\s*(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<uq>[^\s"'=<>`]+)))?""")
_REMOTE = re.compile(r"^\s*(?:https?:)?//", re.I)
_COMMENT = re.compile(r"<!--.*?-->", re.S)


def attrs(text: str) -> list[tuple[str, str | None]]:
    """(lower-case name, value or None for a bare attribute) of a start tag's attribute text."""
    out = []
    for m in _ATTR.finditer(text):
        value = next((m.group(g) for g in ("dq", "sq", "uq") if m.group(g) is not None), None)
        out.append((m.group("key").lower(), value))
    return out


def render(name: str, attrs: list[tuple[str, str | None]], end: str) -> str:
    """A start tag from its parts, values double-quoted."""
    parts = [name]
    for key, value in attrs:
        if value is None:
            parts.append(key)
        else:
            parts.append(f'{key}="{value.replace(chr(34), "&quot;")}"')
    return "<" + " ".join(parts) + end + ">"


def is_remote(value: str | None) -> bool:
    """Whether an attribute value is an http(s) or protocol-relative address."""
    return bool(value) and bool(_REMOTE.match(value))


def comment_spans(html: str) -> list[tuple[int, int]]:
    """(start, end) of every comment, to leave the tags inside them alone."""
    return [(m.start(), m.end()) for m in _COMMENT.finditer(html)]


def without_comments(html: str) -> str:
    """``html`` with every comment blanked out (same length, so offsets still match)."""
    return _COMMENT.sub(lambda m: " " * len(m.group(0)), html)


def remote_references(html: str) -> list[tuple[str, str, str]]:
    """Every (tag, attribute, address) in ``html`` whose src or href is an http(s) address."""
    found = []
    for m in TAG.finditer(without_comments(html)):
        for key, value in attrs(m.group("attrs")):
            if key in ("src", "href") and is_remote(value):
                found.append((m.group("name").lower(), key, value))
    return found
