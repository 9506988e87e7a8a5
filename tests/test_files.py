"""Result files are old or new, never truncated; crashed runs' leftovers (RELIABILITY rows 12, 15)."""
import json
import os
import subprocess
import sys
import time

import pytest

from swinkit.result_files import RunLock, write_json_atomic


def test_write_replaces_whole_file(tmp_path):
    path = tmp_path / "r.json"
    write_json_atomic(path, {"v": 1})
    write_json_atomic(path, {"v": 2})
    assert json.loads(path.read_text()) == {"v": 2}
    assert os.listdir(tmp_path) == ["r.json"]


def test_failed_write_keeps_old_content_and_leaves_no_temp(tmp_path):
    path = tmp_path / "r.json"
    write_json_atomic(path, {"v": 1})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"v": object()})  # not serialisable: fails mid-way
    assert json.loads(path.read_text()) == {"v": 1}
    assert os.listdir(tmp_path) == ["r.json"]


def test_killed_writer_leaves_old_or_new(tmp_path):
    """A writer SIGKILLed while writing many times: the file always parses."""
    path = tmp_path / "r.json"
    write_json_atomic(path, {"v": -1})
    code = ("import sys; from swinkit.result_files import write_json_atomic\n"
            "for i in range(100000): write_json_atomic(sys.argv[1], {'v': i, 'pad': 'x' * 20000})")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)])
    seen = set()
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 20 and time.monotonic() < deadline:
            seen.add(json.loads(path.read_text())["v"])  # readers never see a torn file
    finally:
        proc.kill()
        proc.wait()
    assert len(seen) >= 20  # the reader really raced the writer
    assert "v" in json.loads(path.read_text())


def test_stale_lock_and_temp_files_are_taken_over_with_a_warning(tmp_path):
    path = tmp_path / "r.json"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    (tmp_path / "r.json.lock").write_text(dead)
    (tmp_path / ".r.json.abc123.tmp").write_text("{half")
    warnings = []
    with RunLock(path, warn=warnings.append):
        write_json_atomic(path, {"ok": True})
    assert len(warnings) == 1 and f"pid {dead} is gone" in warnings[0]
    assert "removed 1 leftover temp file" in warnings[0]
    assert sorted(os.listdir(tmp_path)) == ["r.json"]


def test_live_run_is_not_trampled(tmp_path):
    path = tmp_path / "r.json"
    with RunLock(path):
        with pytest.raises(ValueError, match=f"being written by a running swinkit process \\(pid {os.getpid()}"):
            with RunLock(path):
                pass
    assert not (tmp_path / "r.json.lock").exists()
