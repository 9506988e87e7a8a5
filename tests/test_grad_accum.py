"""Gradient accumulation: communication per image by K against the ideal 1/K, from hand-made
rows, from asv's stored GradAccum tracks, and from the engine comparison's runs."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from swinkit.attribution.grad_accum import summarize
from swinkit.report.text import grad_accum_lines

ROOT = Path(__file__).resolve().parents[1]


def _row(k, comm, rounds=1, engine="ddp", ws=2, step=None):
    return {"engine": engine, "world_size": ws, "grad_accum": k, "comm_per_image_s": comm,
            "comm_rounds_per_step": rounds, "step_s": step}


def test_a_fall_is_measured_against_the_ideal_one_over_k():
    """0.010, 0.006, 0.004 s per image at K = 1, 2, 4: ratios 0.6 and 0.4 against the ideal 0.5
    and 0.25; the saving is (1 - 0.6) / (1 - 1/2) = 0.8 and (1 - 0.4) / (1 - 1/4) = 0.8 of
    the ideal one."""
    [group] = summarize([_row(1, 0.010), _row(2, 0.006), _row(4, 0.004)])
    by_k = {r["grad_accum"]: r for r in group["by_k"]}
    assert by_k[1]["ratio"] == pytest.approx(1.0) and by_k[1]["share_of_ideal_saving"] is None
    assert by_k[2]["ratio"] == pytest.approx(0.6) and by_k[2]["ideal_ratio"] == 0.5
    assert by_k[4]["ratio"] == pytest.approx(0.4) and by_k[4]["ideal_ratio"] == 0.25
    assert by_k[2]["share_of_ideal_saving"] == pytest.approx(0.8)
    assert by_k[4]["share_of_ideal_saving"] == pytest.approx(0.8)
    assert group["falls"] is True and group["one_round_per_step"] is True
    assert group["verdict"].startswith("falls with K: 0.40 of K=1 at K=4 (ideal 1/4 = 0.25), "
                                       "80 % of the saving")
    assert "one gradient communication per optimizer step at every K" in group["verdict"]


def test_comm_per_image_that_does_not_fall_is_reported_as_such():
    """ZeRO-2-like: gradients move every micro-step, so comm per image stays (0.010 -> 0.0098,
    -2 %, inside the 5 % tolerance) and then grows (0.012 at K=4: ratio 1.2, a saving of
    (1 - 1.2) / 0.75 = -0.267 of the ideal)."""
    [group] = summarize([_row(1, 0.010, 1, "zero2"), _row(2, 0.0098, 2, "zero2"),
                         _row(4, 0.012, 4, "zero2")])
    assert group["falls"] is False and group["one_round_per_step"] is False
    assert group["by_k"][2]["share_of_ideal_saving"] == pytest.approx(-0.2667, abs=1e-4)
    assert group["verdict"].startswith("does not fall with K: from K=1 to K=2 it changes by -2 %")
    assert "1.20 of K=1 at K=4" in group["verdict"]
    assert "gradients move in 4 micro-steps per optimizer step at K=4, not once" in group["verdict"]
    # a rise is no fall either, and is named where it happens
    [rise] = summarize([_row(1, 0.010), _row(2, 0.005), _row(4, 0.0055)])
    assert rise["falls"] is False
    assert "from K=2 to K=4 it changes by +10 %" in rise["verdict"]


def test_what_cannot_be_judged_says_why():
    groups = summarize([_row(1, 0.01, ws=1), _row(1, 0.01, ws=2, engine="zero1"),   # one K only
                        _row(2, 0.01, ws=4), _row(4, 0.005, ws=4),                   # no K=1
                        _row(1, 0.0, ws=8), _row(2, 0.0, ws=8)])                     # nothing sent
    assert [(g["world_size"], g["falls"]) for g in groups] == [(4, None), (8, None)]
    assert groups[0]["verdict"] == "no K=1 measurement to compare with"
    assert groups[1]["verdict"] == "no exposed communication at K=1: nothing to fall"


def test_summary_text_lists_each_k_and_the_verdict():
    summary = summarize([_row(1, 0.010, step=0.5), _row(2, 0.006, step=0.9),
                         _row(1, 0.010, ws=1), _row(2, 0.011, ws=1)])
    text = "\n".join(grad_accum_lines(summary))
    assert "ddp          2  2     0.00600   0.60   0.50            1   0.9000" in text
    assert "ddp N=2: falls with K: 0.60 of K=1 at K=2 (ideal 1/2 = 0.50), 80 %" in text
    assert "ddp N=1: does not fall with K: from K=1 to K=2 it changes by +10 %" in text
    assert grad_accum_lines(None) == [] and grad_accum_lines([]) == []


# ----------------------------------------------------------------- asv's stored results

COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a",
           "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat",
           "samples", "profile"]
WS = ["1", "2", "4", "8"]
STEPS = ["1", "2", "4"]
MiB = 2**20


def _entry(values, params):
    """One benchmark in asv's results format: a value per parameter combination (product
    order), None where it was skipped."""
    n = len(values)
    return [values, params, "v", 0, 1.0, [None] * n, [None] * n, values, values, [1] * n,
            [7] * n, [[v] * 7 if v is not None else None for v in values]]


def _results_file(tmp_path, grad_accum: bool) -> Path:
    """A results folder with the DDP benchmarks the report needs at world sizes 1 and 2 and,
    if asked, bench_engines.GradAccum at world sizes 1 and 2 (4 and 8 skipped: None)."""
    from swinkit.measure.phases import BLAME_KEYS
    blame = [0.1 if w in ("1", "2") else None for w in WS for _ in BLAME_KEYS]
    results = {
        "bench_ddp.Iteration.track_iteration": _entry([0.7, 0.7, None, None], [WS]),
        "bench_ddp.Blame.track_seconds": _entry(blame, [WS, [f"'{c}'" for c in BLAME_KEYS]])}
    if grad_accum:
        def by_ws_k(one, two):   # product order: (1,1) (1,2) (1,4) (2,1) ... (8,4)
            return _entry(list(one) + list(two) + [None] * 6, [WS, STEPS])
        results.update({
            # N=1: flat (nothing crosses a wire); N=2: 0.020 -> 0.011 -> 0.006
            "bench_engines.GradAccum.track_comm_per_image": by_ws_k([0.001, 0.001, 0.001],
                                                                    [0.020, 0.011, 0.006]),
            "bench_engines.GradAccum.track_comm_rounds": by_ws_k([1, 1, 1], [1, 1, 1]),
            "bench_engines.GradAccum.track_step": by_ws_k([0.4, 0.8, 1.6], [0.5, 0.9, 1.7]),
            "bench_engines.GradAccum.track_wire_bytes_per_image": by_ws_k(
                [0, 0, 0], [1.0 * MiB, 0.5 * MiB, 0.25 * MiB])})
    folder = tmp_path / "results" / "box"
    folder.mkdir(parents=True)
    (folder / "machine.json").write_text("{}")
    (folder / "abcd1234-existing-py.json").write_text(json.dumps(
        {"commit_hash": "abcd1234" * 5, "date": 1, "env_name": "x", "version": 2,
         "result_columns": COLUMNS, "params": {}, "requirements": {}, "env_vars": {},
         "results": results}))
    return tmp_path / "results"


def test_stored_grad_accum_tracks_become_the_reports_section(tmp_path):
    """At N=2 the ratios are 0.011 / 0.020 = 0.55 and 0.006 / 0.020 = 0.30, the saving
    (1 - 0.30) / 0.75 = 93 % of the ideal; at N=1 comm per image is flat: it does not fall."""
    from swinkit.attribution.analysis import analyse
    from swinkit.attribution.inputs import from_asv
    inputs = from_asv(_results_file(tmp_path, grad_accum=True))
    assert [(r["world_size"], r["grad_accum"]) for r in inputs.grad_accum] == [
        (1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (2, 4)]
    report = analyse(inputs)
    one, two = report["grad_accum"]
    assert (one["world_size"], one["falls"]) == (1, False)
    assert (two["world_size"], two["falls"]) == (2, True)
    assert [r["ratio"] for r in two["by_k"]] == pytest.approx([1.0, 0.55, 0.30])
    assert [r["comm_rounds_per_step"] for r in two["by_k"]] == [1, 1, 1]
    assert [r["step_s"] for r in two["by_k"]] == pytest.approx([0.5, 0.9, 1.7])
    assert two["by_k"][2]["wire_bytes_per_image"] == 0.25 * MiB
    assert "93 % of the saving" in two["verdict"]
    assert "no bytes cross a wire (one rank)" in one["verdict"]   # 0 wire bytes at N=1
    assert "no bytes cross a wire" not in two["verdict"]


def test_the_report_shows_the_section_only_where_stored(tmp_path):
    """Text, JSON and HTML carry the section with GradAccum results; without them JSON has
    null (as loader_headroom has) and text and HTML say nothing of accumulation."""
    from swinkit.report.page import write_html
    for stored in (True, False):
        where = tmp_path / str(stored)
        proc = subprocess.run([sys.executable, str(ROOT / "tools" / "attribute.py"), "--results",
                               str(_results_file(where, stored)), "--json", str(where / "a.json")],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        report = json.loads((where / "a.json").read_text())
        assert "grad_accum" in report
        assert ("gradient accumulation" in proc.stdout) is stored
        assert ("ddp N=2: falls with K" in proc.stdout) is stored
        if stored:
            assert report["grad_accum"][1]["falls"] is True
            page = write_html(report, where / "a.html")
            assert "ddp N=1: does not fall with K" in page[0].read_text()
            assert (where / "a-grad_accum.png").exists()
        else:
            assert report["grad_accum"] is None


# ----------------------------------------------------------------- the engine comparison

def _result(step, comm=0.01, k=1):
    eng = {"step_s": step, "grad_accum": k, "step_phases_s": {"forward": step},
           "traffic": {"message_bytes": 1, "wire_bytes_per_rank": 1, "comm_rounds_per_step": 1},
           "comm_per_image_s": comm, "wire_bytes_per_image": 0.5, "peak_memory_bytes": None,
           "model_state": {}}
    return {"engine": eng}


def test_compare_rows_one_row_per_engine_world_size_and_k():
    """Efficiency compares the same engine at the same K: 0.4 / 0.5 = 0.8 at K=2, not the
    K=1 run's 0.2 / 0.5."""
    from swinkit.report.engine_compare import compare_table
    from swinkit.runs.engine_run import compare_rows
    runs = {"results": {("ddp", 1, 1): _result(0.2), ("ddp", 2, 1): _result(0.25),
                        ("ddp", 1, 2): _result(0.4, k=2), ("ddp", 2, 2): _result(0.5, k=2)},
            "skipped": {("zero2", 2, 2): "DeepSpeed not installed"}, "failed": {}}
    rows = compare_rows(runs)
    assert [(r["engine"], r["world_size"], r["grad_accum"]) for r in rows] == [
        ("ddp", 1, 1), ("ddp", 1, 2), ("ddp", 2, 1), ("ddp", 2, 2)]
    assert rows[3]["efficiency"] == pytest.approx(0.8)
    assert rows[2]["efficiency"] == pytest.approx(0.8)   # 0.2 / 0.25
    text = compare_table(rows, runs["skipped"])
    assert "skipped: zero2 at world size 2, K=2: DeepSpeed not installed" in text


def test_every_k_is_validated_before_any_run(monkeypatch):
    """A K that cannot run fails before the K=1 runs launch, not after them."""
    from swinkit.runs import engine_run
    from swinkit.runs.ddp_run import DDPRunSpec
    launched = []
    monkeypatch.setattr(engine_run, "run_engine", lambda spec, **kw: launched.append(spec))
    with pytest.raises(ValueError, match="grad_accum must be an integer >= 1, got 0"):
        engine_run.run_engines_by_k(["ddp"], [1], DDPRunSpec(preset="test"), [1, 0],
                                    progress=lambda *a: None)
    assert launched == []


@pytest.mark.slow
def test_engine_comparison_runs_each_k(tmp_path, data_root, monkeypatch, no_orphans):
    """A real DDP run at world size 1 and K = 1, 2: one row per K, one gradient communication
    per optimizer step at K=2, and the summary in text and JSON."""
    monkeypatch.setenv("SWINKIT_DATA_ROOT", str(data_root))
    out = tmp_path / "e.json"
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "attribute.py"), "--run",
                           "--preset", "test", "--engine", "ddp", "--world-sizes", "1",
                           "--grad-accum", "1,2", "--iters", "2", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [(r["world_size"], r["grad_accum"]) for r in report["rows"]] == [(1, 1), (1, 2)]
    assert report["rows"][1]["comm_rounds_per_step"] == 1
    assert set(report["runs"]) == {"ddp@1", "ddp@1@K2"}
    [group] = report["grad_accum"]
    assert [r["grad_accum"] for r in group["by_k"]] == [1, 2]
    assert f"ddp N=1: {group['verdict']}" in proc.stdout
