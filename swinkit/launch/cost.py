"""What a launch costs before any work: where a no-op launch's seconds go.

One measurement is a fresh supervisor process (Python started, :mod:`swinkit.launch` imported,
as every command and benchmark does) launching an entry point that does nothing on N gloo
ranks, stamped at four moments: ``launch()`` called, each rank's process started (read from
``/proc``: a forked rank's fork, a spawned rank's exec), each rank entering the entry point,
``launch()`` returned. The seconds between them:

    to_ranks_s     launch() -> the first rank process: the agent's start (Python, torch,
                   the rendezvous), the ranks' processes started
    rank_start_s   the first rank process -> the last rank in its entry point: the ranks'
                   own start (imports) and the process group
    finish_s       the last rank in its entry point -> launch() returned: the results
                   gathered, the ranks and the agent ended, the supervisor's clean-up
    total_s        launch() called -> returned

Linux only (a process's start time in ``/proc``). A second checkout (``against``, e.g. an
older commit's tree) is measured interleaved with this one, A B A B, so both see the same
load: the before and after of a change, in one run.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PHASES = ("to_ranks_s", "rank_start_s", "finish_s", "total_s")

# the entry point the ranks run: nothing but its stamps (a module of its own, put on the ranks'
# path by the measurement, so an older checkout is measured with the same entry)
PROBE = '''
import os, time

def noop(rank):
    """Seconds since this process started (CLOCK_BOOTTIME against /proc's start tick)."""
    with open(f"/proc/{os.getpid()}/stat") as f:
        start_tick = int(f.read().rpartition(")")[2].split()[19])
    alive = time.clock_gettime(time.CLOCK_BOOTTIME) - start_tick / os.sysconf("SC_CLK_TCK")
    now = time.time()
    return {"rank": rank.rank, "entered": now, "started": now - alive}
'''

SUPERVISOR = '''
import dataclasses, json, sys, time
from swinkit.launch import LaunchConfig, launch
world = int(sys.argv[1])
# ranks per node were "world_size" before they were "nproc_per_node": older checkouts too
names = {f.name for f in dataclasses.fields(LaunchConfig)}
ranks = {"nproc_per_node" if "nproc_per_node" in names else "world_size": world}
called = time.time()
run = launch("swinkit_launch_probe:noop", {}, LaunchConfig(**ranks, backend="gloo",
             allow_oversubscribe=True), quiet=True)
print(json.dumps({"called": called, "returned": time.time(), "ranks": run.result["ranks"]}))
'''


def phases(stamps: dict) -> dict:
    """The seconds of :data:`PHASES` from one launch's stamps.

    >>> s = {"called": 10.0, "returned": 16.0,
    ...      "ranks": [{"started": 12.0, "entered": 14.0}, {"started": 12.5, "entered": 15.0}]}
    >>> phases(s)
    {'to_ranks_s': 2.0, 'rank_start_s': 3.0, 'finish_s': 1.0, 'total_s': 6.0}
    """
    first = min(r["started"] for r in stamps["ranks"])
    last = max(r["entered"] for r in stamps["ranks"])
    return {"to_ranks_s": first - stamps["called"], "rank_start_s": last - first,
            "finish_s": stamps["returned"] - last,
            "total_s": stamps["returned"] - stamps["called"]}


def measure_once(checkout: Path, world_size: int, probe_dir: Path, timeout_s: float = 300) -> dict:
    """One no-op launch of ``world_size`` ranks by a fresh supervisor using ``checkout``'s
    swinkit; its :func:`phases`. RuntimeError with the supervisor's stderr if it failed."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(checkout), str(probe_dir)]))
    proc = subprocess.run([sys.executable, "-c", SUPERVISOR, str(world_size)], env=env,
                          cwd=checkout, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"no-op launch with {checkout} failed: {proc.stderr[-2000:]}")
    return phases(json.loads(proc.stdout.strip().splitlines()[-1]))


def measure(checkouts: dict[str, Path], world_sizes, repeats: int, progress=print) -> dict:
    """Every checkout at every world size, ``repeats`` times, interleaved; medians and every
    sample of each phase, and the load average before and after."""
    samples = {(name, ws): [] for name in checkouts for ws in world_sizes}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="swinkit-launch-cost-") as probe_dir:
        (Path(probe_dir) / "swinkit_launch_probe.py").write_text(PROBE)
        for i in range(repeats):
            for ws in world_sizes:
                for name, checkout in checkouts.items():
                    got = measure_once(Path(checkout), ws, Path(probe_dir))
                    samples[(name, ws)].append(got)
                    progress(f"  {name}, world size {ws}, launch {i + 1}/{repeats}: "
                             f"{got['total_s']:.2f} s")
    rows = [{"checkout": name, "path": str(checkouts[name]), "world_size": ws,
             **{p: statistics.median(s[p] for s in got) for p in PHASES}, "samples": got}
            for (name, ws), got in samples.items()]
    return {"rows": rows, "repeats": repeats, "cpu_count": os.cpu_count(),
            "load_average_before": load_before, "load_average_after": os.getloadavg()}


def table(result: dict) -> str:
    """The medians, one row per checkout and world size, with the load beside them."""
    head = f"{'checkout':<10}{'N':>3}" + "".join(f"{p[:-2]:>14}" for p in PHASES)
    lines = [f"no-op launch, median of {result['repeats']} (seconds)", head]
    for r in result["rows"]:
        lines.append(f"{r['checkout']:<10}{r['world_size']:>3}"
                     + "".join(f"{r[p]:>14.2f}" for p in PHASES))
    before = ", ".join(f"{x:.2f}" for x in result["load_average_before"])
    after = ", ".join(f"{x:.2f}" for x in result["load_average_after"])
    lines.append(f"load average (1, 5, 15 min) before: {before}; after: {after}; "
                 f"{result['cpu_count']} CPUs")
    return "\n".join(lines)
