"""Launch ranks through torch.distributed's elastic engine, and stop them reliably.

Three processes deep, each with one job:

* the **supervisor** (the caller: the CLI, a benchmark, a test) validates the configuration before
  anything starts, writes ``job.json`` into a run folder, starts the agent in a new session,
  enforces a wall-clock watchdog and Ctrl-C by killing that whole session's process group, and
  reads back results, error records and heartbeats to name the rank that failed first;
* the **agent** (``python -m swinkit.launch.agent RUN_DIR``) runs torch's ``elastic_launch``
  (c10d rendezvous, the same engine as ``torchrun``) for this node's ranks;
* each **rank** (:func:`swinkit.launch.rank.rank_main`) initialises the process group with a short
  timeout, runs the workload entry point, and leaves a result or an error record.

Why a separate agent process: asv's timeout restarts whenever a benchmark prints, and torchrun
notices ranks that exit, not ranks that hang (and then blames the survivor); killing one process group is the
only way to stop everything — agent, ranks, their loader workers — on every exit path.

Multi-node runs start the same entry point on every node (``--nnodes``, ``--node-rank``,
``--rdzv-endpoint host:port``; under SLURM, ``srun`` runs it once per node, see docs/gpu-and-slurm.md); which
address and interface they talk on is :mod:`swinkit.launch.network`'s.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from swinkit.input_checks import check_int, check_positive_number
from swinkit.launch.diagnose import Diagnosis, diagnose
from swinkit.launch.network import (check_gloo_ifname, check_local_addr, gloo_socket_env,
                                  host_interfaces)
from swinkit.launch.terminate import sigterm_raises, stop_process_group
from swinkit.faults import FAULT_ENV, parse_fault
from swinkit.result_files import write_json_atomic



class LaunchError(RuntimeError):
    """The run failed; ``diagnosis`` names the root-cause rank and why."""

    def __init__(self, diagnosis: Diagnosis):
        super().__init__(diagnosis.summary)
        self.diagnosis = diagnosis


@dataclass(frozen=True)
class LaunchConfig:
    """How to start the ranks. Validated by :meth:`validate` before any process starts.

    Attributes:
        nproc_per_node: ranks per node (one per GPU with nccl; CPU processes with gloo), as
            torchrun names it; ``world_size`` is every rank, this times ``nnodes``. A run
            spec's launch takes the spec's own (:class:`swinkit.runs.ddp_run.DDPRunSpec`).
        nnodes, node_rank, rdzv_endpoint: multi-node rendezvous; a free localhost port by default.
        backend: "gloo" or "nccl" ("auto": nccl when CUDA is present).
        pg_timeout_s: process-group timeout (torch's default is 30 min for gloo); also how long
            started ranks wait for a missing one to reach the process group.
        join_timeout_s: how long each node's agent waits for the other nodes at the rendezvous
            (torch's default, 600 s: ``srun`` may start nodes minutes apart, each importing
            torch and MMSeg from a shared file system).
        local_addr: the address this node publishes to the others (None: its FQDN, which they
            may not resolve); the node hosting group rank 0 gives it as ``MASTER_ADDR``.
        wall_timeout_s: the watchdog: the whole run is killed after this many seconds. On NCCL
            keep it above ``pg_timeout_s`` + 70 s (``diagnose.NCCL_ABORT_LAG_S``, which the
            diagnosis names when the limit comes first): NCCL's own watchdog ends a timed-out rank
            only after waiting for its debug dump (SIGABRT 64 s after the timeout, measured
            with torch 2.11), and only that abort lets the diagnosis name the hung rank.
        threads_per_rank: torch compute threads per rank (same at every world size: fair scaling).
        allow_oversubscribe: permit more CPU ranks than cores.
        rdzv_id: rendezvous id; every node of one multi-node run must use the same one.
    """
    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    backend: str = "auto"
    pg_timeout_s: float = 60.0
    join_timeout_s: float = 600.0
    wall_timeout_s: float = 600.0
    threads_per_rank: int = 1
    allow_oversubscribe: bool = False
    rdzv_id: str = "swinkit"
    local_addr: str | None = None

    @property
    def world_size(self) -> int:
        """Every rank of the run: ranks per node times nodes."""
        return self.nproc_per_node * self.nnodes

    def resolved_backend(self) -> str:
        if self.backend != "auto":
            return self.backend
        import torch
        return "nccl" if torch.cuda.is_available() else "gloo"

    def validate(self) -> "LaunchConfig":
        check_int("nproc_per_node", self.nproc_per_node)
        check_int("nnodes", self.nnodes)
        check_int("threads_per_rank", self.threads_per_rank)
        for name in ("pg_timeout_s", "join_timeout_s", "wall_timeout_s"):
            check_positive_number(name, getattr(self, name))
        if not isinstance(self.node_rank, int) or not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"node_rank must be in 0..{self.nnodes - 1}, got {self.node_rank!r}")
        if self.backend not in ("auto", "gloo", "nccl"):
            raise ValueError(f"backend must be auto, gloo or nccl, got {self.backend!r}")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError("rdzv_endpoint (host:port) is required when nnodes > 1")
        if self.rdzv_endpoint is not None:
            _split_endpoint(self.rdzv_endpoint)
        check_local_addr(self.local_addr)
        backend = self.resolved_backend()
        if backend == "nccl":
            import torch
            gpus = torch.cuda.device_count()
            if gpus == 0:
                raise ValueError("backend nccl needs CUDA, and no GPU is visible; use gloo")
            if self.nproc_per_node > gpus:
                raise ValueError(f"nproc_per_node {self.nproc_per_node} > {gpus} GPUs on this "
                                 "node")
        elif not self.allow_oversubscribe:
            cores = os.cpu_count() or 1
            if self.nproc_per_node * self.threads_per_rank > cores:
                raise ValueError(
                    f"nproc_per_node {self.nproc_per_node} x threads_per_rank {self.threads_per_rank} "
                    f"exceeds the {cores} CPU cores; pass allow_oversubscribe to run anyway")
        return self


def _split_endpoint(endpoint: str) -> tuple[str, int]:
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"rdzv_endpoint must be host:port, got {endpoint!r}")
    return host, int(port)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_port_free(endpoint: str) -> None:
    """Fail fast on a busy explicit port on this host (the rendezvous host binds it)."""
    host, port = _split_endpoint(endpoint)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host if host != "localhost" else "127.0.0.1", port))
        except OSError as exc:
            raise ValueError(f"rdzv_endpoint {endpoint}: port {port} is already in use ({exc}); "
                             "choose another, or leave --rdzv-endpoint out for a free one") from exc


@dataclass
class RunResult:
    """What a successful run left: rank 0's gathered result and the run folder (removed
    already where :func:`launch` made it in the temp dir; kept where the caller named it)."""
    result: Any
    run_dir: Path
    wall_s: float
    diagnosis: Diagnosis | None = None
    extra: dict = field(default_factory=dict)


def launch(entry: str, kwargs: dict, cfg: LaunchConfig, run_dir: str | Path | None = None,
           env: dict | None = None, quiet: bool = False) -> RunResult:
    """Run ``entry`` ("module:function") on every rank; return rank 0's gathered result.

    Raises:
        ValueError: bad configuration (before any process starts).
        LaunchError: a rank failed, hung or never joined, or the watchdog fired; its
            ``diagnosis`` names the rank and cause.
        KeyboardInterrupt, Terminated (SIGTERM): after every process of the run has been
            stopped.
    """
    cfg.validate()
    parse_fault((env or {}).get(FAULT_ENV, os.environ.get(FAULT_ENV)))  # malformed: fail here
    rank_env = dict(os.environ, **(env or {}))
    interfaces = host_interfaces()
    check_gloo_ifname(rank_env, interfaces)
    if cfg.rdzv_endpoint and cfg.nnodes == 1:
        check_port_free(cfg.rdzv_endpoint)
    made_here = run_dir is None  # a folder of ours in the temp dir, removed once read
    run_dir = Path(run_dir) if run_dir else Path(tempfile.mkdtemp(prefix="swinkit-run-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    job = dict(entry=entry, kwargs=kwargs, launch=asdict(cfg), backend=cfg.resolved_backend(),
               endpoint=cfg.rdzv_endpoint or f"localhost:{free_port()}", run_id=cfg.rdzv_id,
               temporary=made_here,  # the agent removes it if this process is killed outright
               supervisor_pid=os.getpid())
    write_json_atomic(run_dir / "job.json", job)
    # SWINKIT_RUN_DIR marks every process of this run (agent, ranks, loader workers) so
    # leftovers can be found. Gloo (the clock-offset group beside NCCL, too) binds the
    # interface the host name resolves to unless told: where NCCL_SOCKET_IFNAME names the
    # nodes' network and GLOO_SOCKET_IFNAME is unset, gloo gets the same interface.
    child_env = dict(rank_env, **gloo_socket_env(rank_env, interfaces),
                     SWINKIT_RUN_DIR=str(run_dir))
    cmd = [sys.executable, "-m", "swinkit.launch.agent", str(run_dir)]
    out = subprocess.DEVNULL if quiet else None
    start = time.monotonic()
    agent, watchdog_fired = _run_agent(cmd, child_env, out, cfg.wall_timeout_s, run_dir,
                                       remove_if_stopped=made_here)
    wall = time.monotonic() - start
    # Single node: ranks are 0..N-1. Multi-node: the rendezvous numbers this node's ranks, so
    # only the records found here are known.
    expected = range(cfg.nproc_per_node) if cfg.nnodes == 1 else None
    # A rank missing from the process group is waited for by init_process_group, for
    # pg_timeout_s (join_timeout_s bounds the agents' rendezvous, before any rank starts).
    diagnosis = diagnose(run_dir, expected, agent.returncode,
                         watchdog_s=cfg.wall_timeout_s if watchdog_fired else None,
                         join_timeout_s=cfg.pg_timeout_s, backend=job["backend"])
    if diagnosis is not None:  # the folder stays: its rank records are the evidence
        raise LaunchError(diagnosis)
    result_file = run_dir / "result.json"
    result = json.loads(result_file.read_text()) if result_file.exists() else None
    if made_here:  # read, nothing in it is needed again; an asv run makes hundreds of these
        shutil.rmtree(run_dir, ignore_errors=True)
    return RunResult(result=result, run_dir=run_dir, wall_s=wall)


def _run_agent(cmd, env, out, wall_timeout_s, run_dir: Path, remove_if_stopped: bool):
    """Start the agent in a session of its own and wait for it up to ``wall_timeout_s``:
    (the agent, whether the watchdog fired). Stopped from outside, it stops the agent's session
    and (``remove_if_stopped``) the run folder, nothing in which is read then."""
    watchdog_fired = stopped = False
    # SIGTERM (timeout(1), a scheduler, asv stopping a benchmark) raises here, so the finally
    # below still stops the agent's session, which a signal to our own group does not reach.
    with sigterm_raises():
        agent = subprocess.Popen(cmd, start_new_session=True, env=env, stdout=out, stderr=out)
        try:
            (run_dir / "agent.pid").write_text(str(agent.pid))
            try:
                agent.wait(timeout=wall_timeout_s)
            except subprocess.TimeoutExpired:
                watchdog_fired = True
        except BaseException:  # Ctrl-C, SIGTERM
            stopped = True
            raise
        finally:  # every exit path, Ctrl-C and SIGTERM included: nothing of this run survives
            stop_process_group(agent)
            if stopped and remove_if_stopped:
                shutil.rmtree(run_dir, ignore_errors=True)
    return agent, watchdog_fired
