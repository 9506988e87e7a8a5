"""Run the asv suite for the current checkout and publish it: the README's main job.

asv's fast path benchmarks the working tree in the existing environment
(``asv run --python=same``), which records nothing without ``--set-commit-hash``; the history
path (``asv run A..B``) builds each commit in its own environment (see asv.conf.json). Next to
asv's results this writes what asv's machine info lacks (library versions, GPUs, topology,
thread policy) as ``swinkit-environment-<commit>.json``.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from swinkit.measure.atomic import write_json_atomic

ROOT = Path(__file__).resolve().parents[1]


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
    from swinkit.workloads.sweep import oversubscribe_allowed
    env = environment()
    env["threads_per_rank"] = 1
    env["oversubscribe"] = oversubscribe_allowed()
    env["preset"] = os.environ.get("SWINKIT_PRESET")
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
    conf = json.loads("\n".join(l for l in (ROOT / "asv.conf.json").read_text().splitlines()
                                if not l.strip().startswith("//")))
    machine = json.loads((Path.home() / ".asv-machine.json").read_text())
    name = next(k for k in machine if k != "version")
    record = ROOT / conf["results_dir"] / name / f"swinkit-environment-{commit[:8]}.json"
    write_json_atomic(record, environment_record())
    _asv("publish")
    return ROOT / conf["html_dir"]
