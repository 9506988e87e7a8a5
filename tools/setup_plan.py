"""The choices tools/setup.sh makes from what the machine already has: whether the Python is one
swinkit runs on, which torch to keep, whether a full mmcv is already there, where pip installs
from.

Example (what the set-up would do here, in words)::

    python3.11 tools/setup_plan.py show

``tools/setup.sh`` asks for one answer at a time, each printed on one line as the words the
shell passes on:

    check              nothing, or exit 2 with the reason: this Python is outside 3.11-3.13, its
                       torch is older than 2.5, or the wheelhouse lacks a package (by name)
    share-base         with ``--venv DIR``: when the base interpreter has a torch swinkit
                       supports, CPU or CUDA build, the venv shares that interpreter's packages
                       (a ``.pth`` that adds its site-packages, as ``--system-site-packages``
                       would, but also where the base is itself a venv or conda environment, as
                       on the GPU nodes seen so far), so it keeps that torch instead of
                       installing a second one (``SWINKIT_REUSE_TORCH=0``: never); prints the
                       folders shared
    torch-requirement  ``torch==<reference>``, or nothing when the interpreter's torch is kept
    keep-mmcv          ``yes`` when a compiled mmcv that MMSegmentation accepts already loads
                       (a full mmcv the user built: used as is, mmcv-lite not installed)
    pip-source         ``--no-index --find-links DIR`` with ``SWINKIT_WHEELHOUSE=DIR`` (an
                       offline node; tools/wheelhouse.py writes DIR), else nothing

Supported releases: ``swinkit/supported.py``, the one list. Standard library only: it runs
before the virtual environment exists.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = ("import json, torch; "
         "print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda}))")
# a compiled mmcv that loads, at a version MMSegmentation 1.2.2 accepts (2.0.0rc4 <= v < 2.2.0)
# (not swinkit's stand-in, which a .pth line installs in every interpreter of the environment)
MMCV_PROBE = ("import importlib.util as u, mmcv; "
              "assert u.find_spec('mmcv._ext') is not None; import mmcv._ext; "
              "assert not getattr(mmcv._ext, 'STAND_IN', False), 'the stand-in'; "
              "v = tuple(int(p) for p in mmcv.__version__.split('.')[:2]); "
              "assert (2, 0) <= v < (2, 2), mmcv.__version__")
PROBE_TIMEOUT_S = 300   # importing torch from a shared file system can take minutes


def _module(name: str, path: Path):
    """A module of this checkout by file path, without importing the package around it."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


supported = _module("swinkit_supported", ROOT / "swinkit" / "supported.py")
wheelhouse = _module("swinkit_wheelhouse", ROOT / "tools" / "wheelhouse.py")


@dataclass(frozen=True)
class Torch:
    """A torch an interpreter imports: its version (``2.13.0+cu126``) and CUDA (None: CPU build)."""
    version: str
    cuda: str | None = None


def keepable(torch: Torch | None) -> bool:
    """Whether ``torch`` is one swinkit runs on (any build); raises below the minimum.

    >>> keepable(Torch("2.11.0+cu130", "13.0")), keepable(Torch("2.5.1")), keepable(None)
    (True, True, False)
    """
    if torch is None:
        return False
    supported.check_torch(torch.version)  # ValueError below the minimum
    return True


def _reuse(environ: dict) -> bool:
    reuse = environ.get("SWINKIT_REUSE_TORCH", "1")
    if reuse not in ("0", "1"):
        raise ValueError(f"SWINKIT_REUSE_TORCH must be 0 or 1, got {reuse!r}")
    return reuse == "1"


def shared_sites(base: Torch | None, environ: dict, sites: list[str]) -> list[str]:
    """The base interpreter's site-packages folders the venv shares: all of ``sites`` when it
    has a torch swinkit supports, so the environment keeps that torch (and its CUDA libraries).

    >>> shared_sites(Torch("2.5.1"), {}, ["/opt/torch/lib/python3.12/site-packages"])
    ['/opt/torch/lib/python3.12/site-packages']
    >>> shared_sites(None, {}, ["/usr/lib/python3/dist-packages"])
    []
    >>> shared_sites(Torch("2.11.0+cu130", "13.0"), {"SWINKIT_REUSE_TORCH": "0"}, ["/x"])
    []
    """
    if not _reuse(environ) or not keepable(base):
        return []
    return list(sites)


def share(venv: Path, python_version: tuple[int, ...], sites: list[str]) -> Path | None:
    """Write the ``.pth`` that adds ``sites`` (with their own ``.pth`` files, as site does for
    the system's) to the venv's site-packages, after its own; remove it when there are none."""
    purelib = venv / "lib" / f"python{python_version[0]}.{python_version[1]}" / "site-packages"
    pth = purelib / "_swinkit_base_site.pth"
    if not sites:
        pth.unlink(missing_ok=True)
        return None
    purelib.mkdir(parents=True, exist_ok=True)
    pth.write_text("".join(f"import site; site.addsitedir({s!r})\n" for s in sites))
    return pth


def torch_requirement(current: Torch | None, gpu_node: bool = False,
                      environ: dict | None = None) -> list[str]:
    """What pip must install for torch: nothing when the interpreter's torch is kept, else the
    reference release.

    A CPU build on a machine with an NVIDIA driver (a ``.venv`` first made on a CPU machine,
    a pip pointed at a CPU index) would be kept silently, every backend would resolve to gloo
    and the GPU check would skip: that is refused with what to do, unless
    ``SWINKIT_ALLOW_CPU_TORCH=1``.

    >>> torch_requirement(Torch("2.5.1+cpu")), torch_requirement(None)
    ([], ['torch==2.13.0'])
    >>> torch_requirement(Torch("2.13.0+cpu"), gpu_node=True)
    Traceback (most recent call last):
    ...
    ValueError: torch 2.13.0+cpu (CPU build) is installed but this machine has an NVIDIA driver: remove .venv and run tools/setup.sh with a Python whose torch is a CUDA build (or SWINKIT_REUSE_TORCH=0 for pip's default torch==2.13.0), or set SWINKIT_ALLOW_CPU_TORCH=1 to keep it
    """
    environ = environ or {}
    allow = environ.get("SWINKIT_ALLOW_CPU_TORCH", "0")
    if allow not in ("0", "1"):
        raise ValueError(f"SWINKIT_ALLOW_CPU_TORCH must be 0 or 1, got {allow!r}")
    if not keepable(current):
        return [f"torch=={supported.TORCH_REFERENCE}"]
    if gpu_node and current.cuda is None and allow == "0":
        raise ValueError(f"{describe(current)} is installed but this machine has an NVIDIA "
                         "driver: remove .venv and run tools/setup.sh with a Python whose torch "
                         "is a CUDA build (or SWINKIT_REUSE_TORCH=0 for pip's default "
                         f"torch=={supported.TORCH_REFERENCE}), or set "
                         "SWINKIT_ALLOW_CPU_TORCH=1 to keep it")
    return []


def pip_source(environ: dict) -> list[str]:
    """pip's source flags: a wheelhouse with no index (``SWINKIT_WHEELHOUSE``), or the default.

    >>> pip_source({}), pip_source({"SWINKIT_WHEELHOUSE": "/w"})
    ([], ['--no-index', '--find-links', '/w'])
    """
    where = environ.get("SWINKIT_WHEELHOUSE", "")
    return ["--no-index", "--find-links", where] if where else []


def check(python_version: tuple[int, ...], base: Torch | None, environ: dict) -> list[str]:
    """Refuse what cannot work before anything is installed (ValueError); the set-up's notes."""
    supported.check_python(python_version)
    notes = []
    reuse = _reuse(environ)   # its value checked whether or not there is a torch to keep
    if base is not None and reuse:
        warning = supported.check_torch(base.version)   # ValueError below the minimum
        torch_requirement(base, gpu_node(), environ)     # a CPU torch on a GPU node, the switches
        notes.append(f"keeping {describe(base)}" + (f"; {warning}" if warning else ""))
    else:
        torch_requirement(None, gpu_node(), environ)     # the switches' values, at least
    if environ.get("SWINKIT_WHEELHOUSE"):
        manifest = wheelhouse.check(Path(environ["SWINKIT_WHEELHOUSE"]), python_version,
                                    need_torch=base is None or not reuse)
        notes += wheelhouse.version_notes(manifest)
    return notes


def gpu_node() -> bool:
    """Whether the NVIDIA kernel driver is loaded here (what torch's CUDA build needs)."""
    return os.path.exists("/proc/driver/nvidia/version")


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


def probe_full_mmcv(python: str) -> bool:
    """Whether ``python`` loads a compiled mmcv that MMSegmentation 1.2.2 accepts."""
    proc = subprocess.run([python, "-c", MMCV_PROBE], capture_output=True, text=True,
                          timeout=PROBE_TIMEOUT_S, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    return proc.returncode == 0


def describe(torch: Torch | None) -> str:
    """``torch 2.13.0+cu126 (CUDA 12.6)``, for the set-up's log."""
    if torch is None:
        return "no torch"
    return f"torch {torch.version} ({'CUDA ' + torch.cuda if torch.cuda else 'CPU build'})"


SITES = ("import json, os, site; user = site.getusersitepackages() if site.ENABLE_USER_SITE "
         "else None; print(json.dumps(([user] if user and os.path.isdir(user) else []) "
         "+ site.getsitepackages()))")


def probe_sites(python: str) -> list[str]:
    """``python``'s site-packages folders in its own order: the user's (``pip install
    --user``), where that Python reads it, then its own (a venv's, a conda environment's, the
    system's)."""
    out = subprocess.run([python, "-c", SITES], capture_output=True, text=True,
                         timeout=PROBE_TIMEOUT_S, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def python_version(python: str) -> tuple[int, ...]:
    """``python``'s version_info, e.g. (3, 12, 3)."""
    out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:3])"],
                         capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=True)
    return tuple(int(p) for p in out.stdout.split())


def answer(what: str, python: str, environ: dict, venv: Path | None = None) -> list[str]:
    """One answer for tools/setup.sh (see the module docstring)."""
    if what == "pip-source":
        return pip_source(environ)
    if what == "keep-mmcv":
        return ["yes"] if probe_full_mmcv(python) else []
    found = probe_torch(python)
    if what == "check":
        for note in check(python_version(python), found, environ):
            print(f"[setup]   {note}", file=sys.stderr)
        return []
    if what == "share-base":
        if venv is None:
            raise ValueError("share-base needs --venv DIR")
        sites = shared_sites(found, environ, probe_sites(python))
        share(venv, python_version(python), sites)
        return sites
    return torch_requirement(found, gpu_node(), environ)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=["check", "share-base", "torch-requirement", "keep-mmcv",
                                    "pip-source", "show"])
    p.add_argument("--python", default=sys.executable,
                   help="the interpreter looked at (default: this one)")
    p.add_argument("--venv", type=Path, help="the environment share-base writes into")
    return p


def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    environ = dict(os.environ)
    try:
        if args.what != "show":
            words = answer(args.what, args.python, environ, args.venv)
            if args.what != "check":
                print(" ".join(words))
            return 0
        found = probe_torch(args.python)
        print(f"{args.python}: Python {'.'.join(map(str, python_version(args.python)))}, "
              f"{describe(found)}; swinkit supports Python 3.11-3.13 and torch >= "
              f"{'.'.join(map(str, supported.TORCH_MIN))} (tested: "
              f"{', '.join(supported.TORCH_TESTED)})")
        sites = shared_sites(found, environ, probe_sites(args.python))
        print(f"venv shares:       {' '.join(sites) or '(nothing: a venv of its own)'}")
        wanted = " ".join(torch_requirement(found, gpu_node(), environ))
        print(f"torch to install:  {wanted or '(keep the one found)'}")
        print(f"pip installs from: {' '.join(pip_source(environ)) or 'its index'}")
    except ValueError as exc:
        print(f"[setup] {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
