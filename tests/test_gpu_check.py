"""tools/gpu_check.py, the GPU check in one command, driven on CPU: its parts run, the table and
the JSON say what ran, tests that all skip (no GPU) are not counted as a pass or a failure."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tool_module

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gpu_check():
    return tool_module("gpu_check")


def test_junit_counts_add_up_every_suite(gpu_check, tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite tests="5" failures="1" errors="0" skipped="2"/>'
                     '<testsuite tests="3" failures="0" errors="1" skipped="0"/></testsuites>')
    assert gpu_check.junit_counts(junit) == {"tests": 8, "failures": 1, "errors": 1, "skipped": 2}


@pytest.mark.parametrize("args, message", [
    (["--parts", "tests,bench", "--allow-no-gpu"], "--parts: ['bench'] not among"),
    (["--preset", "tesis", "--allow-no-gpu"], "--preset: 'tesis' not among"),
    (["--batch", "1", "--allow-no-gpu"], "--batch must be >= 2"),
    (["--iters", "0", "--allow-no-gpu"], "--iters must be >= 1"),
    ([], "torch sees no GPU here"),   # a GPU node whose torch is a CPU build: not a pass
])
def test_bad_input_and_no_gpu_are_refused_before_any_part_runs(tmp_path, args, message):
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--out",
                          str(tmp_path), *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert not (tmp_path / "gpu_check.json").exists() and not (tmp_path / "junit.xml").exists()


def test_a_part_that_raises_is_a_failed_row_and_the_others_still_run(gpu_check, monkeypatch,
                                                                     tmp_path):
    def boom(*args):
        raise RuntimeError("the component's process died (signal 9)")
    monkeypatch.setattr(gpu_check, "run_measurements", boom)
    monkeypatch.setattr(gpu_check, "run_asv", lambda timeout: [
        gpu_check.row("asv", "tools/suite.py", "exit 0", "exit 0", True)])
    assert gpu_check.main(["--parts", "measure,asv", "--allow-no-gpu", "--out", str(tmp_path)]) == 1
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [r["pass"] for r in report["rows"]] == [False, True]
    assert "signal 9" in report["rows"][0]["figure"] and report["pass"] is False


def test_a_job_killed_in_a_later_part_keeps_the_parts_it_finished(gpu_check, monkeypatch,
                                                                  tmp_path):
    """A scheduler's time limit kills the process mid-part (no except clause runs): the JSON
    on disk already holds the parts before it, and names the ones that did not run."""
    monkeypatch.setattr(gpu_check, "run_asv", lambda timeout: [
        gpu_check.row("asv", "tools/suite.py", "exit 0", "exit 0", True)])

    def killed(*args):
        raise SystemExit(137)
    monkeypatch.setattr(gpu_check, "run_measurements", killed)
    (tmp_path / "gpu_check.json").write_text(json.dumps({"rows": [], "pass": True}))  # an old run's
    with pytest.raises(SystemExit):
        gpu_check.main(["--parts", "asv,measure,tests", "--allow-no-gpu", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [r["part"] for r in report["rows"]] == ["asv"] and report["pass"] is None
    assert report["parts_not_run"] == ["measure", "tests"]
    # killed in its first part: the file is this run's, nothing finished, nothing passed
    monkeypatch.setattr(gpu_check, "run_asv", lambda timeout: (_ for _ in ()).throw(SystemExit(137)))
    with pytest.raises(SystemExit):
        gpu_check.main(["--parts", "asv,tests", "--allow-no-gpu", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert (report["rows"], report["parts_not_run"], report["pass"]) == ([], ["asv", "tests"], None)


def test_tests_k_selects_the_gpu_tests_pytest_runs(gpu_check, monkeypatch, tmp_path):
    """A short device lease runs a chosen few: the expression reaches pytest's -k, after the
    gpu marker (which still selects), and without it no -k is passed."""
    seen = []

    def fake_run(cmd, **kw):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 5)
    monkeypatch.setattr(gpu_check.subprocess, "run", fake_run)
    gpu_check.main(["--parts", "tests", "--tests-k", "precision or bf16", "--allow-no-gpu",
                    "--out", str(tmp_path)])
    gpu_check.main(["--parts", "tests", "--allow-no-gpu", "--out", str(tmp_path)])
    assert seen[0][-2:] == ["-k", "precision or bf16"] and "-k" not in seen[1]
    assert seen[0][seen[0].index("-m") + 1:][:1] == ["pytest"]
    assert seen[0][seen[0].index("pytest") + 1:][:2] == ["-m", "gpu"]


@pytest.mark.slow
def test_tests_and_measurements_run_on_cpu_and_are_reported(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--parts",
                          "tests,measure", "--preset", "test", "--batch", "2", "--iters", "3",
                          "--allow-no-gpu", "--out", str(tmp_path)], capture_output=True,
                         text=True, timeout=1200, cwd=ROOT)
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["device"] == "no GPU" and report["gpus"] == 0, out.stdout[-3000:]
    tests, fb, overhead = report["rows"][0], report["rows"][1], report["rows"][2]
    # no GPU here: every gpu-marked test skips, which is neither a pass nor a failure
    assert tests["pass"] is None and tests["figure"].startswith("0 passed, 0 failed, ")
    assert (tmp_path / "junit.xml").is_file()
    assert fb["check"] == "test forward+backward, 2 images (cpu)" and "MFU" in fb["figure"]
    inst = report["parts"]["measure"]["overhead"]
    assert f"({100 * inst['overhead']:+.1f} %)" in overhead["figure"]   # the figure is the run's
    assert overhead["bound"] == "< 5 %"
    assert "part     check" in out.stdout
