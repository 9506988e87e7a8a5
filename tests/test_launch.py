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
                      test_sigterm_reaches_launches_inside_a_tool_in_its_own_session (asv),
                      test_a_supervisor_killed_outright_leaves_no_ranks_behind (SIGKILL),
                      test_an_agent_whose_supervisor_died_before_it_looked_starts_no_ranks
 15 leftovers          test_atomic.py (stale lock taken over, live lock respected)
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from swinkit.launch import LaunchConfig, LaunchError, free_port, launch

ENTRY = "swinkit.rank.selftest:allreduce_loop"
FAST = dict(pg_timeout_s=5.0, join_timeout_s=5.0, wall_timeout_s=60.0)


def run(tmp_path, fault=None, steps=6, env_extra=None, **overrides):
    cfg = LaunchConfig(nproc_per_node=2, **{**FAST, **overrides})
    env = dict({"SWINKIT_FAULT": fault} if fault else {}, **(env_extra or {}))
    return launch(ENTRY, {"steps": steps}, cfg, run_dir=tmp_path / "run", env=env, quiet=True)


@pytest.mark.slow
def test_two_ranks_all_reduce(tmp_path, no_orphans):
    result = run(tmp_path).result
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    assert all(len(r["allreduce_s"]) == 6 for r in result["ranks"])


@pytest.mark.slow
def test_a_launch_in_the_temp_dir_leaves_nothing_there(tmp_path, monkeypatch, no_orphans):
    """Its run folder goes once read, torch's logs with it (they were a torchelastic_* folder
    of torch's own per launch); a folder the caller named stays, as does a failed one's."""
    import tempfile
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR in this process
    cfg = LaunchConfig(nproc_per_node=2, **FAST)
    done = launch(ENTRY, {"steps": 2}, cfg, quiet=True)
    assert len(done.result["ranks"]) == 2
    assert not done.run_dir.exists() and list(tmp_path.iterdir()) == []
    kept = launch(ENTRY, {"steps": 2}, cfg, run_dir=tmp_path / "mine", quiet=True)
    assert (kept.run_dir / "result.json").exists() and list((kept.run_dir / "elastic").iterdir())
    with pytest.raises(LaunchError):
        launch(ENTRY, {"steps": 6}, cfg, env={"SWINKIT_FAULT": "raise:1"}, quiet=True)
    assert [p.name for p in tmp_path.glob("swinkit-run-*/error-rank1.json")] == ["error-rank1.json"]


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
    (dict(nproc_per_node=0), "nproc_per_node must be an integer >= 1, got 0"),
    (dict(nproc_per_node=-1), "nproc_per_node"),
    (dict(nproc_per_node="2"), "nproc_per_node"),
    (dict(nproc_per_node=2, nnodes=2, node_rank=2, rdzv_endpoint="h:1"), "node_rank must be in 0..1"),
    (dict(nproc_per_node=1, nnodes=2), "rdzv_endpoint"),
    (dict(nproc_per_node=1, rdzv_endpoint="nohost"), "rdzv_endpoint must be host:port"),
    (dict(nproc_per_node=1, backend="nccl"), "nccl needs CUDA"),
    (dict(nproc_per_node=1, backend="mpi"), "backend must be"),
    (dict(nproc_per_node=64), "exceeds the"),
    (dict(nproc_per_node=1, pg_timeout_s=0), "pg_timeout_s"),
    (dict(nproc_per_node=1, join_timeout_s=0), "join_timeout_s"),
    (dict(nproc_per_node=1, join_timeout_s="600"), "join_timeout_s"),
    (dict(nproc_per_node=1, local_addr=""), "local_addr must be"),
    (dict(nproc_per_node=1, local_addr="node 1"), "local_addr must be"),
    (dict(nproc_per_node=1, local_addr=10), "local_addr must be"),
    (dict(nproc_per_node=1, local_addr="node1:29500"), "local_addr is an address without port"),
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
    assert "--world-size must be an integer >= 1, got 0" in proc.stderr
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
    "from swinkit.launch import LaunchConfig, launch\n"
    "launch('swinkit.rank.selftest:allreduce_loop', {'steps': 100000},\n"
    "       LaunchConfig(nproc_per_node=2, wall_timeout_s=600), quiet=True)\n")


def _sigterm_once_iterating(cmd, sig=signal.SIGTERM) -> subprocess.Popen:
    """Start ``cmd``, wait until a launch under it has heartbeats, send ``sig``, wait; the
    run folders it had are ``proc.run_dirs``."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            proc.run_dirs = _run_dirs_of(proc.pid)
            if any(list(p.glob("hb-rank*.json")) for p in proc.run_dirs):
                break
            time.sleep(0.2)
        else:
            pytest.fail("ranks never started")
        proc.send_signal(sig)
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
    assert proc.run_dirs and not any(p.exists() for p in proc.run_dirs)  # its temp folder too


@pytest.mark.slow
def test_a_supervisor_killed_outright_leaves_no_ranks_behind(no_orphans):
    """SIGKILL runs none of the supervisor's cleanup, and its agent lives in a session of its
    own: the agent sees its parent gone and stops its ranks (no_orphans: all gone within 10 s,
    where the ranks would otherwise loop for about 80 minutes), then removes the run's temp
    folder, which nobody is left to read."""
    proc = _sigterm_once_iterating([sys.executable, "-c", _LAUNCH_FOREVER], signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 15
    while any(p.exists() for p in proc.run_dirs) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.run_dirs and not any(p.exists() for p in proc.run_dirs)


@pytest.mark.slow
def test_an_agent_whose_supervisor_died_before_it_looked_starts_no_ranks(tmp_path, no_orphans):
    """The agent takes its supervisor's pid from job.json, not from its own parent read after
    torch's import: a supervisor killed during that second left the agent adopted by init,
    taking init for its supervisor, with its ranks running on unwatched."""
    from dataclasses import asdict
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    run_dir = tmp_path / "swinkit-run-orphan"
    run_dir.mkdir()
    cfg = LaunchConfig(nproc_per_node=2, **FAST)
    (run_dir / "job.json").write_text(json.dumps(dict(
        entry=ENTRY, kwargs={"steps": 100000}, launch=asdict(cfg), backend="gloo",
        endpoint=f"localhost:{free_port()}", run_id=cfg.rdzv_id, temporary=True,
        supervisor_pid=dead.pid)))
    agent = subprocess.run([sys.executable, "-m", "swinkit.launch.agent", str(run_dir)],
                           capture_output=True, text=True, timeout=60)
    assert agent.returncode != 0, agent.stderr[-2000:]
    assert not run_dir.exists()
    assert not list(tmp_path.rglob("hb-rank*.json"))


@pytest.mark.slow
def test_an_agent_orphaned_in_the_rendezvous_removes_its_temp_folder(tmp_path, no_orphans):
    """Until torch's agent starts workers SIGTERM has Python's default action, which runs no
    finally: an agent waiting in the rendezvous (here for a second node that never comes) when
    its supervisor is killed removes the folder before it stops itself."""
    from dataclasses import asdict
    run_dir = tmp_path / "swinkit-run-rendezvous"
    run_dir.mkdir()
    cfg = LaunchConfig(nproc_per_node=1, nnodes=2, node_rank=0, join_timeout_s=120.0,
                       rdzv_endpoint=f"localhost:{free_port()}")
    supervisor = subprocess.Popen([sys.executable, "-c", (
        "import json, os, subprocess, sys, time\n"
        f"run_dir = {str(run_dir)!r}\n"
        f"job = dict(entry={ENTRY!r}, kwargs={{'steps': 2}}, launch={asdict(cfg)!r},\n"
        f"           backend='gloo', endpoint={cfg.rdzv_endpoint!r}, run_id='r', temporary=True,\n"
        "           supervisor_pid=os.getpid())\n"
        "open(run_dir + '/job.json', 'w').write(json.dumps(job))\n"
        "agent = subprocess.Popen([sys.executable, '-m', 'swinkit.launch.agent', run_dir],\n"
        "                         start_new_session=True)\n"
        "print(agent.pid, flush=True)\n"
        "time.sleep(600)\n")], stdout=subprocess.PIPE, text=True)
    agent = int(supervisor.stdout.readline())
    time.sleep(8)  # the agent imports torch and waits in the rendezvous for node 1
    assert run_dir.exists()
    supervisor.kill()
    supervisor.wait()
    deadline = time.monotonic() + 15
    while run_dir.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not run_dir.exists()
    try:
        os.kill(agent, 0)
        time.sleep(2)
        os.kill(agent, 0)
        pytest.fail(f"agent {agent} still running")
    except ProcessLookupError:
        pass


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
    outer = ("import sys\nfrom swinkit.launch.terminate import run_in_session\n"
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
        cfg = LaunchConfig(nproc_per_node=2, nnodes=2, node_rank=rank, rdzv_endpoint=endpoint,
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


# Multi-node plumbing: the address a node publishes, the rendezvous wait, gloo's interface.

@pytest.mark.parametrize("addr", [None, "10.0.0.7", "fe80::1", "node-01.cluster.example"])
def test_good_local_addr_is_accepted(addr):
    LaunchConfig(nproc_per_node=1, local_addr=addr).validate()


def test_join_timeout_is_its_own_setting():
    """srun may start nodes minutes apart: the rendezvous waits torch's 600 s, not the
    process-group timeout."""
    cfg = LaunchConfig(nproc_per_node=1)
    assert (cfg.join_timeout_s, cfg.pg_timeout_s) == (600.0, 60.0)


def _job(**launch_fields):
    from dataclasses import asdict
    cfg = LaunchConfig(nproc_per_node=2, nnodes=2, node_rank=1, rdzv_endpoint="head:29500",
                       **launch_fields)
    return {"launch": asdict(cfg), "run_id": "r", "endpoint": "head:29500"}


def test_agent_passes_local_addr_and_join_timeout_to_torch(tmp_path):
    from swinkit.launch.agent import elastic_config
    config = elastic_config(_job(local_addr="10.1.2.3", join_timeout_s=900.0, pg_timeout_s=30.0),
                            tmp_path / "logs")
    assert config.local_addr == "10.1.2.3"  # torch's LaunchConfig field, as torchrun sets it
    assert config.rdzv_configs["join_timeout"] == 900.0
    assert "local_addr" not in config.rdzv_configs  # would reach RendezvousParameters twice
    assert config.rdzv_configs["is_host"] is False


def test_agent_leaves_local_addr_to_torch_by_default(tmp_path):
    from swinkit.launch.agent import elastic_config
    config = elastic_config(_job(), tmp_path / "logs")
    assert config.local_addr is None
    assert config.logs_specs.root_log_dir == str(tmp_path / "logs")  # torch's logs in the run's


IFACES = ["lo", "eth1", "eth0", "ib0"]


@pytest.mark.parametrize("env, expected", [
    ({"NCCL_SOCKET_IFNAME": "eth"}, {"GLOO_SOCKET_IFNAME": "eth0"}),   # NCCL prefix
    ({"NCCL_SOCKET_IFNAME": "ib0"}, {"GLOO_SOCKET_IFNAME": "ib0"}),
    ({"NCCL_SOCKET_IFNAME": "=eth1"}, {"GLOO_SOCKET_IFNAME": "eth1"}),  # NCCL exact match
    ({"NCCL_SOCKET_IFNAME": "=eth"}, {}),                               # exact: no such one
    ({"NCCL_SOCKET_IFNAME": "enp,ib"}, {"GLOO_SOCKET_IFNAME": "ib0"}),  # first entry matching
    ({"NCCL_SOCKET_IFNAME": "^docker,lo"}, {}),                         # an exclusion list
    ({"NCCL_SOCKET_IFNAME": "eth", "GLOO_SOCKET_IFNAME": "ib0"}, {}),   # explicit gloo wins
    ({}, {}),
])
def test_gloo_follows_nccl_socket_ifname(env, expected):
    from swinkit.launch.network import gloo_socket_env
    assert gloo_socket_env(env, IFACES) == expected


def test_gloo_socket_ifname_naming_no_interface_fails_before_launch(tmp_path):
    from swinkit.launch.network import check_gloo_ifname
    check_gloo_ifname({"GLOO_SOCKET_IFNAME": "eth0,ib0"}, IFACES)
    with pytest.raises(ValueError, match="GLOO_SOCKET_IFNAME='eth0,eth9': this host has no "
                                         "interface 'eth9'"):
        check_gloo_ifname({"GLOO_SOCKET_IFNAME": "eth0,eth9"}, IFACES)
    with pytest.raises(ValueError, match="no interface ' ib0'"):  # torch strips nothing
        check_gloo_ifname({"GLOO_SOCKET_IFNAME": "eth0, ib0"}, IFACES)
    with pytest.raises(ValueError, match="GLOO_SOCKET_IFNAME"):
        run(tmp_path, env_extra={"GLOO_SOCKET_IFNAME": "swinkit-no-such-if0"})
    assert not (tmp_path / "run").exists()  # refused before anything started


def test_node_options_reach_the_launch_config():
    """--local-addr and --join-timeout (default 600 s), apart from --pg-timeout."""
    from swinkit.cli import get_parser
    from swinkit.cli.launch import run_spec
    args = get_parser().parse_args(["ddp", "--local-addr", "10.0.0.2", "--join-timeout", "900",
                                    "--pg-timeout", "30"])
    lc = run_spec(args).launch
    assert (lc.local_addr, lc.join_timeout_s, lc.pg_timeout_s) == ("10.0.0.2", 900.0, 30.0)
    lc = run_spec(get_parser().parse_args(["ddp"])).launch
    assert (lc.local_addr, lc.join_timeout_s, lc.pg_timeout_s) == (None, 600.0, 60.0)


def test_ddp_help_names_the_network_settings(capsys):
    from swinkit.cli import get_parser
    with pytest.raises(SystemExit):
        get_parser().parse_args(["ddp", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in ("--local-addr", "--join-timeout", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        assert name in text


def network_seen(rank) -> dict:
    """Entry point (imported by the ranks, with this folder on PYTHONPATH): what a rank got."""
    import os
    return {k: os.environ.get(k) for k in ("MASTER_ADDR", "GLOO_SOCKET_IFNAME")}


@pytest.mark.slow
def test_rank_sees_local_addr_and_nccl_interface_for_gloo(tmp_path, no_orphans):
    """One rank: MASTER_ADDR is the --local-addr (not this host's FQDN), and gloo gets the
    interface NCCL_SOCKET_IFNAME selects (loopback here, so the gloo group still forms)."""
    import os
    import pathlib
    path = [str(pathlib.Path(__file__).parent), os.environ.get("PYTHONPATH")]
    env = {"PYTHONPATH": os.pathsep.join(filter(None, path)), "NCCL_SOCKET_IFNAME": "lo"}
    cfg = LaunchConfig(nproc_per_node=1, local_addr="127.0.0.1", backend="gloo", **FAST)
    result = launch("test_launch:network_seen", {}, cfg, run_dir=tmp_path / "run", env=env,
                    quiet=True).result
    assert result["ranks"] == [{"MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo"}]


def test_environment_records_cpu_affinity(monkeypatch):
    """A SLURM task confined to fewer cores than the machine shows in the result."""
    import os

    from swinkit.runs.ddp_run import environment
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {5, 2}, raising=False)
    assert environment()["cpu_affinity"] == {"count": 2, "cpus": [2, 5]}


def stall_collective(rank, seconds: float) -> dict:
    """Entry point (imported by the ranks): an all-reduce queued behind a ``seconds``-long GPU
    spin, so it outlives a shorter process-group timeout. A first all-reduce makes the NCCL
    communicator: torch creates it at the first collective, and creating it waits for the
    device's queued work (on an H100 with torch 2.11 and NCCL 2.28 an all-reduce behind a 60 s
    spin returned to the host after 61.7 s, so it could never time out)."""
    import torch
    import torch.distributed as dist
    rank.heartbeat(0)
    t = torch.ones(1, device="cuda")
    dist.all_reduce(t)
    t.item()
    torch.cuda._sleep(int(seconds * 2e9))  # clock64() cycles: >= seconds at clocks <= 2 GHz
    dist.all_reduce(t)
    t.item()  # the host waits here; the NCCL watchdog ends the process first
    return {}


# NCCL's watchdog sees the timeout at once but takes the process down only after waiting for
# its debug dump: on an H100 (torch 2.11, NCCL 2.28) SIGABRT came 64 s after a 5 s timeout
# caught the collective, with or without TORCH_NCCL_DUMP_ON_TIMEOUT=0. The spin outlasts that
# and the wall-clock limit outlasts the spin, so only the watchdog can end the rank.
STALL_S = 120.0


@pytest.mark.gpu
@pytest.mark.slow
def test_nccl_watchdog_abort_is_read_as_a_timeout_not_a_kill(tmp_path, no_orphans):
    """What the diagnosis assumes of NCCL: a rank whose collective times out is aborted
    (SIGABRT) and leaves no error record. One rank suffices (no second GPU needed): it is
    then the rank that made the least progress, named hung, not killed. About 75 s
    expected (64 s to NCCL's abort after the timeout, as measured with torch 2.11)."""
    import os
    import pathlib

    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU (NCCL)")
    path = [str(pathlib.Path(__file__).parent), os.environ.get("PYTHONPATH")]
    env = {"PYTHONPATH": os.pathsep.join(filter(None, path))}
    cfg = LaunchConfig(nproc_per_node=1, backend="nccl", pg_timeout_s=5.0, join_timeout_s=5.0,
                       wall_timeout_s=STALL_S + 60)
    with pytest.raises(LaunchError) as info:
        launch("test_launch:stall_collective", {"seconds": STALL_S}, cfg,
               run_dir=tmp_path / "run", env=env, quiet=True)
    d = info.value.diagnosis
    assert d.records["failures"][0]["signal"] == "SIGABRT", d.records
    assert not d.records["errors"], d.records["errors"]
    assert (d.cause, d.rank) == ("hung", 0) and "SIGABRT" in d.summary, d.summary


def test_a_run_spec_states_its_ranks_per_node_once():
    """The spec's ranks per node are the launch's, whatever the launch settings were made
    with: a sweep that changes nproc_per_node need not edit launch too. ``world_size`` is
    every rank: ranks per node times nodes."""
    from dataclasses import replace

    from swinkit.launch import LaunchConfig
    from swinkit.runs.ddp_run import DDPRunSpec
    spec = DDPRunSpec(nproc_per_node=2, launch=LaunchConfig(nproc_per_node=2, pg_timeout_s=30.0))
    moved = replace(spec, nproc_per_node=4).launch_config()
    assert (moved.nproc_per_node, moved.world_size, moved.pg_timeout_s) == (4, 4, 30.0)
    assert DDPRunSpec(nproc_per_node=3).launch_config().world_size == 3
    nodes = DDPRunSpec(nproc_per_node=2, launch=LaunchConfig(
        nproc_per_node=1, nnodes=3, rdzv_endpoint="node0:29500"))
    assert (nodes.world_size, nodes.launch_config().nproc_per_node) == (6, 2)


def test_a_group_of_zombies_is_not_alive():
    """A process that has ended but is not reaped yet (an agent's orphans wait for init, which
    in a container can reap slowly) runs nothing: the supervisor does not wait on it."""
    import psutil

    from swinkit.result_files import alive
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            start_new_session=True)
    done = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while psutil.Process(done.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert alive(live.pid, group=True) and not alive(done.pid, group=True)
    finally:
        live.kill()
        live.wait()
        done.wait()
    assert not alive(done.pid, group=True)


def test_a_launch_runs_where_tmpdir_is_too_deep_for_a_socket(tmp_path, monkeypatch, no_orphans):
    """The agent forks its ranks from a fork server listening on a Unix socket under TMPDIR;
    a socket path holds at most 107 bytes, so under a 90-character TMPDIR (a batch job's
    scratch folder) every launch failed with "no rank joined" before the server's socket moved
    to /tmp. The run folder still goes under the deep TMPDIR."""
    import tempfile
    deep = tmp_path / ("d" * max(1, 90 - len(str(tmp_path))))
    deep.mkdir()
    assert len(str(deep)) + 32 > 107
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr(tempfile, "tempdir", None)
    done = launch(ENTRY, {"steps": 2}, LaunchConfig(nproc_per_node=1, **FAST), quiet=True,
                  run_dir=deep / "run")
    assert len(done.result["ranks"]) == 1
