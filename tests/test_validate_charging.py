"""``swinkit validate`` can catch a blame bug: its scoring run on blame's real output, for
synthetic 2-rank timelines built as a rank records them (``tests/blame_timelines.py``: the test
preset's iteration, known delays), with each of three plausible defects planted in how blame
charges a wait. The current blame passes every cell; each defect makes the command exit 1.

The defects, each a rule a reader could write for "charge the wait to the late rank":

* counted twice: the wait stays where the waiting rank sat and is charged to the cause as well
  (here: charged to the cause twice; the same signature, blame adding up to more than the
  iteration);
* the whole wait to the late rank's longest phase since the previous collective;
* the wait split over the late rank's own phases in proportion to its time in each (not to
  how much longer than the waiting rank it spent in each).
"""
from __future__ import annotations

import json

import pytest
from blame_timelines import run_result, simulate

from swinkit.attribution import blame
from swinkit.attribution import validation as v
from swinkit.attribution.blame_of_run import blame_figures
from swinkit.cli import main
from swinkit.injection import Injection, combine

REAL = blame.charge_wait


def counted_twice(wait, late, waiting, resolution_s=blame.RESOLUTION_S):
    charged, unattributed = REAL(wait, late, waiting, resolution_s)
    return {p: 2 * s for p, s in charged.items()}, unattributed


def longest_phase(wait, late, waiting, resolution_s=blame.RESOLUTION_S):
    return {max(late, key=late.get): wait}, 0.0


def own_phases(wait, late, waiting, resolution_s=blame.RESOLUTION_S):
    total = sum(s for s in late.values() if s > 0)
    return {p: wait * s / total for p, s in late.items() if s > 0}, 0.0


# each defect and the cells it fails at world size 2 (the others pass, as with no defect)
DEFECTS = {
    "counted twice": (counted_twice, "all"),
    "longest phase": (longest_phase, {("small_backward", "one")}),
    "own phases": (own_phases, {("comm_ms", "one"), ("small_backward", "one"),
                                ("two_stragglers", "pair")}),
}


def _validate(monkeypatch, tmp_path, charge=None, runs=None) -> tuple[int, dict]:
    """``swinkit validate --world-sizes 2`` with every run made by the synthetic timelines and
    read by blame's real code (``charge``: a planted charging rule; ``runs`` collects the
    injections run)."""
    from swinkit.experiments import validate as exp

    def run(spec, progress=None):
        (runs if runs is not None else []).append(spec.injection.describe())
        return run_result(spec)
    monkeypatch.setattr(exp, "run_ddp", run)
    if charge is not None:
        monkeypatch.setattr(blame, "charge_wait", charge)
    path = tmp_path / "v.json"
    code = main(["validate", "--world-sizes", "2", "--json", str(path)])
    return code, json.loads(path.read_text())


def _failed(record: dict) -> set:
    return {(c["case"], c["placement"]) for c in record["cells"] if c.get("passed") is False}


def test_the_current_blame_passes_every_cell(monkeypatch, tmp_path, capsys):
    runs = []
    code, record = _validate(monkeypatch, tmp_path, runs=runs)
    assert code == 0, [c["failures"] for c in record["cells"] if not c.get("passed")]
    assert v.tally(record["cells"]) == {"passed": 12, "failed": 0, "skipped": 0,
                                        "inconclusive": 0, "run": 12}
    # 14 runs for 12 cells: the two stragglers' three (both at once, each delay alone) at 4 x
    # the iterations, so their backward alone repeats the one-rank cell's injection
    assert len(runs) == 14 and len(set(runs)) == 13
    assert runs.count("backward_ms=120,ranks=1,every=2") == 2
    assert "data_ms=7.5,ranks=0,every=2" in runs   # the pair's loading: 15 ms over 2 images
    out = capsys.readouterr().out
    assert "two_stragglers" in out and "small_backward" in out


@pytest.mark.parametrize("name", DEFECTS)
def test_each_planted_charging_defect_fails_the_matrix(monkeypatch, tmp_path, name):
    charge, cells = DEFECTS[name]
    code, record = _validate(monkeypatch, tmp_path, charge)
    assert code == 1
    every = {(c["case"], c["placement"]) for c in record["cells"]}
    assert _failed(record) == (every if cells == "all" else cells)


def test_a_small_delay_under_the_hosts_noise_makes_the_matrix_inconclusive(monkeypatch, tmp_path,
                                                                         capsys):
    """On a noisy host the small delay falls under its detection threshold. That cell is the
    one that catches charging the whole wait to the late rank's longest phase, so the matrix
    without it must not pass: validate says INCONCLUSIVE, writes its JSON and exits 1, and
    with the longest-phase rule planted it still does not exit 0. (It used to crash on the
    skipped cell, and without the cell the planted rule passed.)"""
    import blame_timelines
    real, calm = blame_timelines.simulate, blame_timelines._work

    def jittery(own, it, rng):
        """A phase jitter of +-90 % instead of +-3 %: a host very busy with other work."""
        out = calm(own, it, rng)
        return {k: v * (1 + rng.uniform(-0.9, 0.9)) if k in blame_timelines.BASE else v
                for k, v in out.items()}

    def noisy(world_size, injection, iters=10, warmup=2, seed=7):
        small = 0 < injection.backward_ms < 10          # the small delay's run only
        blame_timelines._work = jittery if small else calm
        try:
            return real(world_size, injection, iters, warmup, seed)
        finally:
            blame_timelines._work = calm
    monkeypatch.setattr(blame_timelines, "simulate", noisy)
    for charge in (None, longest_phase):
        code, record = _validate(monkeypatch, tmp_path, charge)
        small = next(c for c in record["cells"] if c["case"] == "small_backward")
        assert small.get("inconclusive") and "detection threshold" in small["skipped"]
        assert code == 1
        assert "INCONCLUSIVE" in capsys.readouterr().out


def test_waits_counted_twice_show_as_blame_that_misses_its_iteration(monkeypatch):
    """Rank 1 loads 120 ms slower; rank 0 waits about 120 ms for it each injected iteration.
    Counted twice, rank 0's blame holds 240 ms more than its iteration grew: its row's
    residual is -100 %, the ranks' median (their mean, two ranks) -50 %, and a rank's blame
    misses its iteration by the wait, which blame as written never does (it moves seconds)."""
    spec = Injection(data_ms=60, ranks=(1,), every=2)
    ranks = simulate(2, spec)
    right = blame_figures(ranks, 2, spec)
    assert right["blame_addup_s"] < 1e-9
    monkeypatch.setattr(blame, "charge_wait", counted_twice)
    wrong = blame_figures(ranks, 2, spec)
    assert wrong["blame_addup_s"] == pytest.approx(0.120, rel=0.05)
    cell = v.score_cell({**wrong, "world_size": 2}, "data_ms", "one", 0.120)
    assert cell["row"]["residual"] == pytest.approx(-0.5, abs=0.03)
    assert cell["rank_recovery"]["0"] == pytest.approx(2.0, abs=0.05)


def test_the_waiting_ranks_row_is_read_and_holds_the_charged_wait():
    """A forward 120 ms slower on rank 1: rank 0's own phases do not change, it waits at the
    gradient sync, and blame charges that wait to rank 1's forward: rank 0's row grows by
    about 120 ms on forward as rank 1's does (recovery about 1 on both ranks)."""
    spec = Injection(compute_ms=120, ranks=(1,), every=2)
    cell = v.score_cell(run_result(_spec(spec)), "compute_ms", "one", 0.120)
    assert set(cell["rank_recovery"]) == {"0", "1"}
    assert all(r == pytest.approx(1.0, abs=0.05) for r in cell["rank_recovery"].values())
    assert cell["passed"], cell["failures"]


def test_two_stragglers_held_to_each_delay_alone_and_their_sum_shown():
    """Rank 0 loads 120 ms slower and rank 1's backward takes 120 ms more, in the same
    iterations: rank 1 waits for rank 0 at the buffer broadcast, rank 0 for rank 1 at the
    gradient sync, so the iteration grows by about the sum of what each adds alone (240 ms),
    not their maximum, and each rank's row holds both causes at what each added alone."""
    from swinkit.attribution.validation_cells import score_pair
    data = Injection(data_ms=60, ranks=(0,), every=2)
    late = Injection(backward_ms=120, ranks=(1,), every=2)
    cell = score_pair(run_result(_spec(combine([data, late]))),
                      {"data_ms": run_result(_spec(data)), "backward_ms": run_result(_spec(late))})
    assert cell["passed"], cell["failures"]
    assert cell["sum_alone_s"] == pytest.approx(0.240, rel=0.05)
    assert cell["added_s"] == pytest.approx(cell["sum_alone_s"], rel=0.05)
    assert cell["late"] == {"0": "data_wait", "1": "backward"}


def test_two_stragglers_tolerance_takes_the_noise_of_both_runs():
    """Each rank's loading in the pair's run against the loading delay alone compares two
    runs' medians: rank 0's read 30 % low fails at the runs' own noise (3 ms, tolerance 20 %)
    and passes where each run's threshold is 30 ms (combined sqrt(2) x 30 = 42 ms of the
    120 ms alone: tolerance 0.35)."""
    from swinkit.attribution.validation_cells import score_pair
    data = Injection(data_ms=60, ranks=(0,), every=2)
    late = Injection(backward_ms=120, ranks=(1,), every=2)

    def scored(noise_s):
        both = run_result(_spec(combine([data, late])))
        alone = {"data_ms": run_result(_spec(data)), "backward_ms": run_result(_spec(late))}
        both["injection_effect"]["per_rank"]["0"]["growth_s"]["data_wait"] *= 0.7
        for result in (both, alone["data_ms"]):
            result["injection_effect"]["noise_s"]["data_wait"] = noise_s
        return score_pair(both, alone)
    quiet = scored(0.003)
    assert quiet["passed"] is False and quiet["tolerance"]["data_wait"] == pytest.approx(0.2)
    assert "data_wait on rank 0 0.7" in quiet["failures"][0]
    noisy = scored(0.030)
    assert noisy["tolerance"]["data_wait"] == pytest.approx(2 ** 0.5 * 0.030 / 0.120, rel=0.05)
    assert noisy["passed"], noisy["failures"]


def test_a_delay_below_the_detection_threshold_gets_no_verdict_and_says_so():
    """On a host whose noise hides a 5 ms delay, the cell can say nothing of blame: counted
    apart (neither passed nor failed), its threshold named; above it, it is judged."""
    from swinkit.attribution.validation_cells import score_small
    result = run_result(_spec(Injection(backward_ms=5, ranks=(1,), every=2), iters=30))
    assert score_small(result, 0.005)["passed"]
    result["injection_effect"]["noise_s"]["backward"] = 0.008  # as a busy host would read
    cell = score_small(result, 0.005)
    assert "passed" not in cell and v.tally([cell])["skipped"] == 1
    assert "below twice this run's detection threshold (8.0 ms)" in cell["skipped"]
    assert cell["threshold_s"] == 0.008 and "row" in cell  # its figures kept
    # between once and twice the threshold a tolerance of the threshold would take nearly
    # any growth from nothing to twice the delay: not judged either
    result["injection_effect"]["noise_s"]["backward"] = 0.003
    assert score_small(result, 0.005).get("inconclusive")
    result["injection_effect"]["noise_s"]["backward"] = 0.002
    assert "passed" in score_small(result, 0.005)


def test_a_small_delay_absorbed_by_shared_cores_is_held_to_what_it_added(monkeypatch):
    """On CPU ranks sharing cores a 5 ms delay adds about 3 ms to the late rank's backward
    (the other rank's compute runs faster while it waits; measured 0.59-0.67 on an idle 2-core
    host). Here the late rank's backward grows 3 ms while its delay measured 5 ms: the waiting
    rank is held to the 3 ms its own iteration grew, and passes; held to the 5 ms asked, it
    would fail (3 is not within 1 of 5). The longest-phase rule planted on the same run still
    fails: the truth moves, the teeth stay."""
    from swinkit.attribution.validation_cells import score_small

    def absorbed():
        result = run_result(_spec(Injection(backward_ms=3, ranks=(1,), every=2), iters=30))
        result["injected_measured_s"] = {"backward": 0.005}   # what the delay's timer read
        return result
    cell = score_small(absorbed(), 0.005)
    assert cell["passed"], cell["failures"]
    assert cell["truth_s"] == pytest.approx(0.003, abs=0.0005)
    assert cell["amount_s"] == 0.005 and cell["recovery"] == pytest.approx(0.6, abs=0.1)
    assert cell["rank_recovery"]["0"] == pytest.approx(1.0, abs=0.15)
    monkeypatch.setattr(blame, "charge_wait", longest_phase)
    wrong = score_small(absorbed(), 0.005)
    assert wrong["passed"] is False and "grew 0.1 ms on rank 0, whose iteration grew" in \
        wrong["failures"][0]
    # a late rank whose backward shows under 40 % of its measured delay (1.5 ms of 5, read
    # as 1.7 with the timelines' jitter): a timer defect, not a shared core
    monkeypatch.setattr(blame, "charge_wait", REAL)
    lost = run_result(_spec(Injection(backward_ms=1.5, ranks=(1,), every=2), iters=30))
    lost["injected_measured_s"] = {"backward": 0.005}
    cell = score_small(lost, 0.005)
    assert cell["passed"] is False and "rank 1's backward of the 5.0 asked" in cell["failures"][0]
    assert cell["truth_s"] < 0.4 * 0.005


def test_the_matrix_text_says_what_the_new_cells_found(monkeypatch, tmp_path, capsys):
    _validate(monkeypatch, tmp_path)
    out = capsys.readouterr().out
    assert "N=2 two stragglers: the iteration grew" in out and "nearer their sum" in out
    assert "N=2 small delay: detection threshold" in out


@pytest.mark.parametrize("args, field", [(["--max-share", "0.9"], "--max-share"),
                                         (["--max-residual", "0"], "--max-residual"),
                                         (["--small-ms", "0"], "--small-ms"),
                                         (["--cases", "three_stragglers"], "--cases")])
def test_bad_thresholds_exit_2_naming_the_option(monkeypatch, capsys, args, field):
    from swinkit.experiments import validate as exp
    monkeypatch.setattr(exp, "run_ddp", lambda *a, **k: pytest.fail("a process started"))
    assert main(["validate", *args]) == 2
    assert f"swinkit validate: error: {field}" in capsys.readouterr().err


def _spec(injection: Injection, iters: int = 10):
    from swinkit.runs.ddp_run import DDPRunSpec
    return DDPRunSpec(preset="test", nproc_per_node=2, iters=iters, warmup=2, injection=injection)
