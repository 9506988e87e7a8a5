"""``swinkit scorecard``: a held-out prediction over K fresh launches. Its numbers worked by hand
from two launches, the text that prints them, the record written (atomically, with what it ran
on), and bad input refused before any process starts."""
from __future__ import annotations

import json

import pytest

from swinkit.predict.numbers.scores import score_against, score_unpaired, summarize
from swinkit.predict.numbers.scorecard import scorecard
from swinkit.cli import main


def _launch(n: int, t1: float, predicted: float, paired: float, unpaired: float) -> dict:
    """One launch predicting 2 from 1: T(1) ``t1``, the model ``predicted``, the all-reduce
    0.1 s, the paired oracle 1.0 s; measured ``paired`` (the paired run's DDP steps) and
    ``unpaired`` (the same run unpaired)."""
    pred = {"t1_s": t1, "predicted_iter_s": predicted, "perfect_scaling_s": t1,
            "plus_allreduce_s": t1 + 0.1, "no_network_s": t1}
    score_against(pred, paired, {"predicted_iter_s": 1.0, "components_s": {}})
    score_unpaired(pred, unpaired)
    return {"launch": n, "measured_from": {1: t1}, "t1_s": t1, "targets": {2: pred},
            "load_average": 0.5}


def _held_out() -> dict:
    """Launch 1: T(1) 0.9 s, predicted 1.05 s, paired run 1.0 s, unpaired 1.1 s; launch 2:
    T(1) 0.8 s, predicted 0.9 s, paired run 1.0 s, unpaired 1.05 s."""
    launches = [_launch(1, 0.9, 1.05, 1.0, 1.1), _launch(2, 0.8, 0.9, 1.0, 1.05)]
    return {"preset": "test", "from": [1], "targets": [2], "launches": launches,
            "summary": summarize(launches, [2]), "in_launch": False}


def test_scorecard_numbers_by_hand():
    """Against the paired runs (1.0 s both): the model 95 % and 90 % (worst 90, range 5
    points), perfect scaling 90 and 80 %, T(1) + all-reduce 100 and 90 %, the oracle 100 %
    twice. Against the unpaired runs (1.1, 1.05 s): the model 95.45 and 85.71 %, the oracle
    90.91 and 95.24 %. The barrier hid 0.1 and 0.05 s (10 and 5 %, 7.5 % on average). The
    host: T(1) 0.9 then 0.8 s, 88.9 %; the paired run 1.0 twice, 100 %; unpaired 95.45 %."""
    card = scorecard(_held_out())
    two = card["targets"]["2"]
    model = two["paired_run"]["model"]
    assert model["per_launch_pct"] == pytest.approx([95.0, 90.0])
    assert (model["worst_pct"], model["range_pts"]) == (pytest.approx(90.0), pytest.approx(5.0))
    assert two["paired_run"]["perfect"]["per_launch_pct"] == pytest.approx([90.0, 80.0])
    assert two["paired_run"]["plus_allreduce"]["per_launch_pct"] == pytest.approx([100.0, 90.0])
    assert two["paired_run"]["paired"]["per_launch_pct"] == pytest.approx([100.0, 100.0])
    assert two["unpaired_run"]["model"]["per_launch_pct"] == pytest.approx(
        [100 * (1 - 0.05 / 1.1), 100 * (1 - 0.15 / 1.05)])
    assert two["unpaired_run"]["paired"]["per_launch_pct"] == pytest.approx(
        [100 * (1 - 0.1 / 1.1), 100 * (1 - 0.05 / 1.05)])
    assert "no_network" not in two["paired_run"]  # a check of the model, not a baseline
    gap = two["barrier_gap"]
    assert gap["per_launch_s"] == pytest.approx([0.1, 0.05])
    assert gap["mean_share"] == pytest.approx(0.075)
    assert card["host"]["1"]["per_pair_pct"] == pytest.approx([100 * (1 - 0.1 / 0.8)])
    assert card["host"]["2"]["per_pair_pct"] == pytest.approx([100.0])
    assert card["host"]["2 unpaired"]["per_pair_pct"] == pytest.approx([100 * (1 - 0.05 / 1.05)])


def test_an_in_launch_result_makes_no_scorecard():
    with pytest.raises(ValueError, match="not held out"):
        scorecard({**_held_out(), "in_launch": True})
    with pytest.raises(ValueError, match="not held out"):  # a result stored under the old key
        scorecard({**{k: v for k, v in _held_out().items() if k != "in_launch"},
                   "same_launch": True})


def _fake_held_out(preset, world_sizes, sources, iters, repeats, score, injection, unpaired,
                   progress):
    assert (world_sizes, sources, repeats, score, unpaired) == ([1, 2], [1], 2, True, True)
    held = _held_out()
    held["launches"][0]["basis"] = {"probe": {"backend": "gloo"}}
    return held


def test_the_command_prints_and_writes_the_scorecard(monkeypatch, tmp_path, capsys):
    from swinkit.predict.supervisor import scorecard as exp
    monkeypatch.setattr(exp, "held_out", _fake_held_out)
    path = tmp_path / "card.json"
    assert main(["scorecard", "--preset", "test", "--launches", "2", "--iters", "4",
                 "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "HELD OUT" in out and "2 fresh launches" in out
    assert "swinkit (predicted)                    95.0, 90.0 %  worst 90.0 %, range 5.0 points" in out
    assert "perfect scaling T(1)                   90.0, 80.0 %  worst 80.0 %" in out
    assert "against the same configuration run unpaired" in out
    assert "+100.0 ms, +50.0 ms (+7.5% on average)" in out
    assert "limit: on CPU the ranks share the host's cores" in out
    record = json.loads(path.read_text())
    assert record["kind"] == "swinkit-scorecard" and record["commit"] and record["started"]
    assert record["scorecard"]["targets"]["2"]["paired_run"]["model"]["worst_pct"] == \
        pytest.approx(90.0)
    assert record["held_out"]["launches"][0]["targets"]["2"]["unpaired_iter_s"] == 1.1
    assert list(tmp_path.iterdir()) == [path]  # written whole: no temporary left beside it


@pytest.mark.parametrize("args, message", [
    (["--launches", "1"], "launches must be an integer >= 2"),
    (["--world-sizes", "1,x"], "--world-sizes must be integers"),
    (["--inject", "data_ms=5,ranks=1", "--inject", "data_ms=6,ranks=1"], "data_ms is given twice"),
    (["--preset", "huge"], "huge"),
    (["--world-sizes", "1"], "--world-sizes: none above the largest --predict-from size (1)"),
])
def test_bad_input_exits_2_before_any_process(monkeypatch, tmp_path, capsys, args, message):
    from swinkit.runs import ddp_run
    monkeypatch.setattr(ddp_run, "launch", lambda *a, **k: pytest.fail("a process started"))
    monkeypatch.chdir(tmp_path)
    assert main(["scorecard", *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "results").exists()   # no lock, no folder left behind
