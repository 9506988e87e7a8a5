"""``swinkit converge``: the spec's refusals (before any process starts), the numbers of a
grid (steps, spread, misses, efficiency in steps and in time, goodput), the report, and a
small run end to end on the session's synthetic set."""
import json
import math

import pytest

from swinkit.attribution import convergence
from swinkit.cli import main
from swinkit.experiments.converge_spec import ConvergeSpec, lr_factor
from swinkit.report.converge import text


@pytest.fixture
def nothing_starts(monkeypatch):
    """Fails a test if anything is launched or the data is touched."""
    def refuse(*args, **kwargs):
        raise AssertionError("a process was started")
    import swinkit.experiments.converge as converge
    monkeypatch.setattr(converge, "launch", refuse)
    monkeypatch.setattr(converge, "run_ddp", refuse)
    monkeypatch.setattr(converge, "ensure_data", refuse)


@pytest.mark.parametrize("argv, option", [
    (["--target-loss", "abc"], "--target-loss must be a number"),
    (["--target-loss", "nan"], "--target-loss must be a number"),
    (["--target-miou", "x"], "--target-miou must be a number"),
    (["--lr-rule", "linear,cubic"], "--lr-rule must be among none, linear, sqrt"),
    (["--seeds", "0"], "--seeds must be an integer >= 1, got 0"),
    (["--seeds", "two"], "--seeds must be an integer >= 1"),
    (["--batches", "1"], "--batches must be an integer >= 2"),
    (["--world-sizes", "1,x"], "--world-sizes must be integers"),
    (["--eval-every", "50", "--max-steps", "10"], "--eval-every (50) must not exceed max_steps"),
])
def test_bad_input_is_refused_before_any_process_starts(argv, option, nothing_starts, capsys):
    assert main(["converge", "--preset", "test", *argv]) == 2
    err = capsys.readouterr().err
    assert option in err, err


def test_a_preset_without_a_default_target_asks_for_one(nothing_starts, capsys):
    assert main(["converge", "--preset", "cpu"]) == 2
    assert "--target-loss: preset cpu has no default target" in capsys.readouterr().err
    spec = ConvergeSpec(preset="cpu", target_miou=30, max_steps=100).validate()
    assert (spec.target_loss, spec.target_miou) == (None, 30.0)


def test_lr_rules_scale_the_base_rate_to_the_global_batch():
    """The test preset: lr0 1e-3 for global batch 2 (2 images at world size 1). At world size
    2 with 4 per rank (global 8): linear x4, sqrt x2, none x1."""
    assert lr_factor("linear", 8, 2) == 4.0 and lr_factor("sqrt", 8, 2) == 2.0
    plan = ConvergeSpec(world_sizes=(1, 2), batches=(4,), lr_rules=("none", "linear", "sqrt"),
                        seeds=2).plan()
    at2 = {(r["lr_rule"], r["seed"]): r["lr"] for r in plan[2]}
    assert at2[("none", 0)] == pytest.approx(1e-3)
    assert at2[("linear", 1)] == pytest.approx(4e-3)
    assert at2[("sqrt", 0)] == pytest.approx(2e-3)
    assert len(plan[1]) == len(plan[2]) == 1 * 3 * 2  # batches x rules x seeds


def _run(ws, batch, rule, seed, steps, budget=100, train_images=64):
    return {"world_size": ws, "batch": batch, "lr_rule": rule, "lr": 1e-3, "seed": seed,
            "steps": steps, "steps_run": steps or budget, "train_images": train_images,
            "outcome": "reached" if steps else "budget", "in_run_step_s": 0.1}


def test_cells_report_misses_as_misses_never_as_numbers():
    """Seeds reaching at 40 and 60 and one missing a budget of 100: the median is 60, the
    spread [40, >100]. Two of three missing: the cell missed, with no steps, images or time."""
    runs = [_run(1, 2, "none", 0, 40), _run(1, 2, "none", 1, None), _run(1, 2, "none", 2, 60),
            _run(2, 2, "none", 0, None), _run(2, 2, "none", 1, 30), _run(2, 2, "none", 2, None)]
    rows = {c["world_size"]: c for c in convergence.cells(runs, {(1, 2): 0.5, (2, 2): 0.8})}
    one, two = rows[1], rows[2]
    assert (one["steps"], one["steps_min"], one["steps_max"], one["reached"]) == (60, 40, None, 2)
    assert one["images"] == 120 and one["epochs"] == pytest.approx(120 / 64)
    assert one["time_to_target_s"] == pytest.approx(30.0)
    assert two["missed"] and two["steps"] is None and two["images"] is None
    assert two["time_to_target_s"] is None and two["reached"] == 1
    result = _result(runs, {(1, 2): 0.5, (2, 2): 0.8})
    report = text(result)
    assert "60 [40->100]" in report and "missed (>100)" in report


def _result(runs, step_times, base_batch=2):
    return {"preset": "test", "target": {"loss": 3.0, "miou_pct": None}, "eval_every": 10,
            "max_steps": 100, "seeds": 3, "optimizer": "AdamW", "base_lr": 1e-3,
            "base_batch": base_batch, "warmup": 2, "data_root": "/x", "data_note": "stand-in",
            "failed": {}, **convergence.summarize(runs, step_times, base_batch)}


def test_efficiency_in_steps_beside_efficiency_in_time_by_hand():
    """World size 1: 100 steps of 0.5 s; world size 2: 60 steps of 0.625 s (same batch per
    rank and rule). E_time = 0.5 / 0.625 = 0.8; E_steps = 100 / (2 x 60) = 0.8333;
    to the target 0.8 x 0.8333 = 0.6667 (= 50 s / (2 x 37.5 s)); speedup 1.3333."""
    runs = [_run(1, 2, "linear", 0, 100), _run(2, 2, "linear", 0, 60)]
    (s1, s2) = convergence.summarize(runs, {(1, 2): 0.5, (2, 2): 0.625}, 2)["scaling"]
    assert s1["efficiency_time"] == 1.0 and s1["efficiency_steps"] == 1.0
    assert s2["efficiency_time"] == pytest.approx(0.8)
    assert s2["efficiency_steps"] == pytest.approx(100 / 120)
    assert s2["efficiency_target"] == pytest.approx(50 / 75)
    assert s2["speedup_target"] == pytest.approx(4 / 3)


def test_goodput_uses_the_noise_scale_measured_at_two_batch_sizes():
    """One run at world size 2, batch 2 (B_small 2, B_big 4) with |g_small|^2 5 and
    |g_big|^2 3: B_simple = 8 (as in test_noise_scale's hand-worked example). m0 = 2.
    World size 1 (global 2): 2 / 0.5 s = 4 images/s, EFF 1, goodput 4. World size 2
    (global 4): 4 / 0.625 s = 6.4 images/s, EFF = 10 / 12, goodput 5.3333: the best.
    Measured EFF at 2 (rule none): 2 x 100 / (4 x 60) = 0.8333."""
    runs = [_run(1, 2, "none", 0, 100), dict(_run(2, 2, "none", 0, 60), noise={
        "steps": 60, "b_small": 2, "b_big": 4, "small_sq": 5.0, "big_sq": 3.0})]
    g = convergence.summarize(runs, {(1, 2): 0.5, (2, 2): 0.625}, 2)["goodput"]
    assert g["noise_scale"] == pytest.approx(8.0)
    one, two = g["rows"]
    assert (one["images_per_s"], one["efficiency"], one["goodput"]) == (4.0, 1.0, 4.0)
    assert two["images_per_s"] == pytest.approx(6.4)
    assert two["efficiency"] == pytest.approx(10 / 12)
    assert two["goodput"] == pytest.approx(6.4 * 10 / 12)
    assert two["measured_efficiency"]["none"] == pytest.approx(200 / 240)
    assert g["best"]["world_size"] == 2
    assert "highest goodput: world size 2" in text(_result(runs, {(1, 2): 0.5, (2, 2): 0.625}))


def test_no_noise_scale_without_a_second_batch_size():
    runs = [_run(1, 2, "none", 0, 100)]
    g = convergence.summarize(runs, {(1, 2): 0.5}, 2)["goodput"]
    assert g["noise_scale"] is None and g["best"] is None
    assert "needs a run at world size >= 2" in text(_result(runs, {(1, 2): 0.5}))


@pytest.mark.slow
def test_a_small_grid_end_to_end(data_root, tmp_path, no_orphans, capsys):
    """World sizes 1 and 2, one seed, a 6-step budget: a held-out loss target of 100 is met at
    the first check (step 3); an mIoU target of 100 % (the option a real ADE20K root is run
    with, here on the synthetic set in ADE20K's layout; world size 2 alone, the rank-side
    evaluation being the same at every world size) is missed and says so. The JSON holds
    both; the noise scale's norms come from world size 2."""
    out = tmp_path / "c.json"
    common = ["converge", "--preset", "test", "--data-root", str(data_root), "--seeds", "1",
              "--max-steps", "6", "--eval-every", "3", "--step-iters", "3", "--lr-rule", "none"]
    assert main([*common, "--world-sizes", "1,2", "--target-loss", "100",
                 "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [r["steps"] for r in result["runs"]] == [3, 3]
    assert result["runs"][1]["noise"]["b_big"] == 4 and result["runs"][1]["noise"]["steps"] == 3
    assert result["runs"][0]["held_out_images"] == 2 and not result["failed"]
    assert all(math.isfinite(c["held_out_loss"]) for r in result["runs"] for c in r["curve"])
    assert main([*common, "--world-sizes", "2", "--target-miou", "100",
                 "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["target"] == {"loss": None, "miou_pct": 100.0}
    assert [r["outcome"] for r in result["runs"]] == ["budget"]
    assert [c["step"] for c in result["runs"][0]["curve"]] == [3, 6]
    assert all(0 <= c["miou_pct"] < 100 for r in result["runs"] for c in r["curve"])
    assert all(c["missed"] and c["steps"] is None for c in result["cells"])
    assert "missed (>6)" in capsys.readouterr().out


def test_the_asv_grid_skips_what_it_does_not_run_and_reads_misses_as_nan(monkeypatch):
    """bench_converge's setup_cache on a fake grid: world sizes 4 and 8 skipped for the cores
    (2 here, set below), batch 4 and the rule none skipped with the variable that brings them
    back, a failed launch failed with its reason, a missed cell NaN (never a number). (As
    SWINKIT_CONVERGE=1 runs it; the default run trains nothing, saying how to have it.)"""
    from benchmarks import bench_converge as bench
    from swinkit.runs import sweep as sweeps
    monkeypatch.setattr(bench, "bench_cells", lambda *a, **k: pytest.fail("trained"))
    monkeypatch.setattr(bench, "ASKED", False)
    with pytest.raises(NotImplementedError, match="SWINKIT_CONVERGE=1"):
        bench.Convergence().setup(bench.Convergence().setup_cache(), 1, 2, "linear")
    monkeypatch.setattr(bench, "ASKED", True)
    monkeypatch.setattr(sweeps.os, "cpu_count", lambda: 2)
    monkeypatch.delenv("SWINKIT_OVERSUBSCRIBE", raising=False)
    cell = {"steps": 120, "time_to_target_s": 12.0, "reached": 3}
    missed = {"steps": None, "time_to_target_s": None, "reached": 1}
    grid = {"world_sizes": {1: {"cells": {"2/linear": cell}, "scaling": {}, "goodput": {}},
                            2: {"cells": {"2/linear": missed}, "scaling": {"2/linear": {
                                "efficiency_steps": None, "efficiency_time": 0.9}},
                                "goodput": {2: {"goodput": 5.0, "efficiency": 0.8}}}},
            "failed": {}, "noise_scale": 16.0}
    monkeypatch.setattr(bench, "bench_cells", lambda *a, **k: grid)
    sweep = bench.Convergence().setup_cache()
    c, e, g = bench.Convergence(), bench.Efficiency(), bench.Goodput()
    with pytest.raises(NotImplementedError, match="needs 4 CPU cores"):
        c.setup(sweep, 4, 2, "linear")
    with pytest.raises(NotImplementedError, match="SWINKIT_CONVERGE=all"):
        c.setup(sweep, 1, 4, "linear")
    c.setup(sweep, 2, 2, "linear")
    assert c.track_steps_to_target(sweep, 1, 2, "linear") == 120
    assert math.isnan(c.track_steps_to_target(sweep, 2, 2, "linear"))
    assert math.isnan(c.track_time_to_target(sweep, 2, 2, "linear"))
    assert math.isnan(e.track_steps(sweep, 2, 2, "linear"))
    assert e.track_time(sweep, 2, 2, "linear") == 0.9
    assert g.track_goodput(sweep, 2, 2, "linear") == 5.0
    assert g.track_noise_scale(sweep, 2, 2, "linear") == 16.0
    grid["failed"] = {2: "rank 1 was killed by SIGKILL"}
    with pytest.raises(RuntimeError, match="SIGKILL"):
        c.setup(bench.Convergence().setup_cache(), 2, 2, "linear")


def test_the_attribution_report_shows_efficiency_in_steps_beside_time():
    """Rows as tools/attribute.py reads them from asv (bench_converge.Efficiency): a missed
    cell's efficiency in steps is '-', its efficiency in time still shown."""
    from swinkit.attribution.convergence import efficiency_from_asv
    from swinkit.report.converge import efficiency_lines
    rows = efficiency_from_asv(
        {("1", "2", "linear"): {"value": 1.0}, ("2", "2", "linear"): {"value": 0.94}},
        {("1", "2", "linear"): {"value": 1.0}, ("2", "2", "linear"): {"value": 0.36},
         ("2", "4", "none"): {"value": 0.43}},
        {("2", "2", "linear"): {"value": 0.34}})
    assert [(r["world_size"], r["batch"], r["lr_rule"]) for r in rows] == [
        (1, 2, "linear"), (2, 2, "linear"), (2, 4, "none")]
    lines = efficiency_lines(rows)
    assert "efficiency in steps to a held-out target beside efficiency in time" in lines[1]
    assert lines[-2].split() == ["linear", "2", "2", "0.36", "0.94", "0.34"]
    assert lines[-1].split() == ["none", "4", "2", "0.43", "-", "-"]
    assert efficiency_lines(None) == []


def test_runs_that_are_one_computation_are_trained_once(monkeypatch):
    """At world size 1 with the base batch every rule gives lr0: linear and none are the same
    run, launched once and reported under both names; at world size 2 they differ."""
    import swinkit.experiments.converge as converge
    launched = []

    class Result:
        def __init__(self, runs):
            self.result = {"ranks": [{"runs": [dict(r, steps=10) for r in runs]}]}

    def fake_launch(entry, kwargs, config, quiet=False):
        launched.append([(r["lr_rule"], r["seed"]) for r in kwargs["runs"]])
        return Result(kwargs["runs"])
    monkeypatch.setattr(converge, "launch", fake_launch)
    spec = ConvergeSpec(world_sizes=(1, 2), batches=(2,), lr_rules=("linear", "none"),
                        seeds=2).validate()
    plan = spec.plan()
    one = converge.train_to_target(spec, spec.base_config(), 1, plan[1], progress=print)
    two = converge.train_to_target(spec, spec.base_config(), 2, plan[2], progress=print)
    assert launched == [[("linear", 0), ("linear", 1)],
                        [("linear", 0), ("linear", 1), ("none", 0), ("none", 1)]]
    assert [(r["lr_rule"], r["same_run_as"]) for r in one] == [
        ("linear", None), ("linear", None), ("none", "linear"), ("none", "linear")]
    assert all(r["same_run_as"] is None for r in two)


def test_an_older_commit_without_convergence_is_skipped_not_failed(monkeypatch):
    """asv's history mode runs this file against commits whose swinkit has no converge."""
    from benchmarks import bench_converge as bench
    monkeypatch.setattr(bench, "_has_convergence", lambda: False)
    monkeypatch.setattr(bench, "ASKED", True)   # SWINKIT_CONVERGE=1
    sweep = bench.Convergence().setup_cache()
    with pytest.raises(NotImplementedError, match="has no convergence run"):
        bench.Convergence().setup(sweep, 1, 2, "linear")
