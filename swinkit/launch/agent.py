"""The per-node agent: ``python -m swinkit.launch.agent RUN_DIR`` (started by swinkit.launch.supervisor).

Runs this node's ranks with torch's ``elastic_launch`` (c10d rendezvous, no restarts) and, when a
rank fails, writes ``agent-failures.json`` with each failed rank's exit code or signal so the
supervisor can tell a killed rank (no error record) from a raising one.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from swinkit.launch.rank import rank_main
from swinkit.result_files import alive, write_json_atomic


def _signal_name(exitcode: int) -> str | None:
    if exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return None


def elastic_config(job: dict, log_dir: Path | None = None) -> LaunchConfig:
    """torch's launch configuration for this node, from the run's ``job.json``; torch's own
    logs in ``log_dir`` (the run folder's, removed with it), else in a temp folder of torch's
    that nothing removes.

    ``local_addr`` goes to torch's ``LaunchConfig`` itself, as torchrun passes it: torch hands
    it to the rendezvous and to the worker spec; put into ``rdzv_configs`` it would reach the
    rendezvous parameters twice and fail.
    """
    spec = job["launch"]
    return LaunchConfig(
        min_nodes=spec["nnodes"], max_nodes=spec["nnodes"], nproc_per_node=spec["nproc_per_node"],
        run_id=job["run_id"], rdzv_backend="c10d", rdzv_endpoint=job["endpoint"],
        rdzv_configs={"join_timeout": spec["join_timeout_s"], "is_host": spec["node_rank"] == 0},
        local_addr=spec.get("local_addr"),
        max_restarts=0, monitor_interval=0.1, start_method="spawn",
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


if __name__ == "__main__":
    raise SystemExit(main())
