"""What swinkit's environment needs, in install order: the one list that the fast path
(``tools/setup.sh``, the checkout's ``.venv``), asv's history mode (``asv.conf.json``'s
``install_command``: ``asv run main~4..main`` builds each commit into an environment under
``.asv/env``) and the offline wheelhouse (``tools/wheelhouse.py``) install from.

Example (the pip commands asv's install_command runs, without running them)::

    python3.11 tools/env_spec.py install --dry-run WHEEL

Steps, in order (the pins come from pyproject.toml, or an old commit's wheel):

    torch           the reference torch, ``swinkit/supported.py`` (tools/setup.sh asks
                    tools/setup_plan.py instead, which keeps a supported torch already there)
    build           what installing the project without build isolation imports: setuptools
                    (pyproject's build-system) and wheel
    project-deps    the project's dependencies with its ``test`` and ``deepspeed`` extras, but
                    torch (the environment's stays) and DeepSpeed (its own step): read from
                    pyproject.toml (setup.sh) or from the commit's wheel (asv, so an old commit
                    gets its own pins). ``mmcv`` becomes ``mmcv-lite`` at the same version (no
                    compiler: its compiled ops are never called, see the stand-in); left out
                    where a compiled mmcv is already there (``--keep-mmcv``)
    project         swinkit itself, ``--no-deps`` (setup.sh: editable; asv: the commit's wheel)
    deepspeed       the pinned DeepSpeed, pure Python: DS_BUILD_OPS=0 (its C++/CUDA ops build
                    on demand), --no-deps (its sdist would otherwise pull a second torch),
                    --no-build-isolation (its setup.py imports torch)
    stand-in        not pip: swinkit's stand-in for mmcv's compiled extension copied into the
                    environment's site-packages with a ``.pth`` line that installs it at every
                    interpreter start (so MMSegmentation imports in any process, commits older
                    than the stand-in included)

Every pip step after torch is constrained to the torch the environment has (``-c`` of a file
that pins it), so no step can replace it.

Commands:

    step NAME          for tools/setup.sh: two lines of words without spaces, the ``env``
                       words of the step's pip call (maybe none), then pip install's arguments
    install WHEEL      every step into this interpreter, the project from WHEEL (asv);
                       --dry-run prints each command as a JSON list instead

asv reads ``install_command`` from the asv.conf.json it was started with and runs it for every
commit it builds, old ones included; the command names this file under ``{conf_dir}`` (that
checkout), not ``{build_dir}`` (the commit being built, which may predate this file). So every
commit gets this checkout's list, and its own wheel adds whatever its own pyproject.toml
declares. Standard library only: it runs before anything is installed.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("test", "deepspeed")          # whose dependencies project-deps installs
BUILD_TOOLS = ("wheel",)
# the file each step after torch is constrained by: in setup.sh's .venv, in asv's env_dir
CONSTRAINTS = "swinkit-constraints.txt"
STAND_IN = "_swinkit_mmcv_stand_in"     # the module name the .pth line imports


@dataclass(frozen=True)
class Step:
    """One pip install: its requirements, pip flags and ``env`` words (``NAME=VALUE``,
    ``-u NAME``). The project step's requirement is the placeholder ``PROJECT``."""
    name: str
    requirements: tuple[str, ...]
    flags: tuple[str, ...] = ()
    env: tuple[str, ...] = ()


def _name(requirement: str) -> str:
    """``mmcv==2.1.0`` -> ``mmcv``, ``pydantic>=2`` -> ``pydantic`` (lower case)."""
    return re.match(r"[A-Za-z0-9._-]+", requirement).group(0).lower().replace("_", "-")


def requires_dist(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """pyproject.toml's dependencies as a wheel's ``Requires-Dist`` lines (extras as markers)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    lines = list(project["dependencies"])
    for extra, reqs in project.get("optional-dependencies", {}).items():
        lines += [f'{r}; extra == "{extra}"' for r in reqs]
    return lines


def wheel_requires_dist(wheel: str) -> list[str]:
    """The ``Requires-Dist`` lines of a built wheel (an old commit's pins, as it declared them)."""
    with zipfile.ZipFile(wheel) as whl:
        meta = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
        text = whl.read(meta).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines()
            if line.startswith("Requires-Dist:")]


def project_deps(lines: list[str], keep_mmcv: bool = False) -> tuple[str, ...]:
    """What project-deps installs from ``Requires-Dist`` lines (see the module docstring).

    >>> project_deps(["torch==2.13.0", "mmcv==2.1.0", "numpy", 'pytest>=8; extra == "test"',
    ...               'deepspeed==0.19.8; extra == "deepspeed"', 'hjson; extra == "deepspeed"',
    ...               'tensorboard; extra == "trace"'])
    ('mmcv-lite==2.1.0', 'numpy', 'pytest>=8', 'hjson')
    >>> project_deps(["mmcv-lite==2.1.0", "numpy"], keep_mmcv=True)
    ('numpy',)
    """
    out = []
    for line in lines:
        req, _, marker = (part.strip() for part in line.partition(";"))
        extra = re.fullmatch(r'extra\s*==\s*["\']([^"\']+)["\']', marker)
        if (marker and not extra) or (extra and extra.group(1) not in EXTRAS):
            continue  # another extra, or a marker none of swinkit's pins uses
        req = req.replace(" ", "")
        name = _name(req)
        if name in ("torch", "deepspeed") or (keep_mmcv and name in ("mmcv", "mmcv-lite")):
            continue
        out.append("mmcv-lite" + req[len("mmcv"):] if name == "mmcv" else req)
    return tuple(out)


def reference_torch(root: Path = ROOT) -> str:
    """``2.13.0``: swinkit/supported.py's TORCH_REFERENCE (read as text: no import)."""
    text = (root / "swinkit" / "supported.py").read_text()
    return re.search(r'^TORCH_REFERENCE = "([^"]+)"', text, re.M).group(1)


def steps(lines: list[str] | None = None, keep_mmcv: bool = False,
          pyproject: Path = ROOT / "pyproject.toml") -> tuple[Step, ...]:
    """The environment's pip steps in install order (the module docstring says why each);
    ``lines``: the project's ``Requires-Dist`` (default: pyproject.toml's)."""
    lines = requires_dist(pyproject) if lines is None else lines
    deepspeed = [r.split(";")[0].replace(" ", "") for r in lines
                 if _name(r) == "deepspeed"]
    if len(deepspeed) != 1:
        raise ValueError(f"the project must declare deepspeed exactly once, got {deepspeed}")
    build = tomllib.loads(pyproject.read_text())["build-system"]["requires"]
    setuptools = [r.replace(" ", "") for r in build if _name(r) == "setuptools"]
    return (
        Step("torch", (f"torch=={reference_torch(pyproject.parent)}",)),
        Step("build", (*setuptools, *BUILD_TOOLS)),
        Step("project-deps", project_deps(lines, keep_mmcv)),
        Step("project", ("PROJECT",), ("--no-build-isolation", "--no-deps")),
        Step("deepspeed", tuple(deepspeed), ("--no-deps", "--no-build-isolation"),
             ("DS_BUILD_OPS=0",)),
    )


def install_stand_in(site: Path | None = None) -> Path:
    """Copy swinkit's stand-in for ``mmcv._ext`` into ``site`` (this interpreter's
    site-packages) with a ``.pth`` line that installs it at every interpreter start."""
    site = Path(site or sysconfig.get_paths()["purelib"])
    shutil.copyfile(ROOT / "swinkit" / "mmcv_stand_in.py", site / f"{STAND_IN}.py")
    pth = site / f"{STAND_IN}.pth"
    pth.write_text(f"import {STAND_IN}; {STAND_IN}.install()\n")
    return pth


def pip_args(step: Step, project: list[str], constraints: str | None = None,
             source: tuple[str, ...] = ()) -> list[str]:
    """pip install's arguments for ``step``; ``project`` replaces the project placeholder;
    every step but torch's is constrained by ``constraints`` (a file pinning the torch there).

    >>> pip_args(Step("project", ("PROJECT",), ("--no-deps",)), ["-e", "."],
    ...          ".venv/swinkit-constraints.txt")
    ['--no-deps', '-c', '.venv/swinkit-constraints.txt', '-e', '.']
    """
    reqs = [w for r in step.requirements for w in (project if r == "PROJECT" else [r])]
    pin = ["-c", constraints] if constraints and step.name != "torch" else []
    return [*source, *step.flags, *pin, *reqs]


def command(step: Step, python: str, project: list[str], constraints: str | None) -> list[str]:
    """The whole command of ``step``: ``env`` words first where it has any."""
    pip = [python, "-m", "pip", "--disable-pip-version-check", "install",
           *pip_args(step, project, constraints)]
    return ["env", *step.env, *pip] if step.env else pip


def install(wheel: str, dry_run: bool = False) -> int:
    """Every step into this interpreter (asv's environment, run in its env_dir), the project
    from ``wheel``; after torch, a constraints file pins the torch there."""
    constraints = str(Path(CONSTRAINTS).resolve())
    for step in steps(wheel_requires_dist(wheel)):
        cmd = command(step, sys.executable, [wheel], constraints)
        if dry_run:
            print(json.dumps(cmd))
        else:
            print(f"[env_spec] {step.name}: {' '.join(cmd)}", flush=True)
            subprocess.run(cmd, check=True)
        if step.name == "torch" and not dry_run:
            Path(constraints).write_text(f"{step.requirements[0]}\n")
    if dry_run:
        print(json.dumps(["stand-in"]))
    else:
        print(f"[env_spec] stand-in: {install_stand_in()}", flush=True)
    return 0


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    step = sub.add_parser("step", help="one step's env words and pip arguments (setup.sh)")
    step.add_argument("name", choices=[s.name for s in steps()])
    step.add_argument("--keep-mmcv", action="store_true",
                      help="a compiled mmcv is there: leave mmcv(-lite) out")
    step.add_argument("--constraints", help="the file pinning the environment's torch")
    step.add_argument("--source", default="",
                      help="pip's source flags as one string (tools/setup_plan.py pip-source)")
    sub.add_parser("stand-in", help="install the mmcv._ext stand-in's .pth into this "
                                    "interpreter's site-packages")
    inst = sub.add_parser("install", help="every step into this interpreter (asv)")
    inst.add_argument("wheel", help="the project's wheel (asv's {wheel_file})")
    inst.add_argument("--dry-run", action="store_true",
                      help="print each command as a JSON list, run nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    if args.what == "install":
        return install(args.wheel, args.dry_run)
    if args.what == "stand-in":
        print(install_stand_in())
        return 0
    step = next(s for s in steps(keep_mmcv=args.keep_mmcv) if s.name == args.name)
    words = pip_args(step, ["-e", "."], args.constraints,
                     tuple(args.source.split()))
    if any(not w or " " in w for w in (*step.env, *words)):
        raise ValueError(f"step {step.name}: setup.sh splits on spaces: {step.env} {words}")
    print(" ".join(step.env))
    print(" ".join(words))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
