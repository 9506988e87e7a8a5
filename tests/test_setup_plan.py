"""The set-up's choices (tools/setup_plan.py) from what a machine has, driven with fake
interpreters: a torch swinkit supports is kept whatever its build and release, one too old or a
Python outside 3.11-3.13 is refused before anything is installed, and an offline wheelhouse is
checked against its manifest. The real set-up beside another torch runs in `.ci/run`'s
compatibility leg (Python 3.12, torch 2.5.1).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tool_module

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def plan():
    return sys.modules.get("setup_plan") or tool_module("setup_plan")


def fake_interpreter(tmp_path: Path, torch_version: str | None, cuda: str | None = None) -> dict:
    """An environment in which this Python imports a stand-in torch of ``torch_version``
    (None: no torch at all), as a base interpreter with that torch installed would."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    if torch_version is None:
        body = "raise ModuleNotFoundError(\"No module named 'torch'\")\n"
    else:
        body = f"__version__ = {torch_version!r}\nclass version:\n    cuda = {cuda!r}\n"
    (site / "torch" / "__init__.py").write_text(body)
    env = {k: v for k, v in os.environ.items()
           if k not in ("SWINKIT_REUSE_TORCH", "SWINKIT_WHEELHOUSE", "SWINKIT_ALLOW_CPU_TORCH")}
    return dict(env, PYTHONPATH=str(site))


def run_plan(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "setup_plan.py"), *args],
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("version, cuda", [
    ("2.5.1+cpu", None),           # the oldest supported, a CPU wheel
    ("2.11.0+cu130", "13.0"),      # what the H100 and H200 machines had
    ("2.13.0", None),              # the reference itself
])
def test_a_supported_torch_is_kept_whatever_its_build(tmp_path, version, cuda):
    """The venv shares the base's site-packages through a .pth that site processes like the
    system's: it works where the base is itself a venv (the GPU nodes' torch lived in one),
    which ``--system-site-packages`` would not see."""
    env = fake_interpreter(tmp_path, version, cuda)
    shared = run_plan(env, "share-base", "--venv", str(tmp_path / "venv"))
    sites = json.loads(subprocess.run(
        [sys.executable, "-c", "import json, site; print(json.dumps(site.getsitepackages()))"],
        capture_output=True, text=True, check=True).stdout)
    assert shared.returncode == 0 and shared.stdout.split() == sites
    pth = tmp_path / "venv" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" \
        / "site-packages" / "_swinkit_base_site.pth"
    assert pth.read_text() == "".join(f"import site; site.addsitedir({s!r})\n" for s in sites)
    assert run_plan(env, "torch-requirement").stdout.strip() == ""
    checked = run_plan(env, "check")
    assert checked.returncode == 0 and f"keeping torch {version}" in checked.stderr


def test_a_fresh_machine_gets_the_reference_torch_in_a_venv_of_its_own(tmp_path):
    env = fake_interpreter(tmp_path, None)
    assert run_plan(env, "share-base", "--venv", str(tmp_path / "venv")).stdout.strip() == ""
    assert not list((tmp_path / "venv").rglob("*.pth"))
    assert run_plan(env, "torch-requirement").stdout.strip() == "torch==2.13.0"
    assert run_plan(env, "check").returncode == 0


def test_reuse_off_gives_the_venv_its_own_torch_even_beside_a_good_one(tmp_path):
    env = dict(fake_interpreter(tmp_path, "2.11.0+cu130", "13.0"), SWINKIT_REUSE_TORCH="0")
    assert run_plan(env, "share-base", "--venv", str(tmp_path / "v")).stdout.strip() == ""
    env["SWINKIT_REUSE_TORCH"] = "yes"
    bad = run_plan(env, "share-base", "--venv", str(tmp_path / "v"))
    assert bad.returncode == 2 and "SWINKIT_REUSE_TORCH must be 0 or 1, got 'yes'" in bad.stderr


def test_a_torch_older_than_2_5_is_refused_before_anything_is_installed(tmp_path):
    env = fake_interpreter(tmp_path, "2.4.1+cu121", "12.1")
    out = run_plan(env, "check")
    assert out.returncode == 2
    assert "torch 2.4.1+cu121 is older than swinkit supports (2.5 or newer)" in out.stderr
    assert "SWINKIT_REUSE_TORCH=0" in out.stderr          # what to do instead
    # with a venv of its own, the old torch of the base is not in the way
    assert run_plan(dict(env, SWINKIT_REUSE_TORCH="0"), "check").returncode == 0


def test_a_torch_newer_than_the_newest_tested_is_kept_with_a_warning(tmp_path):
    env = fake_interpreter(tmp_path, "2.16.0+cu132", "13.2")
    out = run_plan(env, "check")
    assert out.returncode == 0
    assert "torch 2.16.0+cu132 is newer than the newest release swinkit is tested with" in out.stderr
    assert run_plan(env, "torch-requirement").stdout.strip() == ""


def test_python_outside_3_11_to_3_13_is_refused_naming_the_version(plan):
    for good in ((3, 11, 7), (3, 12, 3), (3, 13, 0)):
        plan.supported.check_python(good)
    for bad, shown in (((3, 10, 13), "3.10.13"), ((3, 14, 0), "3.14.0")):
        with pytest.raises(ValueError, match=rf"Python {shown} is not supported .*3\.11, 3\.12, 3\.13"):
            plan.supported.check_python(bad)


def test_set_up_refuses_an_unsupported_python_before_making_the_venv(tmp_path):
    """The whole script, with an interpreter that says it is Python 3.10: it stops at step 0,
    and no .venv exists afterwards."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["cp", "-r", *(str(ROOT / p) for p in ("tools", "swinkit", "pyproject.toml")),
                    str(repo)], check=True)
    old = tmp_path / "python3.10"   # answers version questions as 3.10.13, runs the rest
    old.write_text("#!/bin/bash\n"
                   'case "$1 $2" in *version_info*) echo 3 10 13; exit;; *sys.version*) '
                   "echo 3.10.13; exit;; esac\n"
                   f'exec {sys.executable} "$@"\n')
    old.chmod(0o755)
    out = subprocess.run(["bash", "tools/setup.sh"], cwd=repo, capture_output=True, text=True,
                         env=dict(os.environ, PYTHON=str(old)), timeout=120)
    assert out.returncode != 0
    assert "Python 3.10.13 is not supported" in out.stderr
    assert "FAILED at step 0" in out.stderr
    assert not (repo / ".venv").exists()


def test_a_cpu_torch_on_a_gpu_node_is_refused_unless_allowed(plan):
    cpu = plan.Torch("2.13.0+cpu")
    with pytest.raises(ValueError, match="NVIDIA driver"):
        plan.torch_requirement(cpu, gpu_node=True)
    assert plan.torch_requirement(cpu, gpu_node=True, environ={"SWINKIT_ALLOW_CPU_TORCH": "1"}) == []
    assert plan.torch_requirement(plan.Torch("2.13.0+cu126", "12.6"), gpu_node=True) == []


def test_a_wheelhouse_is_checked_against_its_manifest_and_names_what_is_missing(plan, tmp_path):
    house = tmp_path / "wheels"
    house.mkdir()
    files = ["mmcv_lite-2.1.0-py2.py3-none-any.whl", "deepspeed-0.19.8.tar.gz"]
    for f in files:
        (house / f).write_bytes(b"")
    (house / "swinkit-wheelhouse.json").write_text(json.dumps(
        {"python": "3.12", "platforms": [], "requirements": [], "torch": False, "files": files}))
    assert plan.wheelhouse.check(house, (3, 12, 3), need_torch=False)["files"] == files
    with pytest.raises(ValueError, match=r"made for Python 3\.12, this set-up runs Python 3\.11"):
        plan.wheelhouse.check(house, (3, 11, 7), need_torch=False)
    with pytest.raises(ValueError, match="no torch to keep and none in"):
        plan.wheelhouse.check(house, (3, 12, 3), need_torch=True)
    (house / files[0]).unlink()
    with pytest.raises(ValueError, match=r"lacks 1 file\(s\) its manifest lists: "
                                         r"mmcv_lite-2\.1\.0-py2\.py3-none-any\.whl"):
        plan.wheelhouse.check(house, (3, 12, 3), need_torch=False)


def test_the_set_up_check_reads_the_wheelhouse_before_installing(tmp_path):
    env = dict(fake_interpreter(tmp_path, "2.11.0+cu130", "13.0"),
               SWINKIT_WHEELHOUSE=str(tmp_path / "nowhere"))
    out = run_plan(env, "check")
    assert out.returncode == 2 and "swinkit-wheelhouse.json not found" in out.stderr
    assert run_plan(env, "pip-source").stdout.split() == [
        "--no-index", "--find-links", str(tmp_path / "nowhere")]


def test_the_tested_releases_span_the_minimum_to_the_reference(plan):
    """One list says which releases run where; its ends are the minimum and the reference,
    so a raised minimum or a new reference without a tested run shows here."""
    s = plan.supported
    tested = sorted(s.TORCH_TESTED, key=s.release)
    assert s.release(tested[0])[:2] == s.TORCH_MIN
    assert s.TORCH_REFERENCE in s.TORCH_TESTED
    deps = (ROOT / "pyproject.toml").read_text()
    assert f'"torch>={".".join(map(str, s.TORCH_MIN))}"' in deps
    assert 'requires-python = ">=3.11,<3.14"' in deps


def test_the_stand_in_is_not_taken_for_a_compiled_mmcv(tmp_path):
    """After a first set-up every interpreter of the environment has the stand-in (a .pth
    line): the probe for a user's compiled mmcv must not take it for one, or every later
    set-up would leave mmcv-lite out."""
    site = tmp_path / "site"
    (site / "mmcv").mkdir(parents=True)
    (site / "mmcv" / "__init__.py").write_text("__version__ = '2.1.0'\n")
    (site / "sitecustomize.py").write_text(   # what the .pth line does at start-up
        f"import sys; sys.path.append({str(ROOT)!r}); import swinkit.mmcv_stand_in as s; s.install()\n")
    env = dict(os.environ, PYTHONPATH=str(site))
    assert run_plan(env, "keep-mmcv").stdout.strip() == ""
    (site / "mmcv" / "_ext.py").write_text("def nms(x):\n    return x\n")   # a compiled one
    assert run_plan(env, "keep-mmcv").stdout.strip() == "yes"


def test_a_wheelhouse_for_another_machine_is_refused(plan, tmp_path):
    house = tmp_path / "wheels"
    house.mkdir()
    (house / "swinkit-wheelhouse.json").write_text(json.dumps(
        {"python": "3.12", "platforms": ["manylinux_2_28_s390x"], "requirements": [],
         "torch": False, "files": []}))
    with pytest.raises(ValueError, match=r"made for s390x, this node is x86_64"):
        plan.wheelhouse.check(house, (3, 12, 3), need_torch=False)


def test_making_a_wheelhouse_never_empties_a_folder_it_did_not_write(plan, tmp_path):
    dest = tmp_path / "wheels"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="is not empty and holds no swinkit-wheelhouse.json"):
        plan.wheelhouse._clear(dest)
    assert (dest / "notes.txt").read_text() == "mine"
    (dest / "notes.txt").unlink()
    (dest / "old-1.0-py3-none-any.whl").write_bytes(b"")
    (dest / "swinkit-wheelhouse.json").write_text(json.dumps(
        {"files": ["old-1.0-py3-none-any.whl"]}))
    plan.wheelhouse._clear(dest)               # an earlier make's files go, so none is left over
    assert list(dest.iterdir()) == []


def test_node_has_leaves_out_only_the_named_distributions_files(plan, tmp_path):
    """Names are matched as pip matches them (case, ``-``/``_``/``.`` folded), against the
    distribution in each file name: ``opencv-python`` takes OpenCV's wheel, not ``opencv``-
    prefixed others; a version or a tag that looks like a name is not matched."""
    dest = tmp_path / "wheels"
    dest.mkdir()
    names = ["opencv_python-5.0.0.93-cp37-abi3-manylinux_2_28_x86_64.whl",
             "opencv_python_headless-5.0.0.93-cp37-abi3-manylinux_2_28_x86_64.whl",
             "numpy-2.5.5-cp312-cp312-manylinux_2_28_x86_64.whl",
             "Pympler-1.1-py3-none-any.whl",
             "deepspeed-0.19.8.tar.gz",
             "typing_extensions-4.16.0-py3-none-any.whl",
             "swinkit-wheelhouse.json"]
    for n in names:
        (dest / n).write_bytes(b"")
    gone = plan.wheelhouse.leave_out(dest, ("opencv-python", "pympler", "typing-extensions"))
    assert gone == ["Pympler-1.1-py3-none-any.whl",
                    "opencv_python-5.0.0.93-cp37-abi3-manylinux_2_28_x86_64.whl",
                    "typing_extensions-4.16.0-py3-none-any.whl"]
    assert sorted(p.name for p in dest.iterdir()) == sorted(
        ["opencv_python_headless-5.0.0.93-cp37-abi3-manylinux_2_28_x86_64.whl",
         "numpy-2.5.5-cp312-cp312-manylinux_2_28_x86_64.whl", "deepspeed-0.19.8.tar.gz",
         "swinkit-wheelhouse.json"])
    assert plan.wheelhouse.leave_out(dest, ("deepspeed",)) == ["deepspeed-0.19.8.tar.gz"]


def test_a_wheelhouse_leaving_out_the_nodes_own_is_checked_against_the_node(plan, tmp_path):
    """What was left out for the node's own must be there, named when it is not, and only
    where the environment shares the node's packages (with its torch)."""
    house = tmp_path / "wheels"
    house.mkdir()
    torch_file = "torch-2.13.0-cp312-cp312-manylinux_2_28_x86_64.whl"   # made --with-torch
    (house / torch_file).write_bytes(b"")
    (house / "swinkit-wheelhouse.json").write_text(json.dumps(
        {"python": "3.12", "platforms": [], "requirements": [], "torch": True,
         "files": [torch_file], "node_has": ["numpy", "opencv-python"]}))
    node = {"numpy": "2.1.0", "opencv-python": "4.10.0.84"}
    assert plan.wheelhouse.check(house, (3, 12, 3), False, installed=node.get)["node_has"]
    with pytest.raises(ValueError, match=r"leaves out opencv-python for the node's own, but "
                                         r".* has no opencv-python: install"):
        plan.wheelhouse.check(house, (3, 12, 3), False, installed={"numpy": "2.1.0"}.get)
    with pytest.raises(ValueError, match="shares the node's packages only with its torch"):
        plan.wheelhouse.check(house, (3, 12, 3), True, installed=node.get)
    # a wheelhouse made before --node-has existed has no such key, and is taken as it is
    (house / "swinkit-wheelhouse.json").write_text(json.dumps(
        {"python": "3.12", "platforms": [], "requirements": [], "torch": False, "files": []}))
    assert plan.wheelhouse.check(house, (3, 12, 3), False, installed={}.get)


def test_the_set_up_check_names_a_distribution_the_node_lacks_before_installing(tmp_path):
    """The set-up's step 0, as tools/setup.sh runs it, on the interpreter it will share."""
    house = tmp_path / "wheels"
    house.mkdir()
    (house / "swinkit-wheelhouse.json").write_text(json.dumps(
        {"python": "%d.%d" % sys.version_info[:2], "platforms": [], "requirements": [],
         "torch": False, "files": [], "node_has": ["pytest", "surely-not-a-distribution"]}))
    env = dict(fake_interpreter(tmp_path, "2.11.0+cu130", "13.0"), SWINKIT_WHEELHOUSE=str(house))
    out = run_plan(env, "check")
    assert out.returncode == 2
    assert "has no surely-not-a-distribution" in out.stderr and "no pytest" not in out.stderr
    # only what the node has, at another version than the wheelhouse's: a note, the set-up goes on
    (house / "swinkit-wheelhouse.json").write_text(json.dumps(
        {"python": "%d.%d" % sys.version_info[:2], "platforms": [], "requirements": [],
         "torch": False, "files": [], "node_has": ["pytest"],
         "left_out": ["pytest-0.0.1-py3-none-any.whl"]}))
    out = run_plan(env, "check")
    assert out.returncode == 0, out.stderr
    assert f"the node's pytest is {pytest.__version__}, the wheelhouse was resolved with 0.0.1" \
        in out.stderr


def test_node_has_refuses_torch_by_name_and_beside_with_torch(plan, tmp_path):
    with pytest.raises(ValueError, match="--node-has: torch is never in the wheelhouse"):
        plan.wheelhouse.make(tmp_path / "w", "3.12", node_has=("Torch",))
    with pytest.raises(ValueError, match="--node-has with --with-torch"):
        plan.wheelhouse.make(tmp_path / "w", "3.12", with_torch=True, node_has=("numpy",))
    assert not (tmp_path / "w").exists()   # refused before anything is made


DOWNLOADED = ["numpy-2.5.5-cp312-cp312-manylinux_2_28_x86_64.whl",
              "opencv_python-5.0.0.93-cp37-abi3-manylinux_2_28_x86_64.whl",
              "mmengine-0.10.7-py3-none-any.whl", "deepspeed-0.19.8.tar.gz"]


@pytest.fixture
def fake_pip(plan, monkeypatch):
    """pip's downloads faked: every make 'downloads' DOWNLOADED into its --dest."""
    def run(cmd, env=None):
        dest = Path(cmd[cmd.index("-d") + 1])
        for name in DOWNLOADED:
            (dest / name).write_bytes(b"")
    monkeypatch.setattr(plan.wheelhouse, "_run", run)


def test_make_leaves_out_what_the_node_has_and_says_so_in_the_manifest(plan, fake_pip,
                                                                       tmp_path, capsys):
    """The command line as a user types it (names split on commas, the option repeated,
    spaces and case as they come), twice into the same folder: the files left out are gone,
    the manifest names them, and the wheelhouse passes its check on a node that has them."""
    dest = tmp_path / "wheels"
    for _ in range(2):
        assert plan.wheelhouse.main(["make", "--python", "3.12", "--dest", str(dest),
                                     "--node-has", "NumPy, opencv_python", "--node-has",
                                     "scipy"]) == 0
    manifest = json.loads((dest / "swinkit-wheelhouse.json").read_text())
    assert manifest["node_has"] == ["numpy", "opencv-python"]
    assert manifest["left_out"] == [DOWNLOADED[0], DOWNLOADED[1]]
    assert manifest["files"] == sorted(DOWNLOADED[2:])
    assert sorted(p.name for p in dest.iterdir()) == sorted(
        [*DOWNLOADED[2:], "swinkit-wheelhouse.json"])
    out = capsys.readouterr().out
    assert "the set-up needs no scipy" in out
    assert "left out for the node's own: numpy, opencv-python" in out
    node = {"numpy": "2.5.5", "opencv-python": "4.10.0.84"}
    assert plan.wheelhouse.check(dest, (3, 12, 1), False, installed=node.get)
    assert plan.wheelhouse.version_notes(manifest, node.get) == [
        "the node's opencv-python is 4.10.0.84, the wheelhouse was resolved with 5.0.0.93: "
        "should pip find no opencv-python it accepts, remake the wheelhouse without "
        "opencv-python in --node-has"]
