"""swinkit's stand-in for mmcv's compiled extension: used only where no compiled one loads, every
op called through it raises naming the op, and swinkit's workloads call none.

Each case runs in a fresh interpreter over a folder of its own: a small ``mmcv`` package with or
without an ``_ext`` module, or an overlay of the installed mmcv with its compiled extension left
out (what mmcv-lite is), so the cases hold whichever mmcv this environment has.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(code: str, path: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter with ``path`` first on sys.path, then this checkout."""
    env = dict(os.environ, PYTHONPATH=f"{path}{os.pathsep}{ROOT}")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=path,
                          capture_output=True, text=True, timeout=timeout)


def small_mmcv(tmp_path: Path, ext: str | None) -> Path:
    """A package ``mmcv`` whose ``_ext`` is ``ext``'s source (None: no ``_ext`` at all)."""
    (tmp_path / "mmcv").mkdir()
    (tmp_path / "mmcv" / "__init__.py").write_text("__version__ = '2.1.0'\n")
    if ext is not None:
        (tmp_path / "mmcv" / "_ext.py").write_text(ext)
    return tmp_path


def test_without_a_compiled_extension_every_op_raises_naming_it(tmp_path):
    out = run("""
        import swinkit, importlib
        ext = importlib.import_module("mmcv._ext")
        from swinkit.mmcv_stand_in import in_use, called
        assert in_use() and hasattr(ext, "nms") and hasattr(ext, "roi_align_forward")
        try:
            ext.nms(1, 2)
        except RuntimeError as exc:
            print(exc)
        print(called())
    """, small_mmcv(tmp_path, None))
    assert out.returncode == 0, out.stderr
    message, record = out.stdout.strip().splitlines()
    assert message.startswith("mmcv op 'nms' was called, but this environment has no compiled mmcv")
    assert "pip install --no-build-isolation mmcv==2.1.0" in message   # how to get the real one
    assert record == "['nms']"


def test_a_compiled_extension_that_loads_is_used_as_it_is(tmp_path):
    out = run("""
        import swinkit, mmcv._ext as ext
        from swinkit.mmcv_stand_in import in_use
        print(in_use(), ext.nms(3), ext.__file__.endswith("mmcv/_ext.py"))
    """, small_mmcv(tmp_path, "def nms(x):\n    return x * 2\n"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "6", "True"]


def test_a_compiled_extension_that_does_not_load_is_replaced_with_a_warning(tmp_path):
    """An mmcv built against another torch fails at load ("undefined symbol"): MMSegmentation
    would then not import at all; the stand-in takes its place and the warning says why."""
    broken = "raise ImportError('_ext.so: undefined symbol: _ZN3c104cuda9SetDeviceEi')\n"
    out = run("""
        import warnings
        warnings.simplefilter("always")
        import swinkit, mmcv._ext
        from swinkit.mmcv_stand_in import in_use
        print(in_use())
    """, small_mmcv(tmp_path, broken))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
    assert "does not load (_ext.so: undefined symbol" in out.stderr
    assert "using swinkit's stand-in" in out.stderr


def test_the_site_packages_copy_and_swinkits_own_make_one_finder(tmp_path):
    """tools/env_spec.py copies the stand-in into site-packages under another module name and
    a .pth line installs it at start-up; swinkit's import installs its own. Told apart by
    class (not by name), the two finders asked each other for mmcv._ext forever."""
    path = small_mmcv(tmp_path, None)
    (path / "_swinkit_mmcv_stand_in.py").write_text((ROOT / "swinkit" / "mmcv_stand_in.py").read_text())
    out = run("""
        import sys, _swinkit_mmcv_stand_in as copy
        copy.install()
        import swinkit
        import mmcv._ext
        print(sum(type(f).__name__ == "StandInFinder" for f in sys.meta_path),
              type(sys.modules["mmcv._ext"]).__module__)
    """, path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "_swinkit_mmcv_stand_in"]


@pytest.fixture(scope="module")
def mmcv_lite(tmp_path_factory) -> Path:
    """The installed mmcv without its compiled extension: every entry linked but ``_ext*``."""
    import importlib.util
    installed = Path(importlib.util.find_spec("mmcv").origin).parent
    folder = tmp_path_factory.mktemp("lite")
    (folder / "mmcv").mkdir()
    for entry in installed.iterdir():
        if not entry.name.startswith("_ext"):
            (folder / "mmcv" / entry.name).symlink_to(entry)
    return folder


@pytest.mark.slow
def test_the_workloads_call_no_mmcv_op(mmcv_lite, data_root):
    """A training step of the test preset (MMSegmentation's model, loss and optimizer wrapper)
    and a batch from a loader whose worker is spawned (it imports MMSegmentation afresh) run
    with the stand-in and call no op through it."""
    out = run(f"""
        import swinkit, torch
        from torch.utils.data import DataLoader
        from swinkit.config import load_config
        from swinkit.data.loader import build_loader, build_dataset
        from swinkit.model.segmentor import build_optimizer, build_segmentor, train_step
        from swinkit.mmcv_stand_in import in_use, called
        cfg = load_config("test", {str(data_root)!r})
        model = build_segmentor(cfg)
        optim, _ = build_optimizer(cfg, model)
        loss, _ = train_step(model, optim, next(iter(build_loader(cfg, workers=0))))
        spawned = DataLoader(build_dataset(cfg), batch_size=2, num_workers=1,
                             multiprocessing_context="spawn", collate_fn=list)
        batch = next(iter(spawned))
        print(in_use(), float(loss) > 0, len(batch), called())
        import mmcv.ops   # a planted call: the record must show it
        try:
            mmcv.ops.nms(torch.zeros(2, 4), torch.zeros(2), 0.5)
        except RuntimeError:
            pass
        print(called())
    """, mmcv_lite)
    assert out.returncode == 0, out.stderr[-3000:]
    first, planted = out.stdout.strip().splitlines()[-2:]
    assert first == "True True 2 []"
    assert planted == "['nms']"
