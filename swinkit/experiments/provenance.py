"""What a saved result ran on, so that a figure quoted from it can be traced and made again:
the commit (and whether the checkout had changes), the machine, the time, and how busy the host
was with other work meanwhile. Shared by validate, scorecard and converge records."""
from __future__ import annotations

import datetime
import os
import resource
import socket
import subprocess
import time
from pathlib import Path

from swinkit.runs.ddp_run import environment


def machine() -> dict:
    return {"hostname": socket.gethostname(), **environment()}


def git_commit(repo: str | Path | None = None) -> dict:
    """``{"commit", "dirty"}`` of the checkout swinkit runs from; None where there is no git."""
    where = Path(repo) if repo else Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True,
                                text=True, timeout=30, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                    cwd=where, capture_output=True, text=True, timeout=30,
                                    check=True).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": dirty}


def now_utc() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def foreign_load():
    """Start measuring; the returned function gives the cores' worth of CPU that anything
    outside this process tree took meanwhile (the machine's busy time from /proc/stat, steal
    included, minus this process's and its waited-for children's). NaN where unreadable."""
    def sample():
        try:
            with open("/proc/stat") as f:
                fields = f.readline().split()[1:]
        except OSError:
            return None
        busy = sum(int(fields[i]) for i in (0, 1, 2, 5, 6, 7)) / os.sysconf("SC_CLK_TCK")
        own = sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                     resource.getrusage(resource.RUSAGE_CHILDREN)))
        return time.monotonic(), busy, own

    start = sample()

    def stop() -> float:
        end = sample()
        if start is None or end is None:
            return float("nan")
        (t0, busy0, own0), (t1, busy1, own1) = start, end
        return max((busy1 - busy0) - (own1 - own0), 0.0) / max(t1 - t0, 1e-9)
    return stop
