"""The HTML report as a page, built from the recorded asv result (tests/data/asv_results).

The report comes from the recorded file through the same two calls ``tools/attribute.py``
makes (``from_asv`` then ``analyse``): nothing is launched. What the page must hold is stated
from the recording itself: world sizes 1 and 2 (4 and 8 were skipped on the 2-core machine
that made it), one verdict on lost time (N=2), the medians of the stored samples.

The layout check renders the page in headless Chromium at 1280 x 800 and reads back, through a
script added to a copy of the page, how wide the document is and how many tables have a size.
It skips, saying so, where ``chromium`` is not on PATH (Debian: ``apt-get install chromium``).
"""
from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from swinkit.attribution.analysis import analyse
from swinkit.attribution.inputs import from_asv
from swinkit.report.page import render, write_html

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "tests" / "data" / "asv_results" / "results"
RESULT_FILE = RESULTS / "vm" / "5398f7fd-existing-py_work_main_.venv_bin_python.json"
ITERATION = "bench_ddp.Iteration.track_iteration"
RECORDED_SIZES = ["1", "2"]          # what the recording ran (README of tests/data/asv_results)
PAGE_WIDTH = 1280
HOSTILE = '<script>alert("x")</script><img src="http://example.invalid/x.png">&'


class Page(HTMLParser):
    """Tables (head and body rows as cell text), every src/href, titles and tags seen."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tables, self.links, self.tags, self.title = [], [], [], ""
        self._row = self._cell = None
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.links += [v for k, v in attrs if k in ("src", "href")]
        if tag == "table":
            self.tables.append({"head": [], "rows": []})
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = ""
        self._in_title = tag == "title"

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._row is not None:
            self._row.append((tag, self._cell.strip()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            kind = "head" if all(t == "th" for t, _ in self._row) else "rows"
            self.tables[-1][kind].append([text for _, text in self._row])
            self._row = None
        self._in_title = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data
        if self._in_title:
            self.title += data


def _parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    page.close()
    return page


def _table(page: Page, first_header: str, second_header: str) -> dict:
    """The one table whose header row starts with these two titles."""
    found = [t for t in page.tables
             if t["head"] and t["head"][0][:2] == [first_header, second_header]]
    assert len(found) == 1, [t["head"] for t in page.tables]
    return found[0]


@pytest.fixture(scope="module")
def report() -> dict:
    return analyse(from_asv(RESULTS))


@pytest.fixture(scope="module")
def written(report, tmp_path_factory) -> list[Path]:
    return write_html(report, tmp_path_factory.mktemp("page") / "attribution.html")


@pytest.fixture(scope="module")
def page(written) -> Page:
    return _parse(written[0].read_text())


def _recorded_median(ws: str) -> float:
    """The median of the stored iteration samples at one world size, read from the raw file."""
    raw = json.loads(RESULT_FILE.read_text())
    row = raw["results"][ITERATION]
    cols = raw["result_columns"]
    index = row[cols.index("params")][0].index(ws)
    return statistics.median(row[cols.index("samples")][index])


def test_scaling_table_has_one_row_per_recorded_world_size(page):
    scaling = _table(page, "N", "iteration s")
    assert scaling["head"][0][:4] == ["N", "iteration s", "speedup", "efficiency"]
    assert [row[0] for row in scaling["rows"]] == RECORDED_SIZES
    for row, ws in zip(scaling["rows"], RECORDED_SIZES):
        assert float(row[1]) == pytest.approx(_recorded_median(ws), abs=1e-4)
    assert scaling["rows"][0][3] == "1.00"   # efficiency at N=1 is 1 by definition


def test_blame_and_loss_split_have_a_column_per_world_size(page):
    blame = _table(page, "cause", "N=1")
    assert blame["head"][0] == ["cause", "N=1", "N=2"]
    causes = [row[0] for row in blame["rows"]]
    assert causes == ["data_wait", "forward", "backward", "exposed_comm", "optimizer", "other",
                      "unattributed", "residual", "iteration"]
    split = _table(page, "cause", "N=2")           # lost time exists only beyond N=1
    assert split["head"][0] == ["cause", "N=2"]
    shares = [float(row[1]) for row in split["rows"]]
    assert sum(shares) == pytest.approx(100.0, abs=0.5)
    verdicts = _table(page, "N", "lost s")
    assert [row[0] for row in verdicts["rows"]] == ["2"]


def test_straggler_prediction_and_recommendations_tables(page, report):
    assert [row[0] for row in _table(page, "N", "late rank")["rows"]] == ["2"]
    prediction = _table(page, "N", "predicted s")
    assert [row[0] for row in prediction["rows"]] == RECORDED_SIZES
    assert "measured s" in prediction["head"][0] and "accuracy %" in prediction["head"][0]
    recs = _table(page, "#", "component")
    assert [row[0] for row in recs["rows"]] == [str(i) for i in
                                                range(1, len(report["recommendations"]) + 1)]
    curves = _table(page, "N", "measured")         # the efficiency figure's points
    assert any(h.startswith("thesis: ") for h in curves["head"][0])
    assert [row[0] for row in curves["rows"]][:2] == RECORDED_SIZES


def test_self_contained_figures_beside_numbers_and_the_text_kept(written, page):
    text = written[0].read_text()
    assert all(link.startswith(("data:image/png;base64,", "#")) for link in page.links), page.links
    assert sum(link.startswith("data:") for link in page.links) == 3   # phases, efficiency, loss
    assert "script" not in page.tags and "link" not in page.tags
    assert re.search(r'<div class="pair"><div><div class="scroll"><table>.*?</table></div>'
                     r"</div><div><figure><img", text)
    assert "<details" in text and "swinkit attribution — preset cpu" in text
    assert "preset cpu" in page.title and [p.name for p in written[1:]] == [
        "attribution-phases.png", "attribution-efficiency.png", "attribution-loss_split.png"]


def test_every_string_is_escaped(report):
    hostile = dict(report, preset=HOSTILE, notes=[HOSTILE], machine=HOSTILE,
                   recommendations=[dict(report["recommendations"][0], what=HOSTILE,
                                         why=HOSTILE, component=HOSTILE)])
    text = render(hostile, {})
    page = _parse(text)
    assert "<script" not in text and "example.invalid/x.png\">" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text
    assert "script" not in page.tags and page.links == [l for l in page.links if l.startswith("#")]
    assert HOSTILE in page.title


def _with_everything(report: dict) -> dict:
    """The recorded report plus every optional section: what-ifs (one judged after a run, one
    as read back from asv), gradient accumulation, a comparison commit, an injection, a note."""
    from swinkit.attribution.grad_accum import summarize
    from swinkit.attribution.whatif import judge
    phases = {"forward": 0.5, "backward": 0.6}
    ran = judge("bf16_hook", "bf16 gradient compression", {}, 2, 1.50, 1.55, 1.62, 0.01,
                1.40, 1.45, phases, phases)
    stored = {"name": "accum_2", "world_size": 2, "predicted_iter_s": 1.3,
              "measured_iter_s": 1.6, "prediction_error": -0.19, "accuracy_pct": 81.0,
              "efficiency_before": 0.86, "efficiency_after": 0.88}
    accum = summarize([{"engine": "ddp", "world_size": 2, "grad_accum": k,
                        "comm_per_image_s": 0.02 / k, "comm_rounds_per_step": 1,
                        "step_s": 0.5 * k, "wire_bytes_per_image": 2**20 / k} for k in (1, 2, 4)])
    growth = {c: 0.01 for c in report["runs"][0]["components_s"]}
    return dict(report, what_if=[ran, stored], what_if_rank_correlation={"2": 1.0},
                grad_accum=accum, injection={"data_ms": 40, "ranks": [1]},
                against={"commit": "0123abcd", "per_world_size": {
                    "2": {"iter_change_s": 0.07, "growth_s": growth, "moved_most": "forward"}}},
                notes=["x" * 600])   # one unbroken word, wider than any page


def test_optional_sections_render_where_the_report_has_them(report, tmp_path):
    path = write_html(_with_everything(report), tmp_path / "a.html")[0]
    page = _parse(path.read_text())
    what_if = _table(page, "remedy", "N")
    assert [row[0] for row in what_if["rows"]] == ["bf16_hook", "accum_2"]
    assert [row[0] for row in _table(page, "engine", "N")["rows"]] == ["ddp"] * 3  # K = 1, 2, 4
    assert [row[2] for row in _table(page, "N", "iteration change s")["rows"]] == ["forward"]
    assert sum(link.startswith("data:") for link in page.links) == 4   # + grad_accum.png
    assert "data_ms=40 on ranks 1" in path.read_text()
    for anchor in ("#what-if", "#grad-accum", "#against", "#notes", "#text"):
        assert anchor in page.links


# ------------------------------------------------------------------ rendered in Chromium

PROBE = """<script>
window.addEventListener("load", () => {
  for (const d of document.querySelectorAll("details")) d.open = true;
  const tables = [...document.querySelectorAll("table")];
  const shown = tables.filter(t => t.offsetWidth > 0 && t.offsetHeight > 0).length;
  const imgs = [...document.images].filter(i => i.naturalWidth > 0).length;
  document.title = `width=${document.documentElement.scrollWidth} tables=${tables.length}` +
                   ` shown=${shown} images=${imgs}`;
});
</script>"""


def _measure(page: Path, tmp_path: Path) -> dict[str, int]:
    """Load a copy of ``page`` with the probe in headless Chromium at 1280 x 800."""
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    proc = subprocess.run(
        ["chromium", "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
         f"--window-size={PAGE_WIDTH},800", "--virtual-time-budget=5000", "--dump-dom",
         probe.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    title = re.search(r"<title>(.*?)</title>", proc.stdout).group(1)
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", title)}


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="chromium is not on PATH (Debian: apt-get install chromium); "
                           "the page's layout in a browser is not checked")
def test_nothing_runs_off_a_1280_px_page_in_chromium(report, tmp_path):
    """The widest page there is (every optional section, a 600-character word) fits 1280 px:
    wide tables scroll inside their own box, images shrink to their column."""
    path = write_html(_with_everything(report), tmp_path / "page" / "a.html")[0]
    seen = _measure(path, tmp_path)
    assert seen["width"] <= PAGE_WIDTH, seen
    assert seen["tables"] == seen["shown"] == len(_parse(path.read_text()).tables), seen
    assert seen["tables"] >= 12 and seen["images"] == 4, seen
