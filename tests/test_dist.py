"""Launching ranks through torch's elastic engine, and the launch rows of RELIABILITY.md.

Rows covered here (each on 2 gloo ranks, each followed by an orphan check):
  1 killed rank        test_killed_rank_is_named_with_its_signal
  2 raising rank       test_raising_rank_traceback_is_the_root_cause
  3 hung rank          test_hung_rank_is_named_not_the_survivor
  4 busy, no progress  test_watchdog_ends_spinning_ranks
  5 rank never joins   test_rank_that_never_joins_is_named
  6 port taken         test_busy_explicit_port_fails_fast, test_default_port_is_free
  7 invalid config     test_bad_launch_config_names_the_field, test_validation_holds_under_python_O
 12 interrupted run    test_ctrl_c_stops_every_rank_and_keeps_old_results (+ test_atomic.py),
                      test_sigterm_stops_every_rank (timeout(1), a scheduler),
                      test_sigterm_reaches_launches_inside_a_tool_in_its_own_session (asv)
 15 leftovers          test_atomic.py (stale lock taken over, live lock respected)
"""
import json
import signal
import socket
import subprocess
import sys
import time

import pytest

from swinkit.dist import LaunchConfig, LaunchError, free_port, launch

ENTRY = "swinkit.workloads.selftest:allreduce_loop"
FAST = dict(pg_timeout_s=5.0, join_timeout_s=5.0, wall_timeout_s=60.0)


def run(tmp_path, fault=None, steps=6, **overrides):
    cfg = LaunchConfig(world_size=2, **{**FAST, **overrides})
    env = {"SWINKIT_FAULT": fault} if fault else {}
    return launch(ENTRY, {"steps": steps}, cfg, run_dir=tmp_path / "run", env=env, quiet=True)


@pytest.mark.slow
def test_two_ranks_all_reduce(tmp_path, no_orphans):
    result = run(tmp_path).result
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    assert all(len(r["allreduce_s"]) == 6 for r in result["ranks"])


@pytest.mark.slow
def test_killed_rank_is_named_with_its_signal(tmp_path, no_orphans):
    start = time.monotonic()
    with pytest.raises(LaunchError) as info:
        run(tmp_path, "kill:1")
    d = info.value.diagnosis
    assert (d.cause, d.rank) == ("killed", 1)
    assert "SIGKILL" in d.summary
    assert time.monotonic() - start < 30


@pytest.mark.slow
def test_raising_rank_traceback_is_the_root_cause(tmp_path, no_orphans):
    with pytest.raises(LaunchError) as info:
        run(tmp_path, "raise:0")
    d = info.value.diagnosis
    assert (d.cause, d.rank) == ("raised", 0)
    assert "injected failure on rank 0" in d.summary
    assert "Traceback" in d.detail and "_act" in d.detail


@pytest.mark.slow
def test_hung_rank_is_named_not_the_survivor(tmp_path, no_orphans):
    start = time.monotonic()
    with pytest.raises(LaunchError) as info:
        run(tmp_path, "hang:1")
    d = info.value.diagnosis
    assert (d.cause, d.rank) == ("hung", 1), d.summary
    assert time.monotonic() - start < FAST["pg_timeout_s"] + 25  # timeout + start-up + grace


@pytest.mark.slow
def test_watchdog_ends_spinning_ranks(tmp_path, no_orphans):
    start = time.monotonic()
    with pytest.raises(LaunchError) as info:
        run(tmp_path, "spin:all", wall_timeout_s=8.0)
    d = info.value.diagnosis
    assert d.cause == "watchdog" and "8 s" in d.summary
    assert time.monotonic() - start < 8.0 + 15


@pytest.mark.slow
def test_rank_that_never_joins_is_named(tmp_path, no_orphans):
    with pytest.raises(LaunchError) as info:
        run(tmp_path, "nojoin:1")
    d = info.value.diagnosis
    assert (d.cause, d.rank) == ("never_joined", 1), d.summary
    assert "rank 1 did not join within 5 s" in d.summary


def test_busy_explicit_port_fails_fast(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ValueError, match=f"port {port} is already in use"):
            run(tmp_path, rdzv_endpoint=f"localhost:{port}")
    assert not (tmp_path / "run").exists()  # refused before anything started


def test_default_port_is_free():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


@pytest.mark.parametrize("kwargs, message", [
    (dict(world_size=0), "world_size must be an integer >= 1, got 0"),
    (dict(world_size=-1), "world_size"),
    (dict(world_size="2"), "world_size"),
    (dict(world_size=2, nnodes=2, node_rank=2, rdzv_endpoint="h:1"), "node_rank must be in 0..1"),
    (dict(world_size=1, nnodes=2), "rdzv_endpoint"),
    (dict(world_size=1, rdzv_endpoint="nohost"), "rdzv_endpoint must be host:port"),
    (dict(world_size=1, backend="nccl"), "nccl needs CUDA"),
    (dict(world_size=1, backend="mpi"), "backend must be"),
    (dict(world_size=64), "exceeds the"),
    (dict(world_size=1, pg_timeout_s=0), "pg_timeout_s"),
])
def test_bad_launch_config_names_the_field(kwargs, message):
    if kwargs.get("backend") == "nccl":
        import torch
        if torch.cuda.is_available():
            pytest.skip("CUDA present: nccl is valid here")
    with pytest.raises(ValueError, match=message):
        LaunchConfig(**kwargs).validate()


@pytest.mark.slow
def test_validation_holds_under_python_O(tmp_path):
    proc = subprocess.run([sys.executable, "-O", "-m", "swinkit", "ddp", "--world-size", "0",
                           "--json", str(tmp_path / "r.json")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "world_size must be an integer >= 1, got 0" in proc.stderr
    assert not (tmp_path / "r.json").exists()


def _sigint_as_at_a_terminal():
    """Ctrl-C's SIGINT at its default action in the child, as in an interactive shell.

    A job started in the background by a non-interactive shell (``pytest ... &``, some CI
    runners) inherits SIGINT *ignored*, and Python then installs no KeyboardInterrupt handler:
    the CLI would rightly go on running and this test would fail for its caller's reason."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_stops_every_rank_and_keeps_old_results(tmp_path, data_root, no_orphans):
    out = tmp_path / "r.json"
    out.write_text(json.dumps({"old": True}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "swinkit", "ddp", "--preset", "test", "--world-size", "2",
         "--iters", "1000", "--data-root", str(data_root), "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=_sigint_as_at_a_terminal)
    deadline = time.monotonic() + 120
    try:  # wait until ranks are iterating: a heartbeat file of a run appears
        while time.monotonic() < deadline:
            beats = [p for p in _run_dirs_of(proc.pid) if list(p.glob("hb-rank*.json"))]
            if beats:
                break
            time.sleep(0.2)
        else:
            pytest.fail("ranks never started")
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, proc.stdout.read()
    assert json.loads(out.read_text()) == {"old": True}
    assert not list(tmp_path.glob(".r.json.*.tmp"))
    assert not (tmp_path / "r.json.lock").exists()


# A supervisor that launches 2 ranks looping for minutes (allreduce_loop, 0.05 s per step).
_LAUNCH_FOREVER = (
    "from swinkit.dist import LaunchConfig, launch\n"
    "launch('swinkit.workloads.selftest:allreduce_loop', {'steps': 100000},\n"
    "       LaunchConfig(world_size=2, wall_timeout_s=600), quiet=True)\n")


def _sigterm_once_iterating(cmd) -> subprocess.Popen:
    """Start ``cmd``, wait until a launch under it has heartbeats, send SIGTERM, wait."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if any(list(p.glob("hb-rank*.json")) for p in _run_dirs_of(proc.pid)):
                break
            time.sleep(0.2)
        else:
            pytest.fail("ranks never started")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc


@pytest.mark.slow
def test_sigterm_stops_every_rank(no_orphans):
    """Python's default SIGTERM ends a process without its finally blocks: the agent's session
    would outlive the supervisor. The launch turns it into an exception and stops them; the
    exit code is 128 + SIGTERM."""
    proc = _sigterm_once_iterating([sys.executable, "-c", _LAUNCH_FOREVER])
    assert proc.returncode == 128 + signal.SIGTERM, proc.stdout.read()


@pytest.mark.slow
def test_sigterm_reaches_launches_inside_a_tool_in_its_own_session(no_orphans):
    """tools/suite.py runs asv in a session of its own; asv puts its fork server in a process
    group of its own, and its benchmark processes launch ranks in sessions of theirs: SIGTERM
    to the outer supervisor must still stop all of them (run_in_session signals every group of
    its session, the launch inside stops its ranks)."""
    # the tool (like asv) starts the launching process in a process group of its own
    tool = ("import os, subprocess, sys\n"
            f"subprocess.Popen([sys.executable, '-c', {_LAUNCH_FOREVER!r}], "
            "preexec_fn=lambda: os.setpgid(0, 0)).wait()\n")
    outer = ("import sys\nfrom swinkit.dist.launch import run_in_session\n"
             f"sys.exit(run_in_session([sys.executable, '-c', {tool!r}], grace_s=15))\n")
    proc = _sigterm_once_iterating([sys.executable, "-c", outer])
    assert proc.returncode == 128 + signal.SIGTERM, proc.stdout.read()


def _run_dirs_of(pid):
    """Run folders of the launches started by process ``pid`` (from their SWINKIT_RUN_DIR)."""
    import pathlib

    import psutil
    dirs = set()
    try:
        for child in psutil.Process(pid).children(recursive=True):
            try:
                run_dir = child.environ().get("SWINKIT_RUN_DIR")
            except psutil.Error:
                continue
            if run_dir:
                dirs.add(pathlib.Path(run_dir))
    except psutil.Error:
        pass
    return dirs


@pytest.mark.slow
def test_two_nodes_on_localhost(tmp_path, no_orphans):
    """Two agents, one per 'node', meet at one c10d endpoint: 4 ranks in one process group."""
    from concurrent.futures import ThreadPoolExecutor
    endpoint = f"127.0.0.1:{free_port()}"

    def node(rank):
        cfg = LaunchConfig(world_size=2, nnodes=2, node_rank=rank, rdzv_endpoint=endpoint,
                           allow_oversubscribe=True, **FAST)
        return launch(ENTRY, {"steps": 3}, cfg, run_dir=tmp_path / f"node{rank}", quiet=True)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(node, [0, 1]))
    # rank 0 gathers every rank's result; the rendezvous decides on which node it runs
    reports = [r.result for r in results if r.result is not None]
    assert len(reports) == 1
    ranks = reports[0]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert all(r["world_size"] == 4 for r in ranks)
