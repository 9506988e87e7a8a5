"""tools/gpu_check.py, the GPU check in one command, driven on CPU: its parts run, the table and
the JSON say what ran, tests that all skip (no GPU) are not counted as a pass or a failure."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "tools" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_junit_counts_add_up_every_suite(gpu_check, tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite tests="5" failures="1" errors="0" skipped="2"/>'
                     '<testsuite tests="3" failures="0" errors="1" skipped="0"/></testsuites>')
    assert gpu_check.junit_counts(junit) == {"tests": 8, "failures": 1, "errors": 1, "skipped": 2}


def test_an_unknown_part_is_refused_by_name(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--parts",
                          "tests,bench", "--out", str(tmp_path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "['bench'] not among" in out.stderr
    assert not (tmp_path / "gpu_check.json").exists()


@pytest.mark.slow
def test_tests_and_measurements_run_on_cpu_and_are_reported(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--parts",
                          "tests,measure", "--preset", "test", "--batch", "2", "--iters", "3",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=1200,
                         cwd=ROOT)
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert out.returncode == (0 if report["pass"] else 1), out.stdout[-3000:]
    tests, fb, overhead = report["rows"][0], report["rows"][1], report["rows"][2]
    # no GPU here: every gpu-marked test skips, which is neither a pass nor a failure
    assert tests["pass"] is None and tests["figure"].startswith("0 passed, 0 failed, ")
    assert (tmp_path / "junit.xml").is_file()
    assert fb["check"] == "test forward+backward, 2 images (cpu)" and "MFU" in fb["figure"]
    inst = report["parts"]["measure"]["overhead"]
    assert overhead["pass"] == (inst["overhead"] < 0.05)
    assert f"({100 * inst['overhead']:+.1f} %)" in overhead["figure"]   # the figure is the run's
    assert "part     check" in out.stdout
