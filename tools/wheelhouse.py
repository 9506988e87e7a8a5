"""Write a wheelhouse for an offline GPU node: every file swinkit's set-up installs beside torch,
for the node's Python and platform, so the set-up there runs with pip's index switched off.

Example (on a connected machine, in the checkout, after ``bash tools/setup.sh``)::

    .venv/bin/python tools/wheelhouse.py make --python 3.12 --dest wheels
    # copy the checkout with wheels/ to the node, then there:
    SWINKIT_WHEELHOUSE=$PWD/wheels PYTHON=python3.12 bash tools/setup.sh

What it holds: the build tools, the project's dependencies (tools/env_spec.py's list: mmcv-lite,
mmengine, MMSegmentation, asv, pytest, DeepSpeed's dependencies...) as binary wheels for that
Python and platform with everything they depend on, and DeepSpeed's source distribution (pure
Python, built on the node against its torch). Not torch: the node's own is kept (``--with-torch``
adds the reference torch for a node without one, a CUDA build of several GB). A manifest,
``swinkit-wheelhouse.json``, lists the files, the Python and the platforms; the set-up checks
it before installing anything and names what is missing.

A node that brings its own scientific stack beside its torch (numpy, OpenCV, SciPy, Matplotlib:
two thirds of the wheelhouse's size) need not be sent it again: ``--node-has
numpy,opencv-python,...`` leaves those distributions' files out, the manifest names them, and
the set-up on the node checks that its Python has each before installing anything (the node's
copies are shared with the environment along with its torch)::

    .venv/bin/python tools/wheelhouse.py make --python 3.12 --dest wheels \
        --node-has numpy,scipy,opencv-python,matplotlib,pillow,fonttools,kiwisolver,contourpy

pip downloads everything (a well-kept resolver for another Python's tags); this file only says
what to ask for and checks the result. Standard library only: tools/setup_plan.py reads it
before the environment exists.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = "swinkit-wheelhouse.json"
# glibc 2.28 and 2.17 wheels: what pip takes on any current Linux x86-64 node
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def _env_spec():
    """tools/env_spec.py (tools/ is scripts, not a package)."""
    if "swinkit_env_spec" not in sys.modules:
        spec = importlib.util.spec_from_file_location("swinkit_env_spec",
                                                      Path(__file__).with_name("env_spec.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules["swinkit_env_spec"] = module
        spec.loader.exec_module(module)
    return sys.modules["swinkit_env_spec"]


def wanted() -> tuple[list[str], list[str]]:
    """(binary requirements, source requirements): env_spec's steps but torch and the project."""
    binary, source = [], []
    for step in _env_spec().steps():
        if step.name in ("torch", "project"):
            continue
        (source if "--no-build-isolation" in step.flags else binary).extend(step.requirements)
    return binary, source


def make(dest: Path, python: str, platforms: tuple[str, ...] = PLATFORMS,
         with_torch: bool = False, node_has: tuple[str, ...] = ()) -> dict:
    """Download into ``dest`` and write the manifest last (a half-made wheelhouse has none);
    the files of the distributions ``node_has`` names are left out (the node has its own)."""
    if not python.replace(".", "").isdigit() or python.count(".") != 1:
        raise ValueError(f"--python must be MAJOR.MINOR such as 3.12, got {python!r}")
    node_has = tuple(sorted({normalize(n) for n in node_has}))
    if "torch" in node_has:
        raise ValueError("--node-has: torch is never in the wheelhouse (the node's own is kept; "
                         "--with-torch adds one for a node without it)")
    if node_has and with_torch:
        raise ValueError("--node-has with --with-torch: the set-up shares the node's packages "
                         "only with the node's own torch, so a node that needs the wheelhouse's "
                         "torch cannot use what it left out")
    _clear(dest)
    binary, source = wanted()
    if with_torch:
        binary.append(f"torch=={_env_spec().reference_torch()}")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "-d", str(dest)]
    target = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp",
              *(w for p in platforms for w in ("--platform", p))]
    _run([*pip, *target, *binary])
    # sdists are prepared with this interpreter (DeepSpeed's setup.py imports torch)
    _run([*pip, "--no-binary", ":all:", "--no-deps", "--no-build-isolation", *source],
         env=dict(os.environ, DS_BUILD_OPS="0"))
    left_out = leave_out(dest, node_has)
    unused = sorted(set(node_has) - {distribution_of(f) for f in left_out})
    if unused:
        print(f"[wheelhouse] --node-has: the set-up needs no {', '.join(unused)}; nothing of "
              "them was left out", flush=True)
    files = sorted(p.name for p in dest.iterdir() if p.name != MANIFEST)
    manifest = {"python": python, "platforms": list(platforms), "requirements": binary + source,
                "torch": with_torch, "files": files,
                "node_has": sorted({distribution_of(f) for f in left_out}), "left_out": left_out,
                "made": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    tmp = dest / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.replace(dest / MANIFEST)
    return manifest


def normalize(name: str) -> str:
    """A distribution's name as packaging compares them (PEP 503): case and runs of ``-_.``
    folded.

    >>> normalize("OpenCV_Python"), normalize("typing.extensions")
    ('opencv-python', 'typing-extensions')
    """
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution_of(filename: str) -> str:
    """The normalized distribution name of a wheel's or a source distribution's file name
    (a wheel's name field holds no ``-``; an sdist's version follows the last one).

    >>> distribution_of("opencv_python-5.0.0.93-cp37-abi3-manylinux_2_28_x86_64.whl")
    'opencv-python'
    >>> distribution_of("Pympler-1.1-py3-none-any.whl"), distribution_of("deepspeed-0.19.8.tar.gz")
    ('pympler', 'deepspeed')
    """
    if filename.endswith(".whl"):
        return normalize(filename.split("-", 1)[0])
    stem = re.sub(r"\.(tar\.gz|zip|tar\.bz2)$", "", filename)
    return normalize(stem.rsplit("-", 1)[0])


def leave_out(dest: Path, names: tuple[str, ...]) -> list[str]:
    """Remove from ``dest`` the files of the distributions ``names`` (normalized) and return
    their file names, sorted."""
    gone = sorted(p.name for p in dest.iterdir()
                  if p.name != MANIFEST and distribution_of(p.name) in names)
    for name in gone:
        (dest / name).unlink()
    return gone


def _clear(dest: Path) -> None:
    """An empty ``dest``, or one holding an earlier wheelhouse, whose files are removed (so the
    new manifest lists what this make downloaded, nothing left over); any other folder is
    refused rather than emptied."""
    dest.mkdir(parents=True, exist_ok=True)
    present = [p for p in dest.iterdir()]
    if not present:
        return
    if not (dest / MANIFEST).is_file():
        raise ValueError(f"--dest {dest} is not empty and holds no {MANIFEST}: choose an "
                         "empty folder (or one an earlier make wrote)")
    old = set(json.loads((dest / MANIFEST).read_text())["files"]) | {MANIFEST}
    strangers = [p.name for p in present if p.name not in old]
    if strangers:
        raise ValueError(f"--dest {dest} holds files its manifest does not list: "
                         f"{', '.join(sorted(strangers))}; choose an empty folder")
    for p in present:
        p.unlink()


def machine_of(platforms: list[str]) -> set[str]:
    """The machines wheel platform tags name: ``manylinux_2_28_x86_64`` -> ``x86_64``.

    >>> sorted(machine_of(["manylinux_2_28_x86_64", "manylinux2014_aarch64", "any"]))
    ['aarch64', 'x86_64']
    """
    machines = set()
    for tag in platforms:
        for arch in ("x86_64", "aarch64", "ppc64le", "s390x", "i686"):
            if tag.endswith(arch):
                machines.add(arch)
    return machines


def _run(cmd: list[str], env: dict | None = None) -> None:
    print(f"[wheelhouse] {' '.join(cmd[3:6])} ... {len(cmd)} words", flush=True)
    subprocess.run(cmd, check=True, env=env)


def check(dest: Path, python_version: tuple[int, ...], need_torch: bool,
          installed=None) -> dict:
    """ValueError naming what does not fit: no manifest, another Python, missing files (each
    named), no torch where the node has none, a distribution left out for the node's own that
    this Python lacks (``installed(name)``: its version or None; default: this interpreter's),
    or that the environment would not share (it shares the node's packages only with its torch).

    >>> check(Path("/nonexistent"), (3, 12), False)
    Traceback (most recent call last):
    ...
    ValueError: /nonexistent/swinkit-wheelhouse.json not found: SWINKIT_WHEELHOUSE must be a folder made by tools/wheelhouse.py make
    """
    path = dest / MANIFEST
    if not path.is_file():
        raise ValueError(f"{path} not found: SWINKIT_WHEELHOUSE must be a folder made by "
                         "tools/wheelhouse.py make")
    manifest = json.loads(path.read_text())
    here = ".".join(map(str, python_version[:2]))
    if manifest["python"] != here:
        raise ValueError(f"{dest} was made for Python {manifest['python']}, this set-up runs "
                         f"Python {here}: make one with --python {here}")
    machines, machine = machine_of(manifest["platforms"]), platform.machine()
    if machines and machine not in machines:
        raise ValueError(f"{dest} was made for {', '.join(sorted(machines))}, this node is "
                         f"{machine}: make one with --platform manylinux_2_28_{machine}")
    missing = [f for f in manifest["files"] if not (dest / f).is_file()]
    if missing:
        raise ValueError(f"{dest} lacks {len(missing)} file(s) its manifest lists: "
                         f"{', '.join(missing)}; copy them again or remake the wheelhouse")
    if need_torch and not any(f.startswith("torch-") for f in manifest["files"]):
        raise ValueError(f"no torch to keep and none in {dest}: install torch (2.5 or newer) "
                         "into the Python the set-up runs, or remake the wheelhouse with "
                         "--with-torch")
    node_has = manifest.get("node_has", [])
    if node_has and need_torch:
        raise ValueError(f"{dest} leaves out {', '.join(node_has)} for the node's own, but the "
                         "environment shares the node's packages only with its torch, which "
                         "is not kept here: remake the wheelhouse without --node-has")
    lacking = [n for n in node_has if (installed or _installed)(n) is None]
    if lacking:
        raise ValueError(f"{dest} leaves out {', '.join(lacking)} for the node's own, but "
                         f"{sys.executable} has no {', '.join(lacking)}: install them there, "
                         "or remake the wheelhouse without them in --node-has")
    return manifest


def version_notes(manifest: dict, installed=None) -> list[str]:
    """Where the node's own copy of a left-out distribution is another version than the one
    the wheelhouse's resolution took: a note, not a refusal (the kept wheels may accept it;
    if one does not, pip says so offline, and this note says what to remake).

    >>> version_notes({"node_has": ["numpy"], "left_out": ["numpy-2.5.5-cp312-none.whl"]},
    ...               {"numpy": "1.26.4"}.get)
    ["the node's numpy is 1.26.4, the wheelhouse was resolved with 2.5.5: should pip find no numpy it accepts, remake the wheelhouse without numpy in --node-has"]
    """
    notes = []
    for filename in manifest.get("left_out", []):
        name, version = distribution_of(filename), filename.split("-")[1]
        have = (installed or _installed)(name)
        if have is not None and have != version:
            notes.append(f"the node's {name} is {have}, the wheelhouse was resolved with "
                         f"{version}: should pip find no {name} it accepts, remake the "
                         f"wheelhouse without {name} in --node-has")
    return notes


def _installed(name: str) -> str | None:
    """The version of distribution ``name`` this interpreter has, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    mk = sub.add_parser("make", help="download the wheelhouse (needs the network)")
    mk.add_argument("--python", required=True, help="the node's Python, MAJOR.MINOR (3.12)")
    mk.add_argument("--dest", type=Path, required=True, help="the folder to fill")
    mk.add_argument("--platform", action="append",
                    help=f"a wheel platform tag, repeatable (default: {', '.join(PLATFORMS)})")
    mk.add_argument("--with-torch", action="store_true",
                    help="add the reference torch (for a node that has none)")
    mk.add_argument("--node-has", metavar="NAMES", action="append", default=[],
                    help="comma-separated distributions the node's Python already has beside "
                         "its torch (numpy,opencv-python,...): their files are left out and "
                         "the set-up checks the node for them")
    ck = sub.add_parser("check", help="check a wheelhouse against its manifest")
    ck.add_argument("dest", type=Path)
    return p


def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    try:
        if args.what == "make":
            node_has = tuple(n.strip() for arg in args.node_has for n in arg.split(",")
                             if n.strip())
            manifest = make(args.dest, args.python, tuple(args.platform or PLATFORMS),
                            args.with_torch, node_has)
        else:
            manifest = check(args.dest, sys.version_info, need_torch=False)
    except ValueError as exc:
        print(f"[wheelhouse] {exc}", file=sys.stderr)
        return 2
    print(f"[wheelhouse] {len(manifest['files'])} files for Python {manifest['python']} in "
          f"{args.dest}" + (f"; left out for the node's own: {', '.join(manifest['node_has'])}"
                            if manifest.get("node_has") else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
