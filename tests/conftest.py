"""Shared fixtures: a small synthetic ADE20K per test session, and the test preset."""
from __future__ import annotations

import shutil

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def data_root(tmp_path_factory):
    from swinkit.data.synthetic import write_synthetic_ade20k
    root = tmp_path_factory.mktemp("ade") / "ADEChallengeData2016"
    return write_synthetic_ade20k(root, n_train=8, n_val=2, progress=None)


@pytest.fixture
def data_copy(data_root, tmp_path):
    """A private copy a test may corrupt."""
    root = tmp_path / "ADEChallengeData2016"
    shutil.copytree(data_root, root)
    return root


@pytest.fixture
def test_cfg(data_root):
    from swinkit.config import load_config
    return load_config("test", data_root)


def project_processes() -> list:
    """Live processes started by a swinkit launch (they carry SWINKIT_RUN_DIR)."""
    import psutil
    found = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if "SWINKIT_RUN_DIR" in p.environ():
                found.append(p)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def no_orphans():
    """Fails the test if any process of a swinkit launch is alive after it."""
    import time
    before = {p.pid for p in project_processes()}
    yield
    deadline = time.monotonic() + 10
    while True:
        left = [p for p in project_processes() if p.pid not in before]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, f"orphan processes: {[(p.pid, p.cmdline()[:4]) for p in left]}"
