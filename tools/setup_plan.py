"""The choices tools/setup.sh makes from what the machine already has: which torch to keep, how
to build mmcv.

Example (what the set-up would do here, in words)::

    python3.11 tools/setup_plan.py show

``tools/setup.sh`` asks for one answer at a time (mmcv-env through ``tools/env_spec.py``, the one
list of what the environment installs), each printed on one line as the arguments the
shell passes on:

    venv-flags         ``--system-site-packages`` when the base interpreter already has a
                       CUDA build of a torch release swinkit supports, so the venv uses it
                       instead of downloading a second torch (``SWINKIT_REUSE_TORCH=0``: never)
    torch-requirement  ``torch==<pin>``, or nothing when the interpreter's torch is supported
    mmcv-env           the ``env`` arguments of mmcv's source build: its CPU ops only, with
                       CUDA hidden and FORCE_CUDA unset (swinkit only needs ``mmcv.ops`` to
                       import; the CUDA ops need a matching nvcc and take hours on a few
                       cores); ``SWINKIT_MMCV_CUDA=1`` builds the CUDA ops too. MAX_JOBS is the
                       user's, or this process's core count

Supported torch: the release pyproject.toml pins (mmcv 2.1.0, the newest mmsegmentation 1.2.2
accepts, compiles only against torch <= 2.13 headers), in any build (``2.13.0+cu126``).
Standard library only: it runs before the virtual environment exists.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = ("import json, torch; "
         "print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda}))")
PROBE_TIMEOUT_S = 300   # importing torch from a shared file system can take minutes


@dataclass(frozen=True)
class Torch:
    """A torch an interpreter imports: its version (``2.13.0+cu126``) and CUDA (None: CPU build)."""
    version: str
    cuda: str | None = None


def torch_pin(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The torch release pyproject.toml pins: ``2.13.0`` (from ``torch==2.13.0``) or a
    series ``2.13.*``; any other form of requirement is refused."""
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    reqs = [d.replace(" ", "") for d in deps if re.match(r"torch\s*[=<>!~]", d)]
    if len(reqs) != 1 or not re.fullmatch(r"torch==\d+\.\d+(\.\d+|\.\*)", reqs[0]):
        raise ValueError(f"pyproject.toml must pin torch as torch==X.Y.Z or X.Y.*, got {reqs}")
    return reqs[0].removeprefix("torch==")


def supported(torch: Torch | None, pin: str) -> bool:
    """Whether ``torch`` satisfies the pin, whatever its build label (``+cu126``, ``+cpu``).

    >>> supported(Torch("2.13.0+cu126", "12.6"), "2.13.0"), supported(Torch("2.14.0"), "2.13.0")
    (True, False)
    >>> supported(Torch("2.13.1"), "2.13.*"), supported(None, "2.13.0")
    (True, False)
    """
    if torch is None:
        return False
    release = torch.version.split("+")[0]
    return release.startswith(pin[:-1]) if pin.endswith(".*") else release == pin


def venv_flags(base: Torch | None, pin: str, environ: dict) -> list[str]:
    """``python -m venv`` flags: share the base interpreter's packages when it has a CUDA build
    of a supported torch, so the set-up keeps that torch (and its CUDA libraries). A CPU torch
    is not worth sharing: the venv gets its own, as on any fresh CPU machine."""
    reuse = environ.get("SWINKIT_REUSE_TORCH", "1")
    if reuse not in ("0", "1"):
        raise ValueError(f"SWINKIT_REUSE_TORCH must be 0 or 1, got {reuse!r}")
    keep = reuse == "1" and supported(base, pin) and base.cuda is not None
    return ["--system-site-packages"] if keep else []


def torch_requirement(current: Torch | None, pin: str, gpu_node: bool = False,
                      environ: dict | None = None) -> list[str]:
    """What pip must install for torch: nothing when the interpreter's torch is supported (a
    CUDA build stays), else the pin (an unsupported torch is replaced).

    A CPU build on a machine with an NVIDIA driver (a ``.venv`` first made on a CPU machine,
    a pip pointed at a CPU index) would be kept silently, every backend would resolve to gloo
    and the GPU check would skip: that is refused with what to do, unless
    ``SWINKIT_ALLOW_CPU_TORCH=1``.

    >>> torch_requirement(Torch("2.13.0+cpu"), "2.13.0"), torch_requirement(Torch("2.12.0"), "2.13.0")
    ([], ['torch==2.13.0'])
    >>> torch_requirement(Torch("2.13.0+cpu"), "2.13.0", gpu_node=True)
    Traceback (most recent call last):
    ...
    ValueError: torch 2.13.0+cpu (CPU build) is installed but this machine has an NVIDIA driver: remove .venv and run tools/setup.sh again (pip then installs torch==2.13.0 with CUDA), or set SWINKIT_ALLOW_CPU_TORCH=1 to keep it
    """
    allow = (environ or {}).get("SWINKIT_ALLOW_CPU_TORCH", "0")
    if allow not in ("0", "1"):
        raise ValueError(f"SWINKIT_ALLOW_CPU_TORCH must be 0 or 1, got {allow!r}")
    if supported(current, pin):
        if gpu_node and current.cuda is None and allow == "0":
            raise ValueError(f"{describe(current)} is installed but this machine has an NVIDIA "
                             "driver: remove .venv and run tools/setup.sh again (pip then "
                             f"installs torch=={pin} with CUDA), or set SWINKIT_ALLOW_CPU_TORCH=1 "
                             "to keep it")
        return []
    return [f"torch=={pin}"]


def gpu_node() -> bool:
    """Whether the NVIDIA kernel driver is loaded here (what torch's CUDA build needs)."""
    return os.path.exists("/proc/driver/nvidia/version")


def mmcv_build_env(environ: dict, cpus: int) -> list[str]:
    """``env`` arguments for ``pip install mmcv`` from source.

    mmcv's setup.py compiles its CUDA ops when ``torch.cuda.is_available()`` or
    ``FORCE_CUDA=1``; by default neither may hold (CPU ops are all swinkit needs).

    >>> mmcv_build_env({"FORCE_CUDA": "1"}, 16)
    ['-u', 'FORCE_CUDA', 'CUDA_VISIBLE_DEVICES=', 'MMCV_WITH_OPS=1', 'MAX_JOBS=16']
    >>> mmcv_build_env({"SWINKIT_MMCV_CUDA": "1", "MAX_JOBS": "4"}, 16)
    ['FORCE_CUDA=1', 'MMCV_WITH_OPS=1', 'MAX_JOBS=4']
    """
    cuda = environ.get("SWINKIT_MMCV_CUDA", "0") or "0"
    if cuda not in ("0", "1"):
        raise ValueError(f"SWINKIT_MMCV_CUDA must be 0 or 1, got {cuda!r}")
    jobs = environ.get("MAX_JOBS") or str(cpus)
    if not jobs.isdigit() or int(jobs) < 1:
        raise ValueError(f"MAX_JOBS must be a whole number >= 1, got {jobs!r}")
    device = ["FORCE_CUDA=1"] if cuda == "1" else ["-u", "FORCE_CUDA", "CUDA_VISIBLE_DEVICES="]
    return [*device, "MMCV_WITH_OPS=1", f"MAX_JOBS={jobs}"]


def probe_torch(python: str) -> Torch | None:
    """The torch ``python`` imports, or None where it has none or it fails to import (a torch
    that cannot be imported is not a working one to keep)."""
    proc = subprocess.run([python, "-c", PROBE], capture_output=True, text=True,
                          timeout=PROBE_TIMEOUT_S, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    if proc.returncode != 0:
        if "No module named 'torch'" not in proc.stderr:
            lines = proc.stderr.strip().splitlines() or ["(no output)"]
            print(f"[setup]   torch in {python} does not import: {lines[-1]}", file=sys.stderr)
        return None
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    return Torch(info["version"], info["cuda"])


def cpu_count() -> int:
    """Cores this process may run on (a cgroup or taskset limit, not the machine's total)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def describe(torch: Torch | None) -> str:
    """``torch 2.13.0+cu126 (CUDA 12.6)``, for the set-up's log."""
    if torch is None:
        return "no torch"
    return f"torch {torch.version} ({'CUDA ' + torch.cuda if torch.cuda else 'CPU build'})"


def answer(what: str, python: str, environ: dict) -> list[str]:
    """One answer for tools/setup.sh (see the module docstring)."""
    if what == "mmcv-env":
        return mmcv_build_env(environ, cpu_count())
    pin = torch_pin()
    found = probe_torch(python)
    if what == "venv-flags":
        return venv_flags(found, pin, environ)
    return torch_requirement(found, pin, gpu_node(), environ)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=["venv-flags", "torch-requirement", "mmcv-env", "show"])
    p.add_argument("--python", default=sys.executable,
                   help="the interpreter whose torch is looked at (default: this one)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    environ = dict(os.environ)
    if args.what != "show":
        try:
            print(" ".join(answer(args.what, args.python, environ)))
        except ValueError as exc:
            print(f"[setup] {exc}", file=sys.stderr)
            return 2
        return 0
    found = probe_torch(args.python)
    pin = torch_pin()
    print(f"{args.python}: {describe(found)}; swinkit supports torch=={pin}")
    print(f"venv flags:        {' '.join(venv_flags(found, pin, environ)) or '(none)'}")
    try:
        wanted = " ".join(torch_requirement(found, pin, gpu_node(), environ)) or "(keep the one found)"
    except ValueError as exc:
        wanted = f"refused: {exc}"
    print(f"torch to install:  {wanted}")
    print(f"mmcv build:        env {' '.join(mmcv_build_env(environ, cpu_count()))} "
          "pip install --no-build-isolation mmcv==2.1.0")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
