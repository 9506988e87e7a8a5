"""The per-node agent: ``python -m swinkit.launch.agent RUN_DIR`` (started by swinkit.launch.supervisor).

Runs this node's ranks with torch's ``elastic_launch`` (c10d rendezvous, no restarts) and, when a
rank fails, writes ``agent-failures.json`` with each failed rank's exit code or signal so the
supervisor can tell a killed rank (no error record) from a raising one.

What a launch costs before any work (``tools/launch_cost.py`` measures it; docs/benchmarks.md)
is cut here in two places. The ranks are forked from multiprocessing's fork server, started
first thing, before this process imports torch: the server imports torch and the rank module
beside this agent's own start (on another core), and each rank forked from it starts with them
imported, where a spawned rank started Python and imported torch after the rendezvous. A
forked process also ends without the interpreter's tear-down of torch's modules (half a second
on these machines), and so does this agent (:func:`exit_now`), once its ranks are done and its
records written.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

from swinkit.result_files import alive, write_json_atomic

# what the fork server imports before the first rank is forked from it (the rank's own imports)
PRELOAD = ("torch", "torch.distributed", "swinkit.launch.rank")
START_METHOD = "forkserver"


def _signal_name(exitcode: int) -> str | None:
    if exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return None


def start_fork_server(preload=PRELOAD) -> None:
    """Start multiprocessing's fork server now, importing ``preload`` in it, so that the import
    runs beside this process's own start (see the module doc)."""
    import multiprocessing
    from multiprocessing import forkserver
    multiprocessing.set_forkserver_preload(list(preload))
    with _short_socket_dir():
        forkserver.ensure_running()


# The fork server listens on a Unix socket, multiprocessing's temp dir (pymp-XXXXXXXX, made
# under TMPDIR) plus listener-XXXXXXXX: 32 bytes beyond TMPDIR, and a socket path holds at most
# 107 (AF_UNIX). A deep TMPDIR (a batch job's scratch folder, pytest's) would stop every
# launch; Python 3.11 does not fall back by itself.
SOCKET_TMPDIR_MAX = 107 - 32


@contextlib.contextmanager
def _short_socket_dir(base: str = "/tmp"):
    """multiprocessing's temp dir made under ``base`` where TMPDIR is too long for a socket;
    the dir is made once per process and kept, so only the fork server's socket moves."""
    import tempfile
    saved = tempfile.tempdir
    if len(tempfile.gettempdir()) > SOCKET_TMPDIR_MAX and os.access(base, os.W_OK):
        tempfile.tempdir = base
    try:
        yield
    finally:
        tempfile.tempdir = saved


def elastic_config(job: dict, log_dir: Path | None = None):
    """torch's launch configuration for this node, from the run's ``job.json``; torch's own
    logs in ``log_dir`` (the run folder's, removed with it), else in a temp folder of torch's
    that nothing removes.

    ``local_addr`` goes to torch's ``LaunchConfig`` itself, as torchrun passes it: torch hands
    it to the rendezvous and to the worker spec; put into ``rdzv_configs`` it would reach the
    rendezvous parameters twice and fail.
    """
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig
    spec = job["launch"]
    return LaunchConfig(
        min_nodes=spec["nnodes"], max_nodes=spec["nnodes"], nproc_per_node=spec["nproc_per_node"],
        run_id=job["run_id"], rdzv_backend="c10d", rdzv_endpoint=job["endpoint"],
        rdzv_configs={"join_timeout": spec["join_timeout_s"], "is_host": spec["node_rank"] == 0},
        local_addr=spec.get("local_addr"),
        max_restarts=0, monitor_interval=0.1, start_method=START_METHOD,
        logs_specs=DefaultLogsSpecs(log_dir=str(log_dir)) if log_dir else None)


# set when the supervisor is gone (see stop_when_orphaned)
ORPHANED = threading.Event()


def stop_when_orphaned(supervisor_pid: int, on_orphan=None,
                       poll_s: float = 0.5) -> threading.Thread:
    """Stop this agent and its ranks when the supervisor that started it is gone.

    The supervisor is the agent's parent and its only watchdog. Killed outright (SIGKILL: a
    test runner's or a scheduler's timeout, the OOM killer), it runs no cleanup, and the agent,
    in a session of its own, would be adopted by init with its ranks running on unwatched, for
    ever if one hangs. torch's elastic agent has no parent-death option, and Linux's
    PR_SET_PDEATHSIG fires when the parent *thread* ends, so a daemon thread polls for the
    change of parent and sends this process SIGTERM, which the elastic agent turns into
    stopping its workers; :data:`ORPHANED` is set first. The supervisor's pid comes from
    job.json, written before the agent started: a parent read here, after torch's import,
    would already be init's if the supervisor died in that second. ``on_orphan`` runs first
    where SIGTERM still has Python's default action (before torch's agent starts workers, in
    the rendezvous, which can last minutes): that ends the process with no ``finally``."""
    def watch() -> None:
        while os.getppid() == supervisor_pid:
            time.sleep(poll_s)
        ORPHANED.set()
        if on_orphan is not None and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            on_orphan()
        os.kill(os.getpid(), signal.SIGTERM)
    thread = threading.Thread(target=watch, name="swinkit-parent-watch", daemon=True)
    thread.start()
    return thread


def main(argv: list[str] | None = None) -> int:
    run_dir = Path((argv or sys.argv[1:])[0])
    job = json.loads((run_dir / "job.json").read_text())

    def remove_if_temporary() -> None:  # nobody is left to read or remove the folder
        if job.get("temporary"):
            shutil.rmtree(run_dir, ignore_errors=True)

    supervisor = job.get("supervisor_pid", os.getppid())
    if os.getppid() != supervisor:
        if not alive(supervisor):  # killed while this process started
            remove_if_temporary()
            return 1
        supervisor = os.getppid()  # started through a wrapper that forks: watch the parent
    # (SIGTERM keeps Python's default until torch's agent handles it, once its workers start:
    # a handler of ours would wait for the rendezvous's blocking calls to return)
    stop_when_orphaned(supervisor, on_orphan=remove_if_temporary)
    start_fork_server()
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    from swinkit.launch.rank import rank_main
    node_rank = job["launch"]["node_rank"]
    try:
        elastic_launch(elastic_config(job, run_dir / "elastic"), rank_main)(str(run_dir))
    except ChildFailedError as exc:
        failures = {str(rank): {"exitcode": f.exitcode, "signal": _signal_name(f.exitcode),
                                "local_rank": f.local_rank}
                    for rank, f in exc.failures.items()}
        write_json_atomic(run_dir / f"agent-failures-node{node_rank}.json", failures)
        return 1
    finally:  # the workers are stopped by now
        if ORPHANED.is_set() or os.getppid() != supervisor:  # or died since the last poll
            remove_if_temporary()
    return 0


def stop_fork_server() -> None:
    """End the fork server now that no rank is left to fork: told by the end of its pipe it
    would tear down torch's modules first (half a second), with the supervisor waiting for
    this process group to empty."""
    from multiprocessing import forkserver
    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def exit_now(code: int) -> None:
    """End this process with ``code`` now: output flushed, the fork server stopped and
    multiprocessing's clean-up run (its temp folder removed), the interpreter's tear-down of
    torch's modules skipped (nothing of this agent's is left to clean up by then)."""
    import logging
    from multiprocessing import util
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    stop_fork_server()
    util._exit_function()   # what multiprocessing's atexit hook does at a normal exit
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
