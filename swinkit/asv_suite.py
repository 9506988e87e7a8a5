"""Run the asv suite for the current checkout and publish it: the README's main job.

asv's fast path benchmarks the working tree in the existing environment
(``asv run --python=same``), which records nothing without ``--set-commit-hash``; the history
path (``asv run A..B``) builds each commit in its own environment (see asv.conf.json). Next to
asv's results this writes what asv's machine info lacks (library versions, GPUs, topology,
thread policy) as ``.asv/swinkit-environment/<machine>/<commit>.json`` (outside asv's results
folder, which asv expects to hold only its own files).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from swinkit.attribution.asv_names import environment_path
from swinkit.files import write_json_atomic

ROOT = Path(__file__).resolve().parents[1]


def read_conf(path: Path = ROOT / "asv.conf.json") -> dict:
    """asv.conf.json as a dict (asv allows // comment lines; json does not)."""
    return json.loads("\n".join(line for line in path.read_text().splitlines()
                                if not line.strip().startswith("//")))


def _asv(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "asv", "--config", str(ROOT / "asv.conf.json"), *args]
    print("$ asv " + " ".join(args), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT)
    if check and proc.returncode != 0:
        raise RuntimeError(f"asv {args[0]} failed with exit code {proc.returncode}")
    return proc


def head_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("not a git checkout: asv needs a commit to file results under")
    return out.stdout.strip()


def environment_record() -> dict:
    from swinkit.workloads.ddp_run import environment
    from swinkit.workloads.sweep import default_backend, default_preset, oversubscribe_allowed
    env = environment()
    env["threads_per_rank"] = 1
    env["oversubscribe"] = oversubscribe_allowed()
    env["preset"] = default_preset()
    env["backend"] = default_backend()
    if shutil.which("nvidia-smi"):
        topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True)
        env["gpu_topology"] = topo.stdout if topo.returncode == 0 else None
    return env


def run_suite(bench: str | None = None, quick: bool = False) -> Path:
    """asv machine (once), asv run on HEAD in this environment, environment record, publish.

    Returns:
        The published HTML folder.
    """
    if not (Path.home() / ".asv-machine.json").exists():
        _asv("machine", "--yes")
    commit = head_commit()
    args = ["run", "--python=same", "--set-commit-hash", commit, "--record-samples",
            "--show-stderr"]
    if quick:
        args.append("--quick")
    if bench:
        args += ["-b", bench]
    _asv(*args)
    conf = read_conf()
    machine = json.loads((Path.home() / ".asv-machine.json").read_text())
    name = next(k for k in machine if k != "version")
    write_json_atomic(environment_path(ROOT / conf["results_dir"], name, commit),
                      environment_record())
    _asv("publish")
    return ROOT / conf["html_dir"]
