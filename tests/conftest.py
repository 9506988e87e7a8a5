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
