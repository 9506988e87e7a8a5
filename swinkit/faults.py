"""The one switch that injects faults for testing: ``$SWINKIT_FAULT``.

Forms (one fault per run):

    KIND:RANKS[:STEP]        kill | raise | hang | spin | nojoin | oom, on RANKS ("1", "0,1",
                             "all") at iteration STEP (default 2); read by each rank
    loader_kill:K            the loader worker that loads sample K dies (SIGKILL)
    loader_stall:K           ... hangs
    corrupt_allreduce:RANKS  these ranks send corrupted values into the all-reduce benchmark's
                             correctness check, as a faulty link would

Parsed here and nowhere else, so every layer (rank harness, data set, all-reduce benchmark)
agrees on the syntax; torch-free so the data layer's workers can read it cheaply.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

FAULT_ENV = "SWINKIT_FAULT"
RANK_KINDS = ("kill", "raise", "hang", "spin", "nojoin", "oom")
LOADER_KINDS = ("loader_kill", "loader_stall")
DEFAULT_STEP = 2


@dataclass(frozen=True)
class Fault:
    """A parsed ``$SWINKIT_FAULT``: ``ranks`` None means every rank; ``sample`` for loader faults."""
    kind: str
    ranks: tuple[int, ...] | None = None
    step: int = DEFAULT_STEP
    sample: int | None = None

    def on_rank(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks


def parse_fault(spec: str | None) -> Fault | None:
    """None for an empty switch; ValueError naming the switch for a malformed one."""
    if not spec:
        return None
    kind, _, rest = spec.partition(":")
    parts = rest.split(":") if rest else []
    try:
        if kind in LOADER_KINDS:
            return Fault(kind, sample=int(parts[0]))
        if kind == "corrupt_allreduce":
            return Fault(kind, ranks=_ranks(parts[0] if parts else "all"))
        if kind in RANK_KINDS:
            step = int(parts[1]) if len(parts) > 1 else DEFAULT_STEP
            return Fault(kind, ranks=_ranks(parts[0] if parts else "all"), step=step)
    except (IndexError, ValueError):
        pass
    raise ValueError(f"{FAULT_ENV}={spec!r} is not a fault: use KIND:RANKS[:STEP] with KIND one of "
                     f"{', '.join(RANK_KINDS)}, or loader_kill:K, loader_stall:K, "
                     "corrupt_allreduce:RANKS")


def _ranks(text: str) -> tuple[int, ...] | None:
    return None if text == "all" else tuple(int(r) for r in text.split(","))


def current_fault() -> Fault | None:
    """The fault named by this process's environment."""
    return parse_fault(os.environ.get(FAULT_ENV, ""))
