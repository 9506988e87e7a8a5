"""tools/attribute.py on stored asv results: schema, bad input and exit codes."""
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from swinkit.measure.phases import BLAME_KEYS

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a",
           "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat",
           "samples", "profile"]
WS = ["1", "2", "4", "8"]


def _entry(values, params, q=None):
    n = len(values)
    return [values, params, "v", 0, 1.0, [None] * n, [None] * n,
            [v * 0.98 if v else None for v in values] if q else [None] * n,
            [v * 1.02 if v else None for v in values] if q else [None] * n,
            [1] * n, [7] * n, [[v] * 7 if v else None for v in values] if q else [None] * n]


def _write_results(folder: Path, commit: str, phases_by_ws: dict, date: int) -> Path:
    """A minimal asv results file holding the DDP benchmarks the attribution reads."""
    means = [sum(phases_by_ws[int(w)].values()) if int(w) in phases_by_ws else None for w in WS]
    phase_vals = [phases_by_ws[int(w)][c] if int(w) in phases_by_ws else None
                  for w in WS for c in BLAME_KEYS]
    data = {"commit_hash": commit, "date": date, "env_name": "x", "version": 2,
            "result_columns": COLUMNS, "params": {}, "requirements": {}, "env_vars": {},
            "results": {
                "bench_ddp.Iteration.track_iteration": _entry(means, [WS], q=True),
                "bench_ddp.Blame.track_seconds": _entry(
                    phase_vals, [WS, [f"'{c}'" for c in BLAME_KEYS]])}}
    path = folder / f"{commit[:8]}-existing-py.json"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def _phases(data_wait=0.1, forward=0.3, backward=0.4, exposed_comm=0.0, optimizer=0.1, other=0.01,
            unattributed=0.0):
    return dict(data_wait=data_wait, forward=forward, backward=backward,
                exposed_comm=exposed_comm, optimizer=optimizer, other=other,
                unattributed=unattributed)


def _attribute(*args, timeout=120):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "attribute.py"), *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def results(tmp_path):
    machine = tmp_path / "results" / "box"
    _write_results(machine, "a" * 40, {1: _phases(), 2: _phases(exposed_comm=0.2)}, date=1)
    _write_results(machine, "b" * 40, {1: _phases(), 2: _phases(data_wait=0.4)}, date=2)
    (machine / "cccccccc-broken.json").write_text("{not json")
    return tmp_path / "results"


@pytest.mark.slow
def test_latest_commit_report_json_and_html(results, tmp_path):
    out = _attribute("--results", str(results), "--json", str(tmp_path / "a.json"),
                     "--html", str(tmp_path / "a.html"))
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "a.json").read_text())
    assert report["commit"] == "b" * 40 and report["machine"] == "box"
    # data_wait grew 0.3 s of the iteration's 0.3 s; the quartiles (+-2 %) put the noise floor
    # at 2 x hypot(0.04 x 0.91, 0.04 x 1.21) / 1.349 = 0.0896 s, below the loss
    assert report["loss_shares"]["2"] == pytest.approx({"data_wait": 100.0})
    assert report["runs"][1]["loss"]["noise_floor_s"] == pytest.approx(0.0896, abs=1e-3)
    assert any("cccccccc-broken.json" in f for f in report["skipped_files"])
    html = (tmp_path / "a.html").read_text()
    assert "data:image/png;base64," in html and "http" not in html.split("<body>")[0]
    assert (tmp_path / "a-efficiency.png").exists()
    assert "comes from data loading (data_wait)" in out.stdout
    assert "skipped unreadable result file" in out.stdout


def test_against_names_the_component_that_moved(results, tmp_path):
    out = _attribute("--results", str(results), "--commit", "bbbb", "--against", "aaaa",
                     "--json", str(tmp_path / "a.json"))
    assert out.returncode == 0, out.stderr
    moved = json.loads((tmp_path / "a.json").read_text())["against"]["per_world_size"]["2"]
    assert moved["moved_most"] == "data_wait"


@pytest.mark.parametrize("args, code, message", [
    (["--results", "/nonexistent"], 3, "python tools/suite.py"),
    (["--commit", "ffff"], 3, "no DDP results for commit ffff"),
    (["--machine", "other"], 3, "no results for machine 'other'"),
    (["--run", "--world-sizes", "0,1"], 2, "--world-sizes must be integers >= 1"),
    (["--run", "--world-sizes", "a"], 2, "--world-sizes must be integers >= 1 joined by commas"),
    (["--run", "--inject", "bogus=1"], 2, "no field 'bogus'"),
    (["--run", "--preset", "test", "--world-sizes", "1", "--data-root", "/nonexistent/ade"], 2,
     "data root /nonexistent/ade does not exist"),
])
def test_bad_input_exit_codes(results, args, code, message):
    if "--results" not in args:
        args = ["--results", str(results), *args]
    out = _attribute(*args)
    assert out.returncode == code, out.stderr
    assert message in out.stderr


def test_single_world_size_and_missing_world_size_1(tmp_path):
    machine = tmp_path / "results" / "box"
    _write_results(machine, "d" * 40, {2: _phases()}, date=1)
    out = _attribute("--results", str(tmp_path / "results"), "--json", str(tmp_path / "a.json"))
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "a.json").read_text())
    assert report["runs"][0]["speedup"] is None
    assert "world size 1 is missing" in out.stdout and "only one world size" in out.stdout


@pytest.mark.slow
def test_run_with_a_slow_loader_on_rank_1_blames_rank_1s_data_loading(tmp_path, data_root,
                                                                       monkeypatch, no_orphans):
    """The thesis's hypothesis as ground truth: 2 images x 40 ms more loading on rank 1 at N=2
    (not applied at N=1, where rank 1 does not exist). The report must find the injection on
    rank 1's data loading, and say the loss comes from it where the injection is most of it.

    The lost time N=2 vs N=1 holds the injection and the real scaling loss, which on a busy
    machine includes contention: beside one busy process data_wait's share was 43-49 %, and
    under a load average of 10-14 forward compute grew by more than the injection (the report
    was right to put it first). So the injection is told apart by its component, not its share:
    rank 1 sleeps 2 x 40 ms = 80 ms per iteration (a sleep frees the core, so contention hardly
    moves it) and rank 0 waits those 80 ms at its next collective, charged to rank 1's
    data_wait; the median over the two ranks' data_wait grows by 80 ms whatever else grew
    (measured: 78 ms beside a busy process, 86 ms under load 10-14). That the verdict names it
    is held up to one other busy process's worth of load; its share, on an idle machine."""
    from conftest import ForeignLoad
    monkeypatch.delenv("SWINKIT_DATA_ROOT", raising=False)
    with ForeignLoad() as load:  # the data as a user with their own set names it
        out = _attribute("--run", "--preset", "test", "--world-sizes", "1,2", "--repeats", "2",
                         "--iters", "6", "--inject", "data_ms=40,ranks=1",
                         "--data-root", str(data_root),
                         "--json", str(tmp_path / "a.json"), timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "not applied at world size 1" in out.stdout
    report = json.loads((tmp_path / "a.json").read_text())
    run, verdict = report["runs"][1], report["verdicts"][0]
    context = {"verdict": verdict, "growth_s": run["loss"]["growth_s"], "lost_s":
               run["loss"]["lost_s"], "straggler": run["straggler"], "foreign_cores": load.cores}
    injected_s = 2 * 0.040
    # the injection, told apart from whatever else was lost
    assert run["loss"]["growth_s"]["data_wait"] == pytest.approx(injected_s, rel=0.25), context
    straggler = run["straggler"]
    assert (straggler["rank"], straggler["phase"]) == (1, "data_wait"), context
    assert straggler["by_phase"]["data_wait"] == pytest.approx(injected_s, rel=0.25), context
    assert any((r["component"], r["rank"]) == ("data_wait", 1)
               for r in report["recommendations"]), report["recommendations"]
    assert run["launches"] == 2 and run["efficiency_interval"]
    if not load.cores <= 1.2:  # more than one busy process beside 2 ranks on 2 cores
        warnings.warn(f"{load.cores:.2f} cores of foreign load: contention may outgrow the "
                      "injection, so which cause the verdict names first is not checked")
        return
    assert "comes from data loading (data_wait) on rank 1" in out.stdout, out.stdout
    assert (verdict["world_size"], verdict["component"], verdict["rank"]) == (2, "data_wait", 1)
    first = report["recommendations"][0]
    assert (first["component"], first["rank"]) == ("data_wait", 1)
    if load.cores <= 0.05:  # idle: the injection is most of what was lost (NaN counts as busy)
        assert verdict["share_pct"] >= 60, context


@pytest.mark.parametrize("argv, message", [
    (["--run", "--what-if", "bf16_hook,nope"], "unknown remedy nope"),
    (["--run", "--scaling", "linear"], "invalid choice: 'linear'"),
    # swinkit ddp's spelling is taken: the error is the missing --run, not an unknown engine
    (["--engine", "zero1,dp-vanilla"], "--engine runs the engines: it needs --run"),
])
def test_what_if_arguments_fail_before_any_launch(argv, message, tmp_path):
    """Bad what-if arguments exit 2 naming the problem, and nothing is written."""
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "attribute.py"), *argv,
                           "--preset", "test", "--json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert not out.exists() and "[launch" not in proc.stdout


def test_list_remedies_names_each_with_what_it_changes():
    from swinkit.experiments.remedies import CATALOGUE
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "attribute.py"), "--list-remedies"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    for name, remedy in CATALOGUE.items():
        assert f"{name}" in proc.stdout and remedy.what in proc.stdout


def test_what_ifs_read_back_from_stored_asv_results(tmp_path):
    """bench_whatif's stored tracks become the report's what-if rows: error and efficiencies
    from the stored numbers (worked here by hand), the ranking per world size."""
    folder = tmp_path / "results" / "box"
    _write_results(folder, "abcd1234" * 5, {1: {c: 0.1 for c in BLAME_KEYS},
                                            2: {c: 0.15 for c in BLAME_KEYS}}, date=1)
    path = next(folder.glob("*.json"))
    data = json.loads(path.read_text())
    params = [["1", "2"], ["'baseline'", "'bf16_hook'"]]  # product: (1,b) (1,h) (2,b) (2,h)
    data["results"]["bench_whatif.Remedy.track_iteration"] = _entry([1.0, 0.9, 1.25, 1.0], params)
    data["results"]["bench_whatif.Remedy.track_predicted_iteration"] = _entry(
        [1.1, 0.9, 1.2, 1.05], params)
    data["results"]["bench_whatif.Remedy.track_efficiency"] = _entry([1.0, 1.11, 0.8, 1.0], params)
    path.write_text(json.dumps(data))
    (folder / "machine.json").write_text("{}")
    from swinkit.attribution.inputs import what_if_from_asv
    out = what_if_from_asv(tmp_path / "results")
    rows = {(r["name"], r["world_size"]): r for r in out["what_if"]}
    assert rows[("baseline", 1)]["prediction_error"] == pytest.approx(0.10)    # 1.1 vs 1.0
    assert rows[("bf16_hook", 2)]["prediction_error"] == pytest.approx(0.05)   # 1.05 vs 1.0
    assert rows[("bf16_hook", 2)]["efficiency_before"] == pytest.approx(0.8)   # the baseline's
    assert rows[("bf16_hook", 2)]["efficiency_after"] == pytest.approx(1.0)
    # at N=2 the predicted order (1.2 > 1.05) matches the measured (1.25 > 1.0): +1
    assert out["what_if_rank_correlation"]["2"] == pytest.approx(1.0)
    proc = _attribute("--results", str(tmp_path / "results"), "--what-if", "default")
    assert proc.returncode == 0, proc.stderr
    assert "bf16_hook" in proc.stdout and "+5.0%" in proc.stdout


def test_what_ifs_without_stored_results_say_which_command_makes_them(tmp_path):
    folder = tmp_path / "results" / "box"
    _write_results(folder, "abcd1234" * 5, {1: {c: 0.1 for c in BLAME_KEYS}}, date=1)
    (folder / "machine.json").write_text("{}")
    proc = _attribute("--results", str(tmp_path / "results"), "--what-if", "default")
    assert proc.returncode == 3 and "bench_whatif" in proc.stderr


@pytest.mark.parametrize("argv, message", [
    (["--run", "--engine", "ddp", "--grad-accum", "0,2"], "--grad-accum must be integers >= 1"),
    (["--run", "--engine", "ddp", "--grad-accum", "2,x"],
     "--grad-accum must be integers >= 1 joined by commas, got '2,x'"),
    (["--run", "--grad-accum", "2"], "--grad-accum applies to the engine comparison"),
])
def test_grad_accum_arguments_fail_before_any_launch(argv, message, tmp_path):
    """A bad --grad-accum exits 2 naming the flag; no engine starts and nothing is written."""
    out = tmp_path / "e.json"
    proc = _attribute(*argv, "--preset", "test", "--world-sizes", "1", "--json", str(out))
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert not out.exists() and "optimizer steps" not in proc.stdout


def test_report_says_how_far_its_blame_was_checked_on_this_machine(results, tmp_path):
    """No validation of this host at the commit read: the report says what to run. A saved one
    (2 of 3 cells passed, one skipped) of another commit is not this report's; of this commit it
    is, and its count is printed, and its matrix is on the page."""
    import socket
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "attribute.py"), "--results",
                          str(results)], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "not validated here: run swinkit validate" in out.stdout
    from swinkit.attribution.validation import failed_cell, skipped_cell
    from swinkit.report.validation import ROW_KEYS
    passed = {"world_size": 2, "case": "compute_ms", "placement": "one", "expected": "forward",
              "passed": True, "failures": [], "recovery": 1.0, "amount_s": 0.12,
              "amount_source": "measured", "straggler": {"rank": 1, "phase": "forward"},
              "row": {**dict.fromkeys(ROW_KEYS, 0.0), "forward": 0.95}}
    record = {"machine": {"hostname": socket.gethostname()}, "preset": "test", "iters": 10,
              "amount_ms": 120.0, "thresholds": {"min_share": 0.85, "recovery_tol": 0.2},
              "world_sizes": [2], "finished": "2026-11-24T20:00:00+00:00",
              "cells": [passed, dict(passed, placement="all"),
                        failed_cell(2, "backward_ms", "one", "a rank died"),
                        skipped_cell(2, "comm_ms", "one", "planted skip")]}
    folder = tmp_path / "results" / "validation"
    folder.mkdir()
    (folder / "other.json").write_text(json.dumps(dict(record, commit="a" * 40)))
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "attribute.py"), "--results",
                          str(results), "--html", str(tmp_path / "r.html")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert "not validated here" in out.stdout  # commit a's validation is not commit b's
    (folder / "this.json").write_text(json.dumps(dict(record, commit="b" * 40)))
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "attribute.py"), "--results",
                          str(results), "--html", str(tmp_path / "r.html")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "validated here at this commit: 2/3 cells pass, 1 skipped" in out.stdout
    assert 'id="validation"' in (tmp_path / "r.html").read_text()
