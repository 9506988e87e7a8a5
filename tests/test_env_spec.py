"""asv's history mode and the fast path install the same environment (issue 25, item 6).

Both sides are run without installing anything: asv's ``install_command``, interpolated by
asv's own environment code, with tools/env_spec.py's ``--dry-run``; tools/setup.sh in a scratch
copy whose ``.venv/bin/python`` is a stand-in that logs each pip call (and the environment it
got) instead of running it. The two logs are then compared pip call by pip call, and each
checked against pins written out here, not read from the shared list.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WHEEL = "swinkit-0.1.0-py3-none-any.whl"
# names bash itself puts in a child's environment
SHELL_VARS = {"PWD", "OLDPWD", "SHLVL", "_"}
FAKE_PYTHON = """#!{real}
# stands in for .venv/bin/python: logs pip calls, answers setup.sh's import checks, runs scripts
import json, os, sys
args = sys.argv[1:]
if args[:2] == ["-m", "pip"]:
    with open({log!r}, "a") as f:
        f.write(json.dumps({{"args": args[2:], "environ": dict(os.environ)}}) + "\\n")
    sys.exit(0)
if args[:1] == ["-c"]:   # nothing is installed yet, then every step's check passes
    sys.exit(1 if args[1] in ("import mmcv.ops", "import deepspeed") else 0)
if args and args[0].endswith("fetch_asv_assets.py"):
    sys.exit(0)
os.execv({real!r}, [{real!r}, *args])
"""


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def env_changes(environ: dict, base: dict) -> dict:
    """What a pip call's environment sets (name -> value) or removes (name -> None)."""
    changed = {k: v for k, v in environ.items() if base.get(k) != v and k not in SHELL_VARS}
    changed.update({k: None for k in base if k not in environ})
    return changed


def apply_env_words(argv: list[str], base: dict) -> tuple[list[str], dict]:
    """``env -u A B=1 cmd...`` -> (cmd..., the environment cmd gets)."""
    environ = dict(base)
    if argv[0] != "env":
        return argv, environ
    rest = argv[1:]
    while rest:
        if rest[0] == "-u":
            environ.pop(rest[1], None)
            rest = rest[2:]
        elif "=" in rest[0]:
            name, value = rest[0].split("=", 1)
            environ[name] = value
            rest = rest[1:]
        else:
            break
    return rest, environ


def flatten(calls: list[tuple[list[str], dict]], project: str, base: dict) -> list[tuple]:
    """pip install calls -> one (requirement, flags, environment set) per requirement, in order.

    ``project`` (the editable checkout or the wheel, with its extras) becomes ``PROJECT``;
    ``-q`` is dropped (asv shows no output anyway)."""
    out = []
    for args, environ in calls:
        words = args[args.index("install") + 1:]
        flags, reqs, i = [], [], 0
        while i < len(words):
            w = words[i]
            if w == "-e":
                reqs.append(words[i + 1])
                i += 2
                continue
            if w in ("-c", "--constraint", "-r", "--requirement"):
                flags.append(f"{w} {Path(words[i + 1]).read_text().strip()}")
                i += 2
                continue
            if w not in ("-q", "--quiet"):
                (flags if w.startswith("-") else reqs).append(w)
            i += 1
        changes = tuple(sorted(env_changes(environ, base).items(), key=str))
        for r in reqs:
            if r == project or r.startswith(project + "["):
                r = "PROJECT" + r[len(project):]
            out.append((r, tuple(sorted(flags)), changes))
    return out


@pytest.fixture
def base_env(tmp_path):
    """The environment both sides run in: no torch to probe (so setup.sh asks for the pin, as
    on a fresh machine), FORCE_CUDA set (so mmcv's build visibly unsets it)."""
    shadow = tmp_path / "shadow" / "torch"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\")\n")
    env = {k: v for k, v in os.environ.items() if k not in ("MAX_JOBS", "SWINKIT_MMCV_CUDA")}
    env.update(PYTHONPATH=str(tmp_path / "shadow"), FORCE_CUDA="1", SWINKIT_REUSE_TORCH="1")
    return env


def asv_installs(tmp_path: Path, base: dict, monkeypatch) -> list[tuple[list[str], dict]]:
    """The pip calls of asv.conf.json's install_command for one commit, as asv interpolates
    it (asv runs from the folder of its config file: asv/main.py changes there)."""
    asv_config = pytest.importorskip("asv.config")
    virtualenv = pytest.importorskip("asv.plugins.virtualenv")
    monkeypatch.chdir(ROOT)
    conf = asv_config.Config.load(str(ROOT / "asv.conf.json"))
    conf.env_dir = str(tmp_path / "env")
    try:
        env = virtualenv.Virtualenv(conf, "3.11", {}, {})
    except Exception as e:  # noqa: BLE001 - asv's reason, whatever its class
        pytest.skip(f"asv cannot make a python3.11 virtualenv here: {e}")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / WHEEL).write_bytes(b"")
    build = tmp_path / "build"        # the commit's tree: empty, as an old commit may be
    build.mkdir()
    env._set_build_dirs(str(build), str(cache))
    calls = []
    for argv, cmd_env, _codes, cwd in env._interpolate_commands(conf.install_command):
        Path(cwd or build).mkdir(parents=True, exist_ok=True)
        assert argv[0] == "python", f"asv runs the environment's python: {argv}"
        if argv[1:3] == ["-m", "pip"]:      # a pip call of its own, not through env_spec
            calls.append((argv[3:], dict(base, **cmd_env)))
            continue
        script = Path(argv[1])
        assert script.is_file() and script.is_relative_to(ROOT), \
            f"install_command must run a script of this checkout (old commits lack it): {argv}"
        out = subprocess.run([sys.executable, *argv[1:], "--dry-run"], cwd=cwd or build,
                             env=dict(base, **cmd_env), capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        for line in out.stdout.splitlines():
            pip, environ = apply_env_words(json.loads(line), dict(base, **cmd_env))
            assert pip[1:3] == ["-m", "pip"], pip
            calls.append((pip[3:], environ))
    return calls


def setup_sh_installs(tmp_path: Path, base: dict) -> tuple[list[tuple[list[str], dict]], dict]:
    """The pip calls tools/setup.sh makes on a machine with nothing installed, and the
    environment it ran in."""
    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    for f in ("pyproject.toml", "tools/setup.sh", "tools/setup_plan.py", "tools/env_spec.py"):
        shutil.copy(ROOT / f, repo / f)
    log = tmp_path / "pip.log"
    fake = repo / ".venv" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text(FAKE_PYTHON.format(real=sys.executable, log=str(log)))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = dict(base, PYTHON=str(fake))
    out = subprocess.run(["bash", str(repo / "tools" / "setup.sh")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    calls = [(c["args"], c["environ"]) for c in map(json.loads, log.read_text().splitlines())]
    return calls, env


@pytest.fixture
def both(tmp_path, base_env, monkeypatch):
    """(asv's flattened installs, setup.sh's), see flatten()."""
    asv = flatten(asv_installs(tmp_path, base_env, monkeypatch),
                  str(tmp_path / "cache" / WHEEL), base_env)
    calls, env = setup_sh_installs(tmp_path, base_env)
    setup = flatten(calls, ".", env)
    return asv, setup


def test_asv_and_setup_sh_install_the_same(both):
    asv, setup = both
    assert asv == setup


def test_deepspeed_is_installed_as_the_fast_path_does(both):
    for side in both:
        reqs = [r for r, _, _ in side]
        found = [(f, dict(e)) for r, f, e in side if r == "deepspeed==0.19.8"]
        assert len(found) == 1, f"deepspeed==0.19.8 installed {len(found)} times: {reqs}"
        flags, env = found[0]
        assert {"--no-deps", "--no-build-isolation"} <= set(flags)
        assert env.get("DS_BUILD_OPS") == "0"
        # its dependencies (the deepspeed extra) after the project and before it, with the
        # torch pin so that pip keeps torch
        extra = [r.replace(" ", "") for r in pyproject()["project"]["optional-dependencies"]
                 ["deepspeed"]]
        assert "deepspeed==0.19.8" in extra
        between = reqs[reqs.index("PROJECT[test]") + 1:reqs.index("deepspeed==0.19.8")]
        assert set(between) == {"torch==2.13.0", *extra} - {"deepspeed==0.19.8"}


def test_asv_environment_gets_every_dependency(both):
    asv, _ = both
    reqs = [r for r, _, _ in asv]
    # mmcv needs torch and its build tools first, and is built without isolation
    assert reqs.index("torch==2.13.0") < reqs.index("mmcv==2.1.0") < reqs.index("PROJECT[test]")
    assert "--no-build-isolation" in next(f for r, f, _ in asv if r == "mmcv==2.1.0")
    # the commit's wheel comes with its dependencies: every one of pyproject's, at its pin
    assert "--no-deps" not in next(f for r, f, _ in asv if r == "PROJECT[test]")
    deps = [d.replace(" ", "") for d in pyproject()["project"]["dependencies"]]
    for pin in ("torch==2.13.0", "mmcv==2.1.0", "mmengine==0.10.7"):
        assert pin in deps and pin in reqs, pin


def test_asv_conf_loads_and_names_no_missing_repository():
    asv_config = pytest.importorskip("asv.config")
    conf = asv_config.Config.load(str(ROOT / "asv.conf.json"))
    from swinkit.run_suite import read_conf
    assert read_conf()["install_command"] == conf.install_command  # swinkit's reader agrees
    # the page's project link: https://github.com/swinkit/swinkit does not exist, so none
    # (asv's "#") until swinkit has a public repository
    assert conf.project_url == "#"
    assert "project_url" not in read_conf()
    assert conf.launch_method in ("auto", "spawn", "forkserver")  # asv 0.6.6's get_spawner
    # pip says nothing while it builds mmcv (~15 min on 2 cores): asv's 600 s would stop it
    assert conf.install_timeout >= 1800


def test_asv_version_required():
    from importlib.metadata import requires, version

    from packaging.requirements import Requirement
    from packaging.version import Version
    deps = {Requirement(d).name: Requirement(d) for d in pyproject()["project"]["dependencies"]}
    assert str(deps["asv"].specifier) == ">=0.6.6"
    assert Version(version("asv")) in deps["asv"].specifier
    # asv-runner: at least what that asv requires
    needed = next(Requirement(r) for r in requires("asv") if Requirement(r).name == "asv-runner")
    ours = deps["asv-runner"].specifier
    lowest = min(Version(s.version) for s in ours if s.operator == ">=")
    assert lowest in needed.specifier
    assert Version(version("asv-runner")) in ours
