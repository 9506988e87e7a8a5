"""What every rank runs: process-group set-up, the workload entry point, and its records.

Each rank leaves in the run folder a heartbeat (``hb-rank{r}.json``: the last step it reached),
and on failure an error record (``error-rank{r}.json``: exception, traceback, whether it was a
communication error, i.e. a symptom of another rank's failure). Rank 0 gathers every rank's
return value and writes ``result.json`` atomically.

Faults for testing come through one switch, ``$SWINKIT_FAULT`` (parsed by :mod:`swinkit.faults`);
the rank kinds act in :meth:`Rank.heartbeat` at the named step. ``oom`` caps the rank's address
space just above what it uses, so its next large allocation fails.
"""
from __future__ import annotations

import importlib
import json
import os
import signal
import time
import traceback
import warnings
from datetime import timedelta
from pathlib import Path

from swinkit.faults import FAULT_ENV, RANK_KINDS, current_fault
from swinkit.result_files import write_json_atomic

# A rank whose collective broke (a symptom: a peer died or hung) waits this long before it
# exits. torch's agent reports the first rank to exit; a killed rank's exit reaches it through
# the fork server the ranks are forked from, a few milliseconds after the kernel ended it, while
# a symptom rank can raise, write its record and exit within them: the wait keeps the root
# cause first. It costs a failed run this much, never a healthy one.
SYMPTOM_GRACE_S = 1.0
COMM_ERROR_HINTS = ("connection closed", "connection reset", "timed out", "timeout", "gloo",
                    "nccl", "broken pipe", "socket", "store", "barrier", "peer")


def is_comm_error(exc: BaseException) -> bool:
    """True for errors that are symptoms of another rank's failure (a collective that broke)."""
    name = type(exc).__name__
    if name in ("DistBackendError", "DistNetworkError", "DistStoreError"):
        return True
    text = str(exc).lower()
    return name in ("RuntimeError", "TimeoutError") and any(h in text for h in COMM_ERROR_HINTS)


class Rank:
    """Handle the workload entry point gets: rank, world size, heartbeat, fault injection."""

    def __init__(self, run_dir: Path, rank: int, world_size: int, local_rank: int):
        self.run_dir, self.rank, self.world_size, self.local_rank = run_dir, rank, world_size, local_rank
        fault = current_fault()
        self.fault = fault if fault and fault.kind in RANK_KINDS and fault.on_rank(rank) else None

    def heartbeat(self, step: int, stage: str = "step") -> None:
        """Record progress (outside measured regions: it writes a small file). Steps < 0 are
        stages around the workload (starting, joined, done), not iterations."""
        path = self.run_dir / f"hb-rank{self.rank}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"rank": self.rank, "step": step, "stage": stage,
                                   "time": time.time()}))
        os.replace(tmp, path)
        if self.fault and stage == "step" and step == self.fault.step:
            _act(self.fault.kind, self.rank)


def _act(kind: str, rank: int) -> None:
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "raise":
        raise RuntimeError(f"injected failure on rank {rank} ({os.environ.get(FAULT_ENV)})")
    elif kind == "hang":
        while True:
            time.sleep(1)
    elif kind == "oom":
        import resource

        import psutil
        used = psutil.Process().memory_info().vms
        resource.setrlimit(resource.RLIMIT_AS, (used + (64 << 20), resource.RLIM_INFINITY))
    elif kind == "spin":
        while True:
            print(f"rank {rank}: busy, no progress", flush=True)
            time.sleep(0.2)


def rank_main(run_dir: str):
    """Entry point of every rank under elastic_launch (must be importable: spawn)."""
    import torch
    import torch.distributed as dist

    # MMSeg warns about its own deprecations once per rank; they say nothing about the run.
    warnings.filterwarnings("ignore", category=UserWarning, module=r"mmseg\.")
    run_dir = Path(run_dir)
    job = json.loads((run_dir / "job.json").read_text())
    spec = job["launch"]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    handle = Rank(run_dir, rank, world, int(os.environ.get("LOCAL_RANK", 0)))
    torch.set_num_threads(spec["threads_per_rank"])
    try:
        if handle.fault and handle.fault.kind == "nojoin":
            _act("hang", rank)
        handle.heartbeat(-1, "starting")  # reached the rendezvous: "never joined" is told apart
        backend = job["backend"]
        if backend == "nccl":
            torch.cuda.set_device(handle.local_rank)
        dist.init_process_group(backend, timeout=timedelta(seconds=spec["pg_timeout_s"]))
        handle.heartbeat(-1, "joined")
        module, _, func = job["entry"].partition(":")
        result = getattr(importlib.import_module(module), func)(handle, **job["kwargs"])
        gathered = [None] * world
        dist.all_gather_object(gathered, result)
        if rank == 0:
            write_json_atomic(run_dir / "result.json", {"ranks": gathered})
        handle.heartbeat(-2, "done")
        return result
    except BaseException as exc:
        symptom = is_comm_error(exc)
        write_json_atomic(run_dir / f"error-rank{rank}.json", {
            "rank": rank, "type": type(exc).__name__, "message": str(exc)[:2000],
            "traceback": traceback.format_exc()[-6000:], "comm_error": symptom,
            "time": time.time()})
        if symptom:
            time.sleep(SYMPTOM_GRACE_S)
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
