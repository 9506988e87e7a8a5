"""Run the asv suite for the current checkout and publish it: the README's main job.

asv's fast path benchmarks the working tree in the existing environment
(``asv run --python=same``), which records nothing without ``--set-commit-hash``; the history
path (``asv run A..B``) builds each commit in its own environment (see asv.conf.json). Next to
asv's results this writes what asv's machine info lacks (library versions, GPUs, topology,
thread policy) as ``.asv/swinkit-environment/<machine>/<commit>.json`` (outside asv's results
folder, which asv expects to hold only its own files); bench_predict's held-out report goes
beside it (``store_held_out``).
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from swinkit.attribution.asv_names import environment_path, held_out_path
from swinkit.result_files import write_json_atomic

ROOT = Path(__file__).resolve().parents[1]
# Seconds asv's processes get after SIGTERM before SIGKILL: enough for a benchmark's launch to
# stop its ranks (swinkit.launch.terminate waits up to twice its own 5 s grace).
ASV_STOP_GRACE_S = 15.0
# The commit asv files this run's results under and asv's results folder, for the benchmarks'
# side records: asv sets ASV_COMMIT only where it installs a commit (not in `asv run
# --python=same --set-commit-hash`), and ASV_CONF_DIR is its working folder, not --config's.
COMMIT_ENV, RESULTS_ENV = "SWINKIT_ASV_COMMIT", "SWINKIT_ASV_RESULTS"


def read_conf(path: Path = ROOT / "asv.conf.json") -> dict:
    """asv.conf.json as a dict (asv allows // comment lines; json does not)."""
    return json.loads("\n".join(line for line in path.read_text().splitlines()
                                if not line.strip().startswith("//")))


def _asv(*args: str, check: bool = True) -> int:
    """Run asv; its exit code. asv runs in a session of its own, stopped with everything it
    started (its fork server, the benchmark processes and their launches) on every way out
    of here: Ctrl-C, SIGTERM (``timeout``, a scheduler) or an error."""
    from swinkit.launch.terminate import run_in_session

    cmd = [sys.executable, "-m", "asv", "--config", str(ROOT / "asv.conf.json"), *args]
    print("$ asv " + " ".join(args), flush=True)
    returncode = run_in_session(cmd, cwd=ROOT, grace_s=ASV_STOP_GRACE_S)
    if check and returncode != 0:
        raise RuntimeError(f"asv {args[0]} failed with exit code {returncode}")
    return returncode


def head_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("not a git checkout: asv needs a commit to file results under")
    return out.stdout.strip()


def environment_record() -> dict:
    from swinkit.runs.ddp_run import environment
    from swinkit.runs.sweep import default_backend, default_preset, oversubscribe_allowed
    env = environment()
    env["threads_per_rank"] = 1
    env["oversubscribe"] = oversubscribe_allowed()
    env["preset"] = default_preset()
    env["backend"] = default_backend()
    if shutil.which("nvidia-smi"):
        topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True)
        env["gpu_topology"] = topo.stdout if topo.returncode == 0 else None
    return env


def run_suite(bench: str | None = None, quick: bool = False,
              timings: dict | None = None) -> tuple[Path, int]:
    """asv machine (once), asv run on HEAD in this environment, environment record, publish.

    A failed benchmark does not stop the rest: asv records it as failed and exits 2; the
    environment record and the page are still written, from every result that was stored.
    ``timings``, where given, receives what :func:`timing_lines` reports: the run's and the
    publish's seconds, the load average around them, each setup_cache's seconds.

    Returns:
        (the published HTML folder, asv run's exit code: 0, or 2 if any benchmark failed).
    """
    timings = {} if timings is None else timings
    timings["load_before"] = os.getloadavg()
    start = time.monotonic()
    if asv_machine() is None:  # asv run would stop at "No information stored about machine"
        _asv("machine", "--yes")
    commit = head_commit()
    conf = read_conf()
    os.environ[COMMIT_ENV] = commit  # asv's benchmark processes inherit these
    os.environ[RESULTS_ENV] = str(ROOT / conf["results_dir"])
    args = ["run", "--python=same", "--set-commit-hash", commit, "--record-samples",
            "--show-stderr"]
    if quick:
        args.append("--quick")
    if bench:
        args += ["-b", bench]
    run_code = _asv(*args, check=False)
    timings["run_s"] = time.monotonic() - start
    if run_code not in (0, 2):  # 2: some benchmark failed, and the others' results are stored
        raise RuntimeError(f"asv run failed with exit code {run_code}")
    write_json_atomic(environment_path(ROOT / conf["results_dir"], asv_machine(), commit),
                      environment_record())
    published = time.monotonic()
    _asv("publish")
    timings["publish_s"] = time.monotonic() - published
    timings["load_after"] = os.getloadavg()
    timings["setup_cache_s"] = setup_cache_seconds(ROOT / conf["results_dir"], asv_machine(),
                                                   commit)
    return ROOT / conf["html_dir"], run_code


def setup_cache_seconds(results_dir: Path, machine: str | None, commit: str) -> dict[str, float]:
    """Each setup_cache's seconds in asv's results of ``commit`` on ``machine`` (asv records
    them as ``<setup_cache FILE:LINE>``), by benchmark file, longest first; empty where there
    are none."""
    found: dict[str, float] = {}
    for path in sorted((Path(results_dir) / str(machine)).glob(f"{commit[:8]}-*.json")):
        try:
            durations = json.loads(path.read_text()).get("durations") or {}
        except (OSError, ValueError):
            continue
        for key, seconds in durations.items():
            if key.startswith("<setup_cache "):
                name = key[len("<setup_cache "):-1].split(":")[0]
                found[name] = found.get(name, 0.0) + seconds
    return dict(sorted(found.items(), key=lambda kv: -kv[1]))


def timing_lines(timings: dict) -> list[str]:
    """What the run cost, as tools/suite.py prints it (the figures docs/benchmarks.md quotes).

    >>> timing_lines({"run_s": 420.0, "publish_s": 9.5, "load_before": (0.1, 0.2, 0.3),
    ...               "load_after": (1.9, 1.5, 0.8), "setup_cache_s": {"bench_ddp": 100.0}})
    ['asv run 420 s (7.0 min), publish 10 s; load average before 0.10 0.20 0.30, after 1.90 1.50 0.80', 'setup_cache: bench_ddp 100 s']
    """
    load = " ".join(f"{x:.2f}" for x in timings["load_before"])
    after = " ".join(f"{x:.2f}" for x in timings["load_after"])
    lines = [f"asv run {timings['run_s']:.0f} s ({timings['run_s'] / 60:.1f} min), publish "
             f"{timings['publish_s']:.0f} s; load average before {load}, after {after}"]
    caches = timings.get("setup_cache_s") or {}
    if caches:
        lines.append("setup_cache: " + ", ".join(f"{k} {v:.0f} s" for k, v in caches.items()))
    return lines


def asv_machine(machine_file: Path | None = None) -> str | None:
    """The machine asv files this host's results under, chosen as asv chooses it
    (asv.machine.MachineCollection.load): the entry named after this host, else the only entry
    (a home folder shared by a cluster's nodes holds the first node's). None where asv would
    refuse: no file, or several machines and none named after this host."""
    machine_file = machine_file or Path.home() / ".asv-machine.json"
    if not machine_file.exists():
        return None
    machines = {k: v for k, v in json.loads(machine_file.read_text()).items() if k != "version"}
    name = platform.node()
    if name not in machines:
        if len(machines) != 1:
            return None
        name = next(iter(machines))
    return machines[name].get("machine", name)


def store_held_out(report: dict) -> Path | None:
    """Keep bench_predict's held-out report beside asv's results for this run's commit, so
    ``tools/attribute.py --predict N`` can predict from its basis and timings later without a
    run (asv stores only the numbers a track_* returns). Called in asv's benchmark process;
    None, with nothing written, where the commit or the results folder is not known (a plain
    `asv run --python=same`)."""
    commit = os.environ.get(COMMIT_ENV) or os.environ.get("ASV_COMMIT")
    results = os.environ.get(RESULTS_ENV)
    conf = Path(os.environ.get("ASV_CONF_DIR", "/nonexistent")) / "asv.conf.json"
    if not results and conf.exists():  # asv's own run in the project's folder (asv run A..B)
        results = conf.parent / read_conf(conf)["results_dir"]
    machine = asv_machine()
    if not (commit and results and machine):
        return None
    path = held_out_path(Path(results), machine, commit)
    write_json_atomic(path, {**report, "commit": commit})
    return path
