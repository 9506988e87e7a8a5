"""The held-out boundary at the value level: every figure of the scored DDP steps changed, the
prediction must not move.

The runs are real ones, recorded (``tests/data/held_out``: the ranks' results of a paired
launch at 1 and one at 2, ``test`` preset, 4 measured steps), fed to the real ``run_ddp``
summary, basis, prediction and scoring in place of the launch; only the timing launches at N'
(made before any run, without the model) are stated. What the test changes: in every rank's
result of the scored run at 2, the DDP steps' timeline (each iteration's phase marks and its
collectives: buffer broadcast, buckets, gradient sync), their iteration times, phases and the
loop's own times, stretched by a different factor per rank, and its local steps too.
"""
from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from swinkit.predict.numbers.extrapolate import Target

DATA = Path(__file__).parent / "data" / "held_out"
TARGET = Target(2, [0.0022, 0.0021], broadcast_s=0.0004, supply_images_per_s=400.0,
                loader_slowdown=1.02, sync_wait_s=0.001, iteration_wait_s=0.002,
                compute_slowdown=1.03)


def _recorded(name: str) -> dict:
    with gzip.open(DATA / f"{name}.json.gz", "rt") as f:
        return json.load(f)


def _stretch_ddp_steps(rank: dict, factor: float) -> None:
    """Every figure of a rank's DDP steps, stretched by ``factor`` from their first mark."""
    t0 = rank["timeline"][0]["marks"][0][1]

    def moved(t):
        return None if t is None else t0 + factor * (t - t0)
    for it in rank["timeline"]:
        it["marks"] = [[name, moved(t)] for name, t in it["marks"]]
        for c in it["collectives"]:
            for key in ("arrive", "done", "ready"):
                c[key] = moved(c.get(key))
    for key in ("iteration", "loop_iteration"):
        rank[key] = [factor * t for t in rank[key]]
    rank["phases"] = {p: [factor * t for t in ts] for p, ts in rank["phases"].items()}


def _mutated(recorded: dict) -> dict:
    out = copy.deepcopy(recorded)
    for r in out["ranks"]:
        _stretch_ddp_steps(r, 1.37 + 0.11 * r["rank"])
        # the scored run's local steps: its paired oracle's, not the model's
        r["local"]["iteration"] = [1.5 * t for t in r["local"]["iteration"]]
    return out


def _predict(monkeypatch, data_root, runs: dict) -> tuple[list, dict]:
    """held_out over the recorded runs (``runs``: world size -> recorded): each prediction as
    predict_one returned it (before any scoring), and the result."""
    from swinkit.predict.supervisor import held_out as predict_run
    from swinkit.predict.supervisor import held_out_parts
    from swinkit.runs import ddp_run

    def launch(entry, kwargs, lc, **_):
        return SimpleNamespace(result={"ranks": copy.deepcopy(runs[lc.world_size]["ranks"])},
                               wall_s=1.0)
    made = []

    def spied(*args, **kwargs):
        made.append(copy.deepcopy(held_out_parts.predict_one(*args, **kwargs)))
        return copy.deepcopy(made[-1])
    monkeypatch.setenv("SWINKIT_DATA_ROOT", str(data_root))
    monkeypatch.setattr(ddp_run, "launch", launch)
    monkeypatch.setattr(predict_run, "measure_target", lambda *a, **k: copy.deepcopy(TARGET))
    monkeypatch.setattr(predict_run, "predict_one", spied)
    out = predict_run.held_out("test", [1, 2], [1], iters=4, warmup=2, repeats=1,
                               progress=lambda s: None)
    return made, out


def test_the_scored_ddp_steps_do_not_reach_the_prediction(monkeypatch, data_root):
    """The prediction made with the scored run as recorded and with every figure of its DDP
    steps changed must be the same, number for number, while the measured iteration it is
    scored against moved (else the change would have tested nothing).

    Checked to fail on the planted leak of the issue that asked for this test: in
    ``swinkit.predict.supervisor.held_out._separate_row``, the scored run made before the
    prediction and
    ``target = dataclasses.replace(target, data_wait_s=run["iter_s"] - t1)`` before it is
    made (the predicted iteration then follows the stretched DDP steps)."""
    runs = {1: _recorded("paired1"), 2: _recorded("paired2")}
    before, out_before = _predict(monkeypatch, data_root, runs)
    runs[2] = _mutated(runs[2])
    after, out_after = _predict(monkeypatch, data_root, runs)
    measured = [out["launches"][0]["targets"][2]["measured_iter_s"]
                for out in (out_before, out_after)]
    assert measured[1] > 1.3 * measured[0], measured          # the scored steps did change
    assert len(before) == len(after) == 1
    assert after == before                                    # the prediction did not
    # nor what was stored and scored of it (a leak inside the scoring, e.g. the predicted
    # iteration pulled toward the measured one, leaves predict_one's answer alone)
    stored = [out["launches"][0]["targets"][2]["predicted_iter_s"]
              for out in (out_before, out_after)]
    assert stored[1] == stored[0] == before[0]["predicted_iter_s"]
    assert out_after["in_launch"] is False
