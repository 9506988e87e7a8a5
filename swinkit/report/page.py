"""The attribution report as one self-contained HTML page (figures embedded, nothing remote)."""
from __future__ import annotations

import base64
import html
from pathlib import Path

from swinkit.files import write_text_atomic
from swinkit.report.figures import figures
from swinkit.report.text import text_report


def write_html(r: dict, path: str | Path) -> list[Path]:
    """One self-contained HTML file (figures embedded, no CDN) plus the PNGs beside it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pngs = figures(r)
    written = []
    for name, data in pngs.items():
        target = path.with_name(f"{path.stem}-{name}")
        target.write_bytes(data)
        written.append(target)
    imgs = "\n".join(f'<h2>{html.escape(n[:-4].replace("_", " "))}</h2><img alt="{n}" '
                     f'src="data:image/png;base64,{base64.b64encode(d).decode()}">'
                     for n, d in pngs.items())
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>swinkit attribution"
            f"</title><style>body{{font-family:sans-serif;max-width:60em;margin:auto}}"
            f"pre{{background:#f4f4f4;padding:1em}}</style></head><body>"
            f"<h1>swinkit: where the scaling goes</h1><pre>{html.escape(text_report(r))}</pre>"
            f"{imgs}</body></html>")
    write_text_atomic(path, page)
    return [path, *written]
