"""Where a held-out prediction missed, input by input: hand-worked replays (no launch, no
torch)."""
import pytest

from swinkit.predict.numbers.extrapolate import Host, Target
from swinkit.predict.numbers.miss_split import TERMS, mean_terms, split_miss

BIG_HOST = Host(cores=64)  # no core sharing: the terms below are the swaps' alone
PHASES = {"data_wait": 0.0, "forward": 0.4, "backward": 0.5, "exposed_comm": 0.0,
          "optimizer": 0.1, "other": 0.0}


def _rank(rank: int, phases: dict, ready, samples=None) -> dict:
    pos = {"phases_s": dict(phases), "bucket_ready_s": list(ready)}
    if samples is not None:
        pos["samples"] = samples
    return {"rank": rank, "positions": [pos]}


def _basis(scale: float = 1.0) -> dict:
    """A run at one rank: forward 0.4, backward 0.5 (buckets ready 0.25 and 0.5 into it),
    optimizer 0.1 s, every iteration alike (no spread), each times ``scale``."""
    phases = {k: v * scale for k, v in PHASES.items()}
    ready = [0.25 * scale, 0.5 * scale]
    sample = {"phases_s": phases, "bucket_ready_s": ready}
    return {"world_size": 1, "grad_accum": 1, "contention": {}, "buffer_sync": False,
            "ranks": [_rank(0, phases, ready, [sample] * 6)],
            "bucket_comm_s": [0.0, 0.0], "broadcast_s": 0.0}


def _paired() -> dict:
    """The run at 2 as its components showed it: forward 0.5 (medians), a data wait of 0.05,
    buckets of 0.2 and 0.3 s, backward at half speed while an all-reduce runs, and the ranks'
    forwards taking turns at 0.6 s (rank 0 in even iterations, rank 1 in odd ones)."""
    medians = {**PHASES, "data_wait": 0.05, "forward": 0.5}

    def samples(rank):
        return [{"phases_s": {**medians, "forward": 0.6 if (i + rank) % 2 == 0 else 0.5},
                 "bucket_ready_s": [0.25, 0.5]} for i in range(6)]
    return {"world_size": 2, "grad_accum": 1, "buffer_sync": False,
            "contention": {"compute_rate": 0.5, "comm_rate": 1.0},
            "ranks": [_rank(r, medians, [0.25, 0.5], samples(r)) for r in (0, 1)],
            "bucket_comm_s": [0.2, 0.3], "broadcast_s": 0.0}


def test_each_input_swapped_in_moves_the_prediction_by_its_hand_worked_share():
    """Predicted 1.1 s (buckets of 0.2 and 0.1 timed at 2: bucket 1 ends at 1.0, the optimizer
    at 1.1); measured 1.7 s. Swapping in the run's own inputs one by one:
    compute, forward 0.5: backward 0.5-1.0, bucket 0 0.75-0.95, bucket 1 1.0-1.1, end 1.2 (+0.1);
    loading, a data wait of 0.05: everything 0.05 later, 1.25 (+0.05);
    communication, 0.2 and 0.3 s: bucket 1 from 1.05 to 1.35, end 1.45 (+0.2);
    contention, backward at half speed beside bucket 0 (0.8-1.0): 0.1 of its work done there,
    the other 0.15 to 1.15, bucket 1 to 1.45, end 1.55 (+0.1);
    the ranks' turns at 0.6: the slow rank has bucket 0 at 0.9, both compute at half speed to
    1.1, the slow one finishes at 1.25, bucket 1 to 1.55, end 1.65 every step (+0.1);
    the DDP steps took 1.7: 0.05 beyond the replay."""
    got = split_miss(_basis(), Target(2, [0.2, 0.1]), BIG_HOST, _paired(), measured_s=1.7)
    assert got["predicted_s"] == pytest.approx(1.1)
    assert got["paired_s"] == pytest.approx(1.65)
    want = {"compute": 0.1, "loading": 0.05, "communication": 0.2, "contention": 0.1,
            "rank_wait": 0.1, "beyond_replay": 0.05}
    assert got["terms_s"] == pytest.approx(want)
    assert list(got["terms_s"]) == list(TERMS)


def test_a_stand_in_that_read_the_slowdown_right_leaves_no_compute_term():
    """The run at 2 computed 1.25 times as long as the run at 1 (forward 0.5, backward 0.625,
    buckets ready 0.3125 and 0.625 into it). Predicted with the stand-in's x1.25 the compute
    term is nil; predicted without a stand-in (x1) it is the whole slowdown as the replay
    places it: backward 0.5-1.125, bucket 0 from 0.8125 to 1.0125, bucket 1 from 1.125 to
    1.225, the optimizer's 0.125 to 1.35, against 1.1: +0.25 (not 1.1 x 0.25 = 0.275: bucket
    0's all-reduce hides behind the longer backward either way)."""
    paired = {**_basis(1.25), "world_size": 2, "bucket_comm_s": [0.2, 0.1]}
    paired["ranks"] = [dict(paired["ranks"][0], rank=r) for r in (0, 1)]
    right = split_miss(_basis(), Target(2, [0.2, 0.1], compute_slowdown=1.25), BIG_HOST,
                       paired, measured_s=1.35)
    assert right["terms_s"]["compute"] == pytest.approx(0.0, abs=1e-9)
    none = split_miss(_basis(), Target(2, [0.2, 0.1]), BIG_HOST, paired, measured_s=1.35)
    assert none["terms_s"]["compute"] == pytest.approx(0.25)
    assert none["paired_s"] == pytest.approx(1.35)


def test_compute_swapped_in_on_an_overcommitted_host_keeps_the_slowdown_it_was_predicted_with():
    """One loader worker per rank busy half the step (a supply of 2 images/s, 0.5 s a batch,
    against 1.0 s of compute at 1) on 2 cores: 1.5 cores a rank, x1.5 at 2 ranks. Predicted:
    forward 0.6, backward 0.75 to 1.35 (bucket 0 from 0.975 to 1.175, bucket 1 1.35-1.45), the
    optimizer's 0.15 to 1.6. The run computed 1.8 times the run at 1: forward 0.72, backward
    to 1.62, bucket 1 1.62-1.72, 0.18 to 1.9: compute +0.3, and no other term (its ranks
    alike, no data wait: the worker's 0.5 s hides behind the compute). Were the slowdown
    worked out again from the swapped compute (the worker then busy 0.5 / 1.2 of it: x1.417),
    compute would read +0.2 and the ranks' wait the other 0.1."""
    paired = {**_basis(1.8), "world_size": 2, "bucket_comm_s": [0.2, 0.1]}
    paired["ranks"] = [dict(paired["ranks"][0], rank=r) for r in (0, 1)]
    host = Host(cores=2, loader_workers=1)
    got = split_miss(_basis(), Target(2, [0.2, 0.1], supply_images_per_s=2.0), host, paired,
                     measured_s=1.9)
    assert got["predicted_s"] == pytest.approx(1.6)
    assert got["terms_s"] == pytest.approx(dict.fromkeys(TERMS, 0.0) | {"compute": 0.3})


def test_runs_that_accumulate_differently_are_refused_by_name():
    paired = {**_paired(), "grad_accum": 2}
    with pytest.raises(ValueError, match="accumulate differently"):
        split_miss(_basis(), Target(2, [0.2, 0.1]), BIG_HOST, paired, measured_s=1.7)


def test_mean_terms_tell_a_bias_from_one_launchs_noise():
    """Two launches whose compute missed by +0.3 and -0.1 s and communication by +0.1 twice:
    communication +0.1 on average, compute +0.1."""
    splits = [{"terms_s": dict.fromkeys(TERMS, 0.0) | {"compute": c, "communication": 0.1}}
              for c in (0.3, -0.1)]
    assert mean_terms(splits) == pytest.approx(dict.fromkeys(TERMS, 0.0)
                                               | {"compute": 0.1, "communication": 0.1})
    assert mean_terms([]) == {}


def test_a_scored_launch_carries_its_split_and_an_injected_one_does_not():
    """``explain_miss`` splits a clean launch's miss from the run's own components (here the
    paired costs above standing for that run's local steps) and leaves a launch with an
    injection at N' alone: a straggler known there is no input of the run's own to swap."""
    from swinkit.predict.supervisor import held_out_parts
    from swinkit.injection import Injection

    basis = {"costs": _basis(), "host": vars(BIG_HOST)}
    pred = {}
    held_out_parts.explain_miss(pred, basis, Target(2, [0.2, 0.1]), _paired(), 1.7, None,
                                Injection())
    assert pred["miss_split"]["terms_s"]["communication"] == pytest.approx(0.2)
    injected = {}
    held_out_parts.explain_miss(injected, basis, Target(2, [0.2, 0.1]), _paired(), 1.7, None,
                              Injection(compute_ms=40, ranks=(1,)))
    assert injected == {}
    # a split that cannot be made is noted, not raised: the launches scored are kept
    odd = {}
    held_out_parts.explain_miss(odd, basis, Target(2, [0.2, 0.1]), {**_paired(), "grad_accum": 2},
                              1.7, None, Injection())
    assert "accumulate differently" in odd["miss_split"]["error"]
    # whatever stops it: a run at N' that kept no components (the asv suite's sweep)
    none = {}
    held_out_parts.explain_miss(none, basis, Target(2, [0.2, 0.1]), None, 1.7)
    assert none["miss_split"]["error"].startswith("TypeError")


def test_the_report_prints_each_launchs_terms_and_their_mean():
    """Launch 1 missed by +0.6 s (the hand-worked split above), launch 2 by +0.1 s, all of it
    communication: their lines in ms, and the mean of each term over the two."""
    from swinkit.predict.report.text import miss_lines

    first = split_miss(_basis(), Target(2, [0.2, 0.1]), BIG_HOST, _paired(), measured_s=1.7)
    second = {"terms_s": dict.fromkeys(TERMS, 0.0) | {"communication": 0.1},
              "predicted_s": 1.0, "measured_s": 1.1}
    launches = [{"launch": k, "targets": {2: {"miss_split": s}}}
                for k, s in ((1, first), (2, second))]
    lines = miss_lines(launches)
    assert lines[1] == ("  launch 1, N=2: compute +100.0, loading +50.0, communication +200.0, "
                        "contention +100.0, rank wait +100.0, beyond replay +50.0 (+600.0)")
    assert lines[2].endswith("communication +100.0, contention +0.0, rank wait +0.0, "
                             "beyond replay +0.0 (+100.0)")
    assert lines[3] == ("  mean over 2 launches, N=2: compute +50.0, loading +25.0, "
                        "communication +150.0, contention +50.0, rank wait +50.0, "
                        "beyond replay +25.0")
    unsplit = {"launch": 3, "targets": {2: {"miss_split": {"error": "KeyError: 'samples'"}}}}
    assert miss_lines(launches + [unsplit])[-1] == ("  launch 3, N=2: not split "
                                                     "(KeyError: 'samples')")
    assert miss_lines([{"launch": 1, "targets": {2: {}}}]) == []
