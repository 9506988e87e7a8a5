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


def run_suite(bench: str | None = None, quick: bool = False) -> tuple[Path, int]:
    """asv machine (once), asv run on HEAD in this environment, environment record, publish.

    A failed benchmark does not stop the rest: asv records it as failed and exits 2; the
    environment record and the page are still written, from every result that was stored.

    Returns:
        (the published HTML folder, asv run's exit code: 0, or 2 if any benchmark failed).
    """
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
    if run_code not in (0, 2):  # 2: some benchmark failed, and the others' results are stored
        raise RuntimeError(f"asv run failed with exit code {run_code}")
    write_json_atomic(environment_path(ROOT / conf["results_dir"], asv_machine(), commit),
                      environment_record())
    _asv("publish")
    return ROOT / conf["html_dir"], run_code


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
