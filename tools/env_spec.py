"""What swinkit's environment needs, in install order: the one list that both the fast path
(``tools/setup.sh``, the checkout's ``.venv``) and asv's history mode (``asv.conf.json``'s
``install_command``: ``asv run main~4..main`` builds each commit into an environment under
``.asv/env``) install from.

Example (the pip commands asv's install_command runs, without running them)::

    python3.11 tools/env_spec.py install --dry-run WHEEL

Steps, in order (the pins come from pyproject.toml):

    torch           the pinned torch (tools/setup.sh asks tools/setup_plan.py instead, which
                    may keep a CUDA build of that release already there)
    build           what mmcv's source build imports: setuptools (pyproject's build-system),
                    wheel, ninja, numpy, the pinned mmengine
    mmcv            the pinned mmcv from source with its ops, --no-build-isolation, in the
                    environment tools/setup_plan.py chooses (CPU ops, MAX_JOBS)
    project         swinkit with its test extra, with its dependencies (setup.sh: editable;
                    asv: the commit's wheel)
    deepspeed-deps  pyproject's ``deepspeed`` extra but DeepSpeed itself, with the torch pin so
                    pip keeps the torch there
    deepspeed       the pinned DeepSpeed, pure Python: DS_BUILD_OPS=0 (its C++/CUDA ops build
                    on demand), --no-deps (its sdist would otherwise pull a second torch),
                    --no-build-isolation (its setup.py imports torch)

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
import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT_EXTRAS = "[test]"
# mmcv's setup.py imports these at build time (no build isolation); setuptools comes from
# pyproject's [build-system], mmengine's pin from its dependencies
BUILD_TOOLS = ("wheel", "ninja", "numpy")


@dataclass(frozen=True)
class Step:
    """One pip install: its requirements, pip flags and ``env`` words (``NAME=VALUE``,
    ``-u NAME``). The project step's requirement is the placeholder ``PROJECT``."""
    name: str
    requirements: tuple[str, ...]
    flags: tuple[str, ...] = ()
    env: tuple[str, ...] = ()


def _requirement(reqs: list[str], name: str) -> str:
    """The one requirement of ``name`` in ``reqs``, spaces removed (setup.sh splits on them)."""
    found = [r.replace(" ", "") for r in reqs
             if re.match(rf"{re.escape(name)}\s*([=<>!~;\[]|$)", r)]
    if len(found) != 1:
        raise ValueError(f"pyproject.toml must list {name} exactly once here, got {found}")
    return found[0]


def steps(pyproject: Path = ROOT / "pyproject.toml", environ: dict | None = None,
          cpus: int | None = None) -> tuple[Step, ...]:
    """The environment's steps in install order (the module docstring says why each)."""
    meta = tomllib.loads(pyproject.read_text())
    deps = meta["project"]["dependencies"]
    extra = meta["project"]["optional-dependencies"]["deepspeed"]
    torch = _requirement(deps, "torch")
    deepspeed = _requirement(extra, "deepspeed")
    plan = _setup_plan()
    mmcv_env = plan.mmcv_build_env(os.environ if environ is None else environ,
                                   plan.cpu_count() if cpus is None else cpus)
    return (
        Step("torch", (torch,)),
        Step("build", (_requirement(meta["build-system"]["requires"], "setuptools"),
                       *BUILD_TOOLS, _requirement(deps, "mmengine"))),
        Step("mmcv", (_requirement(deps, "mmcv"),), ("--no-build-isolation",), tuple(mmcv_env)),
        Step("project", ("PROJECT",), ("--no-build-isolation",)),
        Step("deepspeed-deps", (torch, *(r.replace(" ", "") for r in extra
                                         if r.replace(" ", "") != deepspeed))),
        Step("deepspeed", (deepspeed,), ("--no-deps", "--no-build-isolation"),
             ("DS_BUILD_OPS=0",)),
    )


def _setup_plan():
    """tools/setup_plan.py (tools/ is scripts, not a package), registered as ``setup_plan``."""
    if "setup_plan" not in sys.modules:
        spec = importlib.util.spec_from_file_location("setup_plan",
                                                      Path(__file__).with_name("setup_plan.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules["setup_plan"] = module
        spec.loader.exec_module(module)
    return sys.modules["setup_plan"]


def pip_args(step: Step, project: list[str]) -> list[str]:
    """pip install's arguments for ``step``; ``project`` replaces the project placeholder.

    >>> pip_args(Step("project", ("PROJECT",), ("--no-build-isolation",)), ["-e", ".[test]"])
    ['--no-build-isolation', '-e', '.[test]']
    """
    reqs = [w for r in step.requirements for w in (project if r == "PROJECT" else [r])]
    return [*step.flags, *reqs]


def command(step: Step, python: str, project: list[str]) -> list[str]:
    """The whole command of ``step``: ``env`` words first where it has any."""
    pip = [python, "-m", "pip", "--disable-pip-version-check", "install",
           *pip_args(step, project)]
    return ["env", *step.env, *pip] if step.env else pip


def install(wheel: str, dry_run: bool = False) -> int:
    """Every step into this interpreter, the project from ``wheel`` with its test extra."""
    for step in steps():
        cmd = command(step, sys.executable, [wheel + PROJECT_EXTRAS])
        if dry_run:
            print(json.dumps(cmd))
            continue
        print(f"[env_spec] {step.name}: {' '.join(cmd)}", flush=True)
        subprocess.run(cmd, check=True)
    return 0


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    step = sub.add_parser("step", help="one step's env words and pip arguments (setup.sh)")
    step.add_argument("name", choices=[s.name for s in steps(environ={}, cpus=1)])
    inst = sub.add_parser("install", help="every step into this interpreter (asv)")
    inst.add_argument("wheel", help="the project's wheel (asv's {wheel_file})")
    inst.add_argument("--dry-run", action="store_true",
                      help="print each command as a JSON list, run nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    if args.what == "install":
        return install(args.wheel, args.dry_run)
    step = next(s for s in steps() if s.name == args.name)
    args = pip_args(step, ["-e", "." + PROJECT_EXTRAS])
    if any(not w or " " in w for w in (*step.env, *args)):
        raise ValueError(f"step {step.name}: setup.sh splits on spaces: {step.env} {args}")
    print(" ".join(step.env))
    print(" ".join(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
