"""The in-launch prediction (``tools/attribute.py --in-launch``, formerly ``--same-launch``):
world size N' predicted from steps of each rank alone made inside the launch at N' it is then
scored against. Not held out: the run predicted from shares its launch, and its moments of the
host, with the run scored (a user who has not run N' cannot have those steps); it lies between
the oracle, which measures inside the run at N', and a held-out forecast
(:mod:`swinkit.experiments.predict_run`'s separate launches).

On CPU this mode also models ranks sharing cores (the model's own step beside the others
running a stand-in): a CPU-proxy matter that a GPU job, one rank per device, does not have.
"""
from __future__ import annotations

import dataclasses
import os

from swinkit.attribution.held_out_scores import score_against
from swinkit.experiments.held_out_parts import (earlier_timings, explain_miss, predict_one,
                                                score_unpaired_run)
from swinkit.injection import Injection
from swinkit.runs.component_costs import basis_of, costs, predict_from
from swinkit.runs.ddp_run import run_ddp


def in_launch_row(specs: dict, timed: dict, history: dict, injection: Injection, number: int,
                  say, unpaired: bool = False) -> dict:
    """One launch per target size N' whose schedule interleaves, step by step, DDP over the
    N' ranks, the local steps (the paired oracle's components) and *solo* steps: one rank
    alone over its group of one while the other ranks idle at a barrier, the ranks taking
    turns, world size 1 in each rank's place inside the launch
    (:func:`swinkit.rank.step_switch.schedule`). N' is predicted from the solo steps (the
    basis at 1, each rank its own, and T(1)) and the timings at N' (``timed``: pooled per
    size; ``history``: each size's timings in the order made) only, then scored against
    the DDP steps. On CPU the compute slowdown by the host's sharing is the model's own:
    beside each solo step the same rank runs its step with the others running the stand-in,
    not the model (``beside_slowdown``), taken in place of the stand-in's reading. The
    prediction is computed after the launch, from nothing of its DDP steps (a test changes
    every figure of those steps and holds the prediction still). ``say(ws, what)``: progress.
    ``unpaired``: each target also run unpaired after it, and scored against that too."""
    row = {"launch": number, "measured_from": {}, "targets": {}, "in_launch": True,
           "load_average": os.getloadavg()[0],
           "timed": {ws: dataclasses.asdict(history[ws][-1]) for ws in timed},
           **earlier_timings(history, 0)}
    for ws, target in timed.items():
        say(ws, "DDP, its components and each rank alone in turn, interleaved step by step")
        spec = specs[ws]  # with its solo steps
        run = run_ddp(spec, progress=lambda s: say(ws, s))
        basis, t1 = basis_of(run, "solo_run"), run["solo_run"]["per_batch_s"]
        beside = run.get("beside_slowdown")  # on CPU: the model's own step beside the stand-in
        if beside:
            target = dataclasses.replace(target, model_slowdown=beside["ratio"])
        pred = predict_one(basis, t1, target, injection.for_world_size(ws))
        pred["beside_slowdown"] = beside
        pred["bucket_spans"] = run.get("bucket_spans")  # the run's all-reduces, as it had them
        score_against(pred, run["iter_s"], predict_from(run["local_run"], spec))
        explain_miss(pred, basis, target, costs(run["local_run"]), run["iter_s"], None,
                     spec.injection)
        if unpaired:
            score_unpaired_run(pred, spec, lambda s: say(ws, s))
        row["targets"][ws] = pred
        # the row's T(1) and basis: the first target's launch (each prediction has its own)
        row["measured_from"].setdefault(1, t1)
        row.setdefault("basis", basis)
        row.setdefault("t1_s", t1)
    return row
