"""What tests that build a rank in this process share: a stand-in for the launched rank, and
an autouse fixture that puts back the TF32/cuDNN switches a precision sets process-wide
(import it into a test module to have it there)."""
from __future__ import annotations

import pytest
import torch

from swinkit.model import precision as mp


@pytest.fixture(autouse=True)
def switches_as_they_were():
    """A precision sets this process's TF32/cuDNN switches: put them back after each test."""
    before = mp._switch_state(torch.backends)
    yield
    mp._set_switch_state(torch.backends, before)


class OneRank:
    """What a rank's set-up reads of swinkit.launch.rank.Rank, for a gloo world of one."""
    rank, world_size, local_rank = 0, 1, 0

    def heartbeat(self, step, stage="step"):
        pass
