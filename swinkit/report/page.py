"""The attribution report as one self-contained HTML page: the run's context, its numbers as
tables, each figure beside the numbers it shows, the plain text report folded at the end.

One file that opens offline: the style sheet is inline, the figures are ``data:`` URIs, there is
no script and nothing remote. The PNGs are also written beside it for use elsewhere. The page
reads the same report dict as ``text_report`` (``swinkit.attribution.analysis.analyse``).
"""
from __future__ import annotations

from pathlib import Path

from swinkit.result_files import write_text_atomic
from swinkit.attribution.validation import validation_status_line
from swinkit.report import html_advice, html_run, validation
from swinkit.report.figures import figures
from swinkit.report.html import document, esc, para, section
from swinkit.report.text import text_report

HEADING = "Where the scaling goes: UperNet + SwinV2 under PyTorch DDP"

# The page's sections in reading order: (anchor, title, builder(report, pngs)). A builder
# returns '' when the report has nothing for its section, which is then left out.
SECTIONS = (
    ("scaling", "Scaling", html_run.scaling),
    ("blame", "Blame: where each iteration goes", html_run.blame),
    ("loss", "The lost time and its split", html_run.loss),
    ("straggler", "Straggler", lambda r, _: html_run.straggler(r)),
    ("prediction", "Prediction from the components", lambda r, _: html_run.prediction(r)),
    ("recommendations", "Recommendations", lambda r, _: html_advice.recommendations(r)),
    ("what-if", "What-ifs", lambda r, _: html_advice.what_if(r)),
    ("grad-accum", "Gradient accumulation", html_advice.grad_accum),
    ("loader", "Loader headroom", lambda r, _: html_advice.loader(r)),
    ("against", "Against another commit", lambda r, _: html_advice.against(r)),
    ("validation", "How far this blame was checked here",
     lambda r, _: _validation(r) if "validation" in r else ""),
    ("notes", "Notes", lambda r, _: html_advice.notes(r)),
)


def _validation(r: dict) -> str:
    """The ground-truth matrix of ``swinkit validate`` on this machine and commit, or what
    to run to get one."""
    v = r["validation"]
    return validation.html_section(v) if v else para(validation_status_line(None), "lead")


def write_html(r: dict, path: str | Path) -> list[Path]:
    """The page at ``path`` and its figures beside it (``<stem>-<figure>.png``).

    Returns:
        The page's path first, then the PNGs'.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pngs = figures(r)
    written = []
    for name, data in pngs.items():
        target = path.with_name(f"{path.stem}-{name}")
        target.write_bytes(data)
        written.append(target)
    write_text_atomic(path, render(r, pngs))
    return [path, *written]


def render(r: dict, pngs: dict[str, bytes]) -> str:
    """The page's HTML from the report dict and its figures (PNG bytes by file name)."""
    parts = [(anchor, title, build(r, pngs)) for anchor, title, build in SECTIONS]
    parts = [(anchor, title, body) for anchor, title, body in parts if body]
    links = [(anchor, title) for anchor, title, _ in parts] + [("text", "Plain text")]
    nav = "<nav>" + "".join(f'<a href="#{esc(a)}">{esc(t)}</a>' for a, t in links) + "</nav>"
    header = (f"<header><h1>{esc(HEADING)}</h1>{html_run.context(r)}"
              f"{html_run.headline(r)}{nav}</header>")
    body = "".join(section(anchor, title, html) for anchor, title, html in parts)
    plain = (f'<details id="text"><summary>The report as plain text</summary>'
             f"<pre>{esc(text_report(r))}</pre></details>")
    return document(_title(r), header + body + plain)


def _title(r: dict) -> str:
    sizes = r.get("world_sizes") or [row["world_size"] for row in r.get("runs", [])]
    return (f"swinkit attribution: preset {r.get('preset')}, N = "
            f"{', '.join(map(str, sizes))}")
