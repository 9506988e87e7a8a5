"""``swinkit scorecard``'s runs: K fresh launches of a held-out prediction (separate launches,
each made alike and owing nothing to the others: :func:`~swinkit.predict.supervisor.held_out.
held_out`), each scored against the paired run at N' and against the same configuration run
unpaired, kept with what they ran on (commit, host, date, the command) so that a figure quoted
from them can be traced and made again."""
from __future__ import annotations

import shlex
import sys

from swinkit.predict.numbers.assumptions import CPU_LIMIT, on_cpu
from swinkit.predict.numbers.scorecard import scorecard
from swinkit.config import load_config
from swinkit.predict.supervisor.held_out import held_out
from swinkit.experiments.provenance import git_commit, machine, now_utc
from swinkit.injection import Injection
from swinkit.input_checks import check_int


def run_scorecard(preset: str, launches: int = 5, world_sizes=(1, 2), predict_from=(1,),
                  iters: int | None = None, injection: Injection | None = None,
                  command: str | None = None, progress=print) -> dict:
    """The scorecard's record: ``held_out`` (every launch's runs, predictions and scores, as
    :func:`held_out` returns them) and ``scorecard`` (:func:`~swinkit.predict.numbers.scorecard.
    scorecard`'s numbers), with ``commit``, ``dirty``, ``machine``, ``started``, ``finished``
    and ``command`` (as typed, to make it again). ValueError names the bad option before any
    process starts."""
    iters = check_scorecard(preset, launches, iters, world_sizes, predict_from)
    started, commit = now_utc(), git_commit()  # the code that runs: read before, not after
    result = held_out(preset, list(world_sizes), list(predict_from), iters=iters,
                      repeats=launches, score=True, injection=injection, unpaired=True,
                      progress=progress)
    return {"kind": "swinkit-scorecard", "preset": preset, "launches": launches,
            "iters": iters, "from": result["from"], "targets": result["targets"],
            "command": command or shlex.join(sys.argv),
            "machine": machine(), **commit, "started": started, "finished": now_utc(),
            "cpu_limit": CPU_LIMIT if on_cpu(result) else None,
            "scorecard": scorecard(result), "held_out": result}


def check_scorecard(preset: str, launches: int, iters: int | None, world_sizes=(1, 2),
                    predict_from=(1,)) -> int:
    """The measured iterations per run (the preset's ``measured_iters`` unless given, as the
    attribution report takes them), or ValueError naming the option."""
    check_int("launches", launches, 2)  # one launch has no worst, range or host spread
    if not predict_from or not any(ws > max(predict_from) for ws in world_sizes):
        raise ValueError(f"--world-sizes: none above the largest --predict-from size "
                         f"({max(predict_from) if predict_from else 'none given'}): nothing "
                         "to predict")
    if iters is not None:
        return check_int("iters", iters, 1)
    return int(getattr(load_config(preset), "measured_iters", 10))
