"""asv's history mode and the fast path install the same environment, with nothing compiled and
the environment's torch kept.

Both sides are run without installing anything: asv's ``install_command``, interpolated by
asv's own environment code, with tools/env_spec.py's ``--dry-run`` on a wheel of this checkout;
tools/setup.sh in a scratch copy whose ``.venv/bin/python`` is a stand-in that logs each pip call
(and the environment it got) instead of running it. The two logs are then compared pip call by
pip call, and each checked against pins written out here, not read from the shared list.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WHEEL = "swinkit-0.1.0-py3-none-any.whl"
CONSTRAINTS = "swinkit-constraints.txt"
# names bash itself puts in a child's environment
SHELL_VARS = {"PWD", "OLDPWD", "SHLVL", "_"}
FAKE_PYTHON = """#!{real}
# stands in for .venv/bin/python: logs pip calls and the stand-in's install, answers setup.sh's
# import checks and probes, runs scripts
import json, os, re, sys
args = sys.argv[1:]
LOG = {log!r}
def log(entry):
    with open(LOG, "a") as f:
        f.write(json.dumps(dict(entry, environ=dict(os.environ))) + "\\n")
if args[:2] == ["-m", "pip"]:
    log({{"args": args[2:]}})
    sys.exit(0)
if args[:2] and args[0].endswith("env_spec.py") and args[1] == "stand-in":
    log({{"args": ["stand-in"]}})
    sys.exit(0)
if args[:1] == ["-c"]:
    code = args[1]
    if "print('torch=='" in code:   # the constraint: a torch pip installed, else the one there
        calls = [json.loads(l)["args"] for l in open(LOG)] if os.path.exists(LOG) else []
        pins = [a for c in calls for a in c if re.match(r"torch==", a)]
        if pins:
            print(pins[-1])
            sys.exit(0)
    elif "mmcv._ext" in code:       # the probe for a compiled mmcv
        sys.exit(0 if os.environ.get("FAKE_FULL_MMCV") == "1" else 1)
    elif code in ("import swinkit, mmseg.models", "import deepspeed"):
        sys.exit(1)                 # nothing is installed yet
    elif code.startswith("import mmseg.models, deepspeed"):
        sys.exit(0)                 # the final check: everything was "installed"
os.execv({real!r}, [{real!r}, *args])
"""


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
    """Install calls -> one (requirement, flags, environment set) per requirement, in order.

    ``project`` (the editable checkout or the wheel) becomes ``PROJECT``; a constraints file
    becomes its name (its content is checked apart); ``-q`` is dropped (asv shows no output);
    the stand-in's install is the requirement ``stand-in``."""
    out = []
    for args, environ in calls:
        if args == ["stand-in"]:
            out.append(("stand-in", (), ()))
            continue
        words = args[args.index("install") + 1:]
        flags, reqs, i = [], [], 0
        while i < len(words):
            w = words[i]
            if w == "-e":
                reqs.append(words[i + 1])
                i += 2
                continue
            if w in ("-c", "--constraint"):
                flags.append(f"-c {Path(words[i + 1]).name}")
                i += 2
                continue
            if w not in ("-q", "--quiet"):
                (flags if w.startswith("-") else reqs).append(w)
            i += 1
        changes = tuple(sorted(env_changes(environ, base).items(), key=str))
        out.extend(("PROJECT" if r == project else r, tuple(sorted(flags)), changes) for r in reqs)
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """This checkout's wheel, built from a copy (the source tree gets no build/ or egg-info)."""
    src = tmp_path_factory.mktemp("src")
    shutil.copytree(ROOT / "swinkit", src / "swinkit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / f, src / f)
    cache = tmp_path_factory.mktemp("cache")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(cache), str(src)],
                   check=True, capture_output=True, timeout=300)
    return cache / WHEEL


def base_env(tmp_path: Path, torch_version: str | None = None) -> dict:
    """The environment both sides run in: a stand-in torch module on the path (None: no torch,
    as on a fresh machine, so setup.sh asks for the reference release)."""
    shadow = tmp_path / "shadow" / "torch"
    shadow.mkdir(parents=True)
    body = ("raise ModuleNotFoundError(\"No module named 'torch'\")\n" if torch_version is None
            else f"__version__ = {torch_version!r}\nclass version:\n    cuda = None\n")
    (shadow / "__init__.py").write_text(body)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SWINKIT_") and k != "FAKE_FULL_MMCV"}
    env.update(PYTHONPATH=str(tmp_path / "shadow"), SWINKIT_REUSE_TORCH="1")
    return env


def asv_installs(tmp_path: Path, base: dict, wheel: Path, monkeypatch) -> list:
    """The install calls of asv.conf.json's install_command for one commit, as asv interpolates
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
    build = tmp_path / "build"        # the commit's tree: empty, as an old commit may be
    build.mkdir()
    env._set_build_dirs(str(build), str(wheel.parent))
    calls = []
    for argv, cmd_env, _codes, cwd in env._interpolate_commands(conf.install_command):
        Path(cwd or build).mkdir(parents=True, exist_ok=True)
        assert argv[0] == "python", f"asv runs the environment's python: {argv}"
        script = Path(argv[1])
        assert script.is_file() and script.is_relative_to(ROOT), \
            f"install_command must run a script of this checkout (old commits lack it): {argv}"
        out = subprocess.run([sys.executable, *argv[1:], "--dry-run"], cwd=cwd or build,
                             env=dict(base, **cmd_env), capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        for line in out.stdout.splitlines():
            words = json.loads(line)
            if words == ["stand-in"]:
                calls.append((words, {}))
                continue
            pip, environ = apply_env_words(words, dict(base, **cmd_env))
            assert pip[1:3] == ["-m", "pip"], pip
            calls.append((pip[3:], environ))
    return calls


def setup_sh_installs(tmp_path: Path, base: dict, expect_rc: int = 0) -> tuple[list, dict, Path]:
    """The install calls tools/setup.sh makes, the environment it ran in, and its checkout."""
    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    (repo / "swinkit").mkdir()
    for f in ("pyproject.toml", "tools/setup.sh", "tools/setup_plan.py", "tools/env_spec.py",
              "tools/wheelhouse.py", "tools/fetch_asv_assets.py", "swinkit/supported.py",
              "swinkit/mmcv_stand_in.py"):
        shutil.copy(ROOT / f, repo / f)
    log = tmp_path / "pip.log"
    fake = repo / ".venv" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text(FAKE_PYTHON.format(real=sys.executable, log=str(log)))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = dict(base, PYTHON=str(fake))
    out = subprocess.run(["bash", str(repo / "tools" / "setup.sh")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert (out.returncode == 0) == (expect_rc == 0), out.stdout + out.stderr
    (repo / "setup.stderr").write_text(out.stderr)
    lines = log.read_text().splitlines() if log.exists() else []
    calls = [(c["args"], c["environ"]) for c in map(json.loads, lines)]
    return calls, env, repo


@pytest.fixture
def both(tmp_path, wheel, monkeypatch):
    """(asv's flattened installs, setup.sh's, setup.sh's checkout), see flatten()."""
    base = base_env(tmp_path)
    asv = flatten(asv_installs(tmp_path, base, wheel, monkeypatch), str(wheel), base)
    calls, env, repo = setup_sh_installs(tmp_path, base)
    return asv, flatten(calls, ".", env), repo


def reqs_of(side: list[tuple]) -> list[str]:
    return [r for r, _, _ in side]


def test_asv_and_setup_sh_install_the_same(both):
    asv, setup, _ = both
    assert asv == setup


def test_nothing_is_compiled_and_mmcv_comes_as_mmcv_lite(both):
    for side in both[:2]:
        reqs = reqs_of(side)
        assert "mmcv-lite==2.1.0" in reqs
        assert not any(r.startswith("mmcv==") or r.startswith("mmcv>") for r in reqs), reqs
        assert not any(w.startswith("MMCV_WITH_OPS") or w.startswith("FORCE_CUDA")
                       for _, _, env in side for w, _ in env)
        assert reqs[-1] == "stand-in"   # the stand-in is in the environment's every interpreter


def test_every_step_after_torch_is_constrained_to_the_environments_torch(both):
    asv, setup, repo = both
    for side in (asv, setup):
        reqs = reqs_of(side)
        assert reqs[0] == "torch==2.13.0"   # a fresh machine: the reference release
        for req, flags, _ in side[1:]:
            assert req == "stand-in" or f"-c {CONSTRAINTS}" in flags, (req, flags)
    assert (repo / ".venv" / CONSTRAINTS).read_text().strip() == "torch==2.13.0"


def test_setup_sh_keeps_a_torch_it_finds_and_pins_every_step_to_it(tmp_path):
    """A base interpreter with another supported release (a CPU wheel, 2.5.1+cpu): pip is never
    asked for torch, and every pip call is constrained to exactly that build."""
    calls, env, repo = setup_sh_installs(tmp_path, base_env(tmp_path, "2.5.1+cpu"))
    setup = flatten(calls, ".", env)
    assert not any(r.startswith("torch") for r in reqs_of(setup)), reqs_of(setup)
    assert all(f"-c {CONSTRAINTS}" in f for r, f, _ in setup if r != "stand-in")
    assert (repo / ".venv" / CONSTRAINTS).read_text().strip() == "torch==2.5.1+cpu"


def test_a_refused_switch_stops_the_set_up_before_any_install(tmp_path):
    """A refusal of the plan's must stop the script: read from a here-string, a command
    substitution's failure is not seen by ``set -e``, and the set-up used to carry on."""
    base = dict(base_env(tmp_path, "2.5.1+cpu"), SWINKIT_ALLOW_CPU_TORCH="maybe")
    calls, env, repo = setup_sh_installs(tmp_path, base, expect_rc=1)
    stderr = (repo / "setup.stderr").read_text()
    assert "SWINKIT_ALLOW_CPU_TORCH must be 0 or 1, got 'maybe'" in stderr
    assert "FAILED at step 0" in stderr
    assert calls == []


def test_a_compiled_mmcv_already_there_is_kept(tmp_path):
    base = dict(base_env(tmp_path), FAKE_FULL_MMCV="1")
    calls, env, _ = setup_sh_installs(tmp_path, base)
    reqs = reqs_of(flatten(calls, ".", env))
    assert not any(r.startswith("mmcv") for r in reqs), reqs
    assert "mmengine==0.10.7" in reqs and "PROJECT" in reqs


def test_deepspeed_is_installed_pure_python_without_its_dependencies(both):
    for side in both[:2]:
        found = [(f, dict(e)) for r, f, e in side if r == "deepspeed==0.19.8"]
        assert len(found) == 1, reqs_of(side)
        flags, env = found[0]
        assert {"--no-deps", "--no-build-isolation"} <= set(flags)
        assert env.get("DS_BUILD_OPS") == "0"
        reqs = reqs_of(side)
        # its dependencies came before it, with the project's, as pyproject's extra lists them
        extra = [r.replace(" ", "") for r in tomllib.loads((ROOT / "pyproject.toml").read_text())
                 ["project"]["optional-dependencies"]["deepspeed"]]
        before = set(reqs[:reqs.index("deepspeed==0.19.8")])
        assert set(extra) - {"deepspeed==0.19.8"} <= before


def test_an_old_commits_wheel_gets_its_own_pins_with_mmcv_lite(tmp_path):
    """asv's history mode builds commits from before mmcv-lite: their wheels pin torch and the
    full mmcv. The pins below are that commit's (adefca0) Requires-Dist, written out by hand."""
    old = tmp_path / WHEEL
    meta = "\n".join(["Metadata-Version: 2.1", "Name: swinkit", "Version: 0.1.0",
                      *(f"Requires-Dist: {r}" for r in (
                          "torch==2.13.0", "mmcv==2.1.0", "mmengine==0.10.7",
                          "mmsegmentation==1.2.2", "numpy", 'pytest>=8; extra == "test"',
                          'deepspeed==0.19.8; extra == "deepspeed"',
                          'hjson; extra == "deepspeed"', 'tensorboard; extra == "trace"'))])
    with zipfile.ZipFile(old, "w") as whl:
        whl.writestr("swinkit-0.1.0.dist-info/METADATA", meta)
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "env_spec.py"), "install",
                          str(old), "--dry-run"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, check=True)
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    deps = next(c for c in lines if "mmengine==0.10.7" in c)
    assert deps[deps.index("mmengine==0.10.7") - 1] == "mmcv-lite==2.1.0"
    assert "mmcv==2.1.0" not in deps and "torch==2.13.0" not in deps
    assert {"pytest>=8", "hjson"} <= set(deps) and "tensorboard" not in deps
    assert lines[-1] == ["stand-in"]
    assert not (tmp_path / CONSTRAINTS).exists()   # a dry run writes nothing


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


def test_asv_version_required():
    from importlib.metadata import requires, version

    from packaging.requirements import Requirement
    from packaging.version import Version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = {Requirement(d).name: Requirement(d) for d in project["dependencies"]}
    assert str(deps["asv"].specifier) == ">=0.6.6"
    assert Version(version("asv")) in deps["asv"].specifier
    # asv-runner: at least what that asv requires
    needed = next(Requirement(r) for r in requires("asv") if Requirement(r).name == "asv-runner")
    ours = deps["asv-runner"].specifier
    lowest = min(Version(s.version) for s in ours if s.operator == ">=")
    assert lowest in needed.specifier
    assert Version(version("asv-runner")) in ours
