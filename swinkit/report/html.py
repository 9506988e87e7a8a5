"""HTML building blocks for the report page: escaping, number cells, tables, embedded figures.

Every string that reaches the page goes through ``esc`` (``html.escape``, quotes included), so
a preset name, a note or a remedy's text cannot break the markup. Figures become ``data:`` URIs
and the style sheet is inline: the page is one file that opens offline.
"""
from __future__ import annotations

import base64
import html
from collections.abc import Iterable, Sequence

# Table beside figure from about 58 rem (the numbers take the spare width), one above the other
# below; a table wider than its column scrolls inside its own box (.scroll), an image never
# exceeds its column.
CSS = """
*{box-sizing:border-box}
body{margin:0;color:#1d232a;background:#fff;
 font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
main{max-width:78rem;margin:0 auto;padding:1rem 1.25rem 3rem}
h1{font-size:1.55rem;margin:.6rem 0 .3rem}
h2{font-size:1.2rem;margin:2rem 0 .5rem;padding-top:.6rem;border-top:1px solid #e3e6ea}
p,li,dd{overflow-wrap:anywhere}
.lead{font-size:1.05rem;max-width:60rem}
nav{display:flex;flex-wrap:wrap;gap:.3rem .9rem;font-size:.9rem;margin:.6rem 0}
nav a{color:#2457a6;text-decoration:none}
dl.context{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:.15rem 1rem;
 margin:.5rem 0;font-size:.92rem}
dl.context dt{color:#5b6570}
dl.context dd{margin:0}
.pair{display:flex;flex-wrap:wrap;gap:1rem 2rem;align-items:flex-start}
.pair>*{min-width:0;flex:3 1 26rem}
.pair>*+*{flex:1 1 30rem;max-width:42rem}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:.88rem;font-variant-numeric:tabular-nums;margin:.2rem 0}
caption{caption-side:top;text-align:left;color:#5b6570;font-size:.85rem;padding:.2rem 0}
th,td{padding:.28rem .5rem;border-bottom:1px solid #e3e6ea;text-align:right;white-space:nowrap}
th{background:#f3f5f7;font-weight:600;white-space:normal;vertical-align:bottom}
th:first-child,td:first-child{text-align:left}
td.text,th.text{text-align:left;white-space:normal;min-width:14rem}
td.label,th.label{text-align:left}
tr.warn td{background:#fff6e0}
figure{margin:0}
figure img{display:block;max-width:100%;height:auto;border:1px solid #e3e6ea}
figcaption{font-size:.85rem;color:#5b6570;margin-top:.3rem}
.glossary{font-size:.85rem;color:#3c4650}
.glossary dt{font-weight:600;display:inline}
.glossary dd{display:inline;margin:0}
.glossary div{margin:.1rem 0}
details{margin-top:2rem}
summary{cursor:pointer;font-weight:600}
pre{overflow-x:auto;background:#f5f6f8;padding:.8rem;font-size:.78rem;line-height:1.35}
"""


def esc(value) -> str:
    """``value`` as text safe in element content and in quoted attributes."""
    return html.escape("" if value is None else str(value), quote=True)


def num(value, fmt: str = "{:.4f}", none: str = "-") -> str:
    """A number formatted for a cell; ``none`` where it was not measured."""
    return none if value is None else fmt.format(value)


def table(head: Sequence[str], rows: Iterable[Sequence], caption: str | None = None,
          text_cols: Sequence[int] = (), label_cols: Sequence[int] = (),
          warn_rows: Sequence[int] = ()) -> str:
    """A ``<table>`` in its own horizontally scrolling box.

    Args:
        head: column titles.
        rows: one sequence of cell values per row (each escaped here).
        caption: what the table shows, above it.
        text_cols: column indexes holding prose (left-aligned and wrapped).
        label_cols: column indexes holding names (left-aligned); the first always is.
        warn_rows: row indexes to highlight (an unstable measurement, say).
    """
    def cls(i):
        return (' class="text"' if i in text_cols
                else ' class="label"' if i in label_cols else "")

    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    ths = "".join(f'<th scope="col"{cls(i)}>{esc(h)}</th>' for i, h in enumerate(head))
    body = []
    for n, row in enumerate(rows):
        tds = "".join(f"<td{cls(i)}>{esc(c)}</td>" for i, c in enumerate(row))
        body.append(f'<tr class="warn">{tds}</tr>' if n in warn_rows else f"<tr>{tds}</tr>")
    return (f'<div class="scroll"><table>{cap}<thead><tr>{ths}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def figure(png: bytes | None, alt: str, caption: str = "") -> str:
    """An embedded PNG (a ``data:`` URI) with its caption; empty where there is no figure."""
    if not png:
        return ""
    data = base64.b64encode(png).decode("ascii")
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f'<figure><img alt="{esc(alt)}" src="data:image/png;base64,{data}">{cap}</figure>'


def pair(left: str, right: str = "") -> str:
    """Numbers and the figure that shows them, side by side where the page is wide enough."""
    return f'<div class="pair"><div>{left}</div>{f"<div>{right}</div>" if right else ""}</div>'


def section(anchor: str, title: str, body: str) -> str:
    """A titled part of the page that the navigation links to (``#anchor``)."""
    return f'<section id="{esc(anchor)}"><h2>{esc(title)}</h2>{body}</section>'


def para(text: str, cls: str = "") -> str:
    """A paragraph of (escaped) text."""
    attr = f' class="{esc(cls)}"' if cls else ""
    return f"<p{attr}>{esc(text)}</p>"


def bullets(items: Iterable[str]) -> str:
    """An unordered list of (escaped) text; empty for no items."""
    lis = "".join(f"<li>{esc(i)}</li>" for i in items)
    return f"<ul>{lis}</ul>" if lis else ""


def glossary(meanings: dict[str, str]) -> str:
    """Term: meaning lines under a table (what each column measures)."""
    rows = "".join(f"<div><dt>{esc(k)}</dt>: <dd>{esc(v)}</dd></div>" for k, v in meanings.items())
    return f'<dl class="glossary">{rows}</dl>'


def document(title: str, body: str) -> str:
    """The whole page: inline style, no script, nothing fetched."""
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head>"
            f"<body><main>{body}</main></body></html>\n")
