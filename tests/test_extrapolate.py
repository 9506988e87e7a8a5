"""The held-out prediction's model, on hand-worked examples (no launch, no torch)."""
import math

import pytest

from swinkit.predict.numbers.extrapolate import Host, Target, core_slowdown, naive, predict_at
from swinkit.predict.numbers.links import Device, Link, fit_link, project, ring_allreduce_s, ring_target
from swinkit.predict.numbers.order_statistics import expected_max, median_max, quantile
from swinkit.attribution.scaling import efficiency

PHASES = {"data_wait": 0.0, "forward": 0.4, "backward": 0.5, "exposed_comm": 0.0,
          "optimizer": 0.1, "other": 0.0}
BIG_HOST = Host(cores=64)  # no core sharing in the examples that test something else


def one_rank_costs(work=(1.0,), ready=(0.25, 0.5)):
    """A run at one rank whose median local iteration is 1.0 s (0.4 forward, 0.5 backward,
    0.1 optimizer) and whose per-iteration work is ``work`` (the spread lies in forward)."""
    samples = [{"phases_s": {**PHASES, "forward": 0.4 + w - 1.0}, "bucket_ready_s": list(ready)}
               for w in work]
    return {"world_size": 1, "grad_accum": 1, "contention": {}, "buffer_sync": False,
            "ranks": [{"rank": 0, "positions": [{"phases_s": dict(PHASES),
                                                 "bucket_ready_s": list(ready),
                                                 "samples": samples}]}],
            "bucket_comm_s": [0.0, 0.0], "broadcast_s": 0.0}


def test_order_statistics_by_hand():
    # 4 values: the 0.5^(1/2) = 0.70711 quantile sits at position 3 x 0.70711 = 2.1213
    assert median_max([1.0, 2.0, 3.0, 4.0], 2) == pytest.approx(3.0 + 0.12132, abs=1e-4)
    assert median_max([1.0, 2.0, 3.0, 4.0], 1) == pytest.approx(2.5)
    # E[max of 2] = (1 x 1 + 2 x 3 + 3 x 5 + 4 x 7) / 16 = 50 / 16
    assert expected_max([4.0, 1.0, 3.0, 2.0], 2) == pytest.approx(50 / 16)
    assert expected_max([1.0, 2.0, 3.0, 4.0], 1) == pytest.approx(2.5)
    assert quantile([5.0], 0.9) == 5.0
    with pytest.raises(ValueError, match="q must be"):
        quantile([1.0], 1.5)


def test_spread_of_per_rank_times_lowers_predicted_efficiency():
    """Same median (1.0 s), two spreads: without spread two ranks wait for nobody; with work
    0.8..1.2 s the slowest of two has median quantile 0.70711 of 5 draws: position 2.8284,
    1.0 + 0.8284 x 0.1 = 1.08284 s, so E(2) = 1 / 1.08284 = 0.9235."""
    target = Target(2, [0.0, 0.0])
    narrow = predict_at(one_rank_costs(work=(1.0,) * 5), target, BIG_HOST)
    wide = predict_at(one_rank_costs(work=(0.8, 0.9, 1.0, 1.1, 1.2)), target, BIG_HOST)
    assert narrow["predicted_iter_s"] == pytest.approx(1.0)
    assert wide["jitter_s"] == pytest.approx(0.082843, abs=1e-5)
    assert wide["predicted_iter_s"] == pytest.approx(1.082843, abs=1e-5)
    assert efficiency(1.0, wide["predicted_iter_s"]) == pytest.approx(0.92351, abs=1e-4)
    # at 8 ranks the wait grows: the 0.5^(1/8) = 0.91700 quantile
    wide8 = predict_at(one_rank_costs(work=(0.8, 0.9, 1.0, 1.1, 1.2)), Target(8, [0.0, 0.0]),
                       BIG_HOST)
    # (position 4 x 0.91700 = 3.6680 of 0.8..1.2: 1.1668 s, less the median 1.0)
    assert wide8["jitter_s"] == pytest.approx(0.16680, abs=1e-5)


def test_dropping_the_network_term_predicts_too_well():
    """Buckets ready 0.25 s and 0.5 s into a 0.5 s backward (which starts at 0.4 s), all-reduces
    of 0.2 s and 0.1 s timed at N' = 2: bucket 0 runs 0.65-0.85, bucket 1 0.9-1.0, backward
    returns at 1.0, the optimizer ends the step at 1.1 s: E(2) = 1 / 1.1. With the network
    term pinned to zero the same model says 1.0 s, perfect scaling: the trap."""
    target = Target(2, [0.2, 0.1])
    with_net = predict_at(one_rank_costs(), target, BIG_HOST)
    without = predict_at(one_rank_costs(), target, BIG_HOST, network=False)
    assert with_net["predicted_iter_s"] == pytest.approx(1.1)
    assert without["predicted_iter_s"] == pytest.approx(1.0)
    assert efficiency(1.0, without["predicted_iter_s"]) == pytest.approx(1.0)
    baselines = naive(1.0, target)
    assert baselines == pytest.approx({"perfect_scaling_s": 1.0, "plus_allreduce_s": 1.3,
                                      "naive_known_s": 0.0})
    assert without["comm_source"] == "network term dropped"
    assert any("none (one rank was run" in a for a in with_net["assumptions"])


def test_shared_cores_slow_compute_by_the_overcommit():
    assert core_slowdown(4, 1, Host(cores=2)) == 2.0
    assert core_slowdown(4, 2, Host(cores=2)) == 2.0   # 2 ranks fit, 4 need twice the cores
    assert core_slowdown(2, 1, Host(cores=2)) == 1.0
    # a loader worker busy half the iteration: 1.5 cores per rank, 3 for two ranks on 2
    assert core_slowdown(2, 1, Host(cores=2, loader_workers=1), worker_busy=0.5) == 1.5
    # 4 ranks on 2 cores: every phase twice as long, 2.0 s instead of 1.0
    pred = predict_at(one_rank_costs(), Target(4, [0.0, 0.0]), Host(cores=2))
    assert pred["core_slowdown"] == 2.0
    assert pred["predicted_iter_s"] == pytest.approx(2.0)


def test_loader_supply_at_target_stalls_only_its_excess_over_compute():
    # 2 images at 1 image/s per rank: 2 s of loading per batch against 1 s of compute
    host = Host(cores=64, loader_workers=1, images_per_rank=2)
    pred = predict_at(one_rank_costs(), Target(2, [0.0, 0.0], supply_images_per_s=1.0), host)
    assert pred["components_s"]["data_wait"] == pytest.approx(1.0)
    assert pred["predicted_iter_s"] == pytest.approx(2.0)


def test_a_rank_loading_itself_keeps_its_own_wait_scaled_by_the_loaders_slowdown():
    """No workers, predicted from world size 1: the run's own data wait (0.2 s) times how much
    slower one loader ran with 2 at once than alone (x1.25): 0.25 s, so the iteration 1.2 ->
    1.25 s. The supply would say 2 images / 2.0 images/s = 1.0 s (x5 the run's own wait);
    without the loader's slowdown timed, with workers, or from world size 2, the supply stands
    as before; a slowdown read under 1 (noise) leaves the run's wait as it was."""
    costs = one_rank_costs()
    costs["ranks"][0]["positions"][0]["phases_s"]["data_wait"] = 0.2
    host = Host(cores=64, images_per_rank=2)
    both = Target(2, [0.0, 0.0], supply_images_per_s=2.0, loader_slowdown=1.25)
    pred = predict_at(costs, both, host)
    assert pred["components_s"]["data_wait"] == pytest.approx(0.25)
    assert pred["predicted_iter_s"] == pytest.approx(1.25)
    assert any("x1.250" in a for a in pred["assumptions"])
    supply_only = Target(2, [0.0, 0.0], supply_images_per_s=2.0)
    assert predict_at(costs, supply_only, host)["components_s"]["data_wait"] == pytest.approx(1.0)
    workers = Host(cores=64, loader_workers=1, images_per_rank=2)  # the excess over compute
    assert predict_at(costs, both, workers)["components_s"]["data_wait"] == pytest.approx(0.2)
    from_two = {**costs, "world_size": 2}
    assert predict_at(from_two, both, host)["components_s"]["data_wait"] == pytest.approx(1.0)
    faster = Target(2, [0.0, 0.0], supply_images_per_s=2.0, loader_slowdown=0.9)
    assert predict_at(costs, faster, host)["components_s"]["data_wait"] == pytest.approx(0.2)


def test_ring_model_by_hand():
    # 1 GB over 4 ranks at 10 GB/s, 10 us: 2 x 3/4 x 0.1 s + 6 x 10 us
    assert ring_allreduce_s(1e9, 4, Link(10, 1e-5)) == pytest.approx(0.15006)
    assert ring_allreduce_s(1e9, 1, Link(10, 1e-5)) == 0.0
    with pytest.raises(ValueError, match="bandwidth_gbps"):
        Link(0, 0)


def test_multi_node_is_bound_by_the_inter_node_link():
    intra, inter = Link(100, 1e-6), Link(10, 1e-5)
    one = ring_target([1e9], 4, 1, intra)
    two = ring_target([1e9], 4, 2, intra, inter)
    assert one.bucket_comm_s[0] == pytest.approx(2 * 3 / 4 * 0.01 + 6e-6)
    assert two.world_size == 8
    assert two.bucket_comm_s[0] == pytest.approx(2 * 7 / 8 * 0.1 + 14e-5)
    assert "inter-node" in two.source
    with pytest.raises(ValueError, match="inter"):
        ring_target([1e9], 4, 2, intra)


def test_fit_link_recovers_stated_figures():
    link = Link(5, 2e-5)
    points = [(b, n, ring_allreduce_s(b, n, link)) for b in (1e6, 1e8) for n in (2, 4)]
    fitted = fit_link(points)
    assert fitted.bandwidth_gbps == pytest.approx(5)
    assert fitted.latency_s == pytest.approx(2e-5)


def test_projection_by_hand():
    dev = Device("x", iter_s=1.0, backward_share=0.5, link=Link(10, 0.0))
    rows = project(dev, 1e9, (1, 2, 8))
    assert rows[1]["speedup"] == 1.0
    # N = 2: 0.1 s ring, hidden but for the last bucket's 10 %: T = 1.01
    assert rows[2]["speedup"] == pytest.approx(2 / 1.01)
    # N = 8: 0.175 s ring, 0.0175 exposed
    assert rows[8]["speedup"] == pytest.approx(8 / 1.0175)
    slow = project(Device("y", 1.0, 0.05, Link(1, 0.0)), 1e9, (2,))
    assert slow[2]["exposed_s"] == pytest.approx(1.0 - 0.05)
    assert not math.isnan(slow[2]["efficiency"])


def test_wait_timed_at_the_sync_points_when_it_exceeds_the_samples_spread():
    """Equal work on 2 ranks waited 0.05 s per sync point at N' (a time-shared host); two
    buckets are two sync points (no buffer broadcast here): 0.1 s on top of the 1.1 s step of
    the network example, where the one-rank samples (no spread) would add nothing."""
    pred = predict_at(one_rank_costs(), Target(2, [0.2, 0.1], sync_wait_s=0.05), BIG_HOST)
    assert pred["sync_points_wait_s"] == pytest.approx(0.1)
    assert pred["predicted_iter_s"] == pytest.approx(1.2)
    # the larger of the two estimates, not their sum: a wide spread (0.0828 s) stays
    wide = predict_at(one_rank_costs(work=(0.8, 0.9, 1.0, 1.1, 1.2)),
                      Target(2, [0.0, 0.0], sync_wait_s=0.01), BIG_HOST)
    assert wide["jitter_s"] == pytest.approx(0.082843, abs=1e-5)


def test_the_wait_in_the_models_rhythm_replaces_the_wait_per_sync_point():
    """Timed in the model's rhythm, a rank lost 0.03 s a step waiting for the slowest: that
    is the wait (not 0.05 s at each of the 2 buckets, 0.1 s), on the network example's 1.1 s
    step; per micro-batch with 2 of them a step (0.015 s); nothing at one rank."""
    pred = predict_at(one_rank_costs(), Target(2, [0.2, 0.1], sync_wait_s=0.05,
                                               iteration_wait_s=0.03), BIG_HOST)
    assert pred["sync_points_wait_s"] == pytest.approx(0.03)
    assert pred["predicted_iter_s"] == pytest.approx(1.13)
    two = one_rank_costs()
    two["grad_accum"] = 2
    two["ranks"][0]["positions"] *= 2
    got = predict_at(two, Target(2, [0.0, 0.0], iteration_wait_s=0.03), BIG_HOST)
    assert got["sync_points_wait_s"] == pytest.approx(0.015)
    alone = predict_at(one_rank_costs(), Target(1, [0.0, 0.0], iteration_wait_s=0.03), BIG_HOST)
    assert alone["sync_points_wait_s"] == 0.0


def test_overcommitted_ranks_take_the_timed_wait_not_independent_draws():
    """4 ranks on 2 cores: the samples' spread (max of 4 draws of 0.8..1.2 s, x2 for the
    shared cores) would add 2 x (quantile 0.5^(1/4) = 0.8409 at position 3.3636: 1.13636 s
    - 1.0) = 0.2727 s; the wait timed at 4 (0.01 s at each of 2 buckets) replaces it."""
    costs = one_rank_costs(work=(0.8, 0.9, 1.0, 1.1, 1.2))
    untimed = predict_at(costs, Target(4, [0.0, 0.0]), Host(cores=2))
    assert untimed["jitter_s"] == pytest.approx(0.27272, abs=1e-4)
    timed = predict_at(costs, Target(4, [0.0, 0.0], sync_wait_s=0.01), Host(cores=2))
    assert timed["jitter_s"] == pytest.approx(0.02)
    assert timed["predicted_iter_s"] == pytest.approx(2.0 + 0.02)


def test_loader_workers_overcommitting_the_cores_a_little_leave_the_ranks_independent():
    """2 one-thread ranks on 2 cores, each with a loader worker busy 10 % of the time (0.1 s
    of loading per 1.0 s step): the cores are overcommitted x1.1, but each rank keeps its core,
    so the samples' spread stands where it is the larger: (quantile 0.70711 at position
    2.82843 of 0.8..1.2 s: 1.08284 - 1.0) x 1.1 = 0.09113 s, not the wait timed at 2 (0.01 s
    at each of 2 buckets, 0.02 s), which would stand alone for ranks time-sliced on the
    cores."""
    costs = one_rank_costs(work=(0.8, 0.9, 1.0, 1.1, 1.2))
    host = Host(cores=2, loader_workers=1, images_per_rank=1)
    pred = predict_at(costs, Target(2, [0.0, 0.0], supply_images_per_s=10.0, sync_wait_s=0.01),
                      host)
    assert pred["core_slowdown"] == pytest.approx(1.1)
    assert pred["jitter_s"] == pytest.approx(0.082843 * 1.1, abs=1e-5)


def test_ranks_of_two_threads_on_too_few_cores_are_time_sliced():
    """2 ranks of 2 threads each on 2 cores: x2 overcommitted by the ranks' own threads, so
    the wait timed at 2 (0.01 s at each of 2 buckets) stands alone, where the samples'
    spread (0.082843 s x 2 for the shared cores) would be the larger."""
    costs = one_rank_costs(work=(0.8, 0.9, 1.0, 1.1, 1.2))
    pred = predict_at(costs, Target(2, [0.0, 0.0], sync_wait_s=0.01),
                      Host(cores=2, threads_per_rank=2))
    assert pred["jitter_s"] == pytest.approx(0.02)


def test_contention_timed_at_target_slows_the_overlap_when_one_rank_was_run():
    """The network example with backward at half speed while an all-reduce is in flight:
    bucket 0 (0.65-0.85 s) leaves backward 0.1 s of work done in it (0.35 of 0.5 s at 0.85),
    the last 0.15 s alone ends at 1.0, bucket 1 runs 1.0-1.1, the optimizer ends at 1.2 s."""
    target = Target(2, [0.2, 0.1], contention={"compute_rate": 0.5, "comm_rate": 1.0})
    pred = predict_at(one_rank_costs(), target, BIG_HOST)
    assert pred["predicted_iter_s"] == pytest.approx(1.2)
    assert any("timed at N' with fixed matmul work" in a for a in pred["assumptions"])


def test_fit_link_refuses_a_negative_latency():
    # the larger bucket faster than a small one: noise, not a link
    with pytest.raises(ValueError, match="negative"):
        fit_link([(1e6, 2, 0.003), (1.01e6, 2, 0.002)])


def test_held_out_from_a_sweep_reads_the_run_at_2_only_after_predicting(monkeypatch):
    """bench_ddp's sweep: the run at 1 keeps its basis, the run at 2 scores. A basis of
    one rank doing 1.0 s of local work, buckets timed at 2 as 0.02 + 0.03 s, both ready at the
    end of backward, two timings pooled: predicted 1.0 + 0.05 s; measured 1.1 s: accuracy
    100 x (1 - 0.05 / 1.1).
    Only then are the run at 2's own components read, to split the miss: their forward of
    0.45 s (the prediction, had it read them, would be 1.1 s) is all of it, +0.05 s compute."""
    from swinkit.predict.supervisor import held_out as predict_run
    from swinkit.runs.sweep import Sweep

    phases = {"data_wait": 0.0, "forward": 0.4, "backward": 0.5, "exposed_comm": 0.0,
              "optimizer": 0.1, "other": 0.0}
    position = {"phases_s": dict(phases), "bucket_ready_s": [0.5, 0.5],
                "samples": [{"phases_s": dict(phases), "bucket_ready_s": [0.5, 0.5]}] * 3}
    basis = {"costs": {"world_size": 1, "grad_accum": 1, "contention": {},
                       "buffer_sync": False, "ranks": [{"rank": 0, "positions": [position]}],
                       "bucket_comm_s": [0.0, 0.0], "broadcast_s": 0.0},
             "host": {"cores": 64, "threads_per_rank": 1, "loader_workers": 0,
                      "images_per_rank": 2},
             "bucket_bytes": [1000, 9000], "probe": {}}
    # timed twice, as a held-out sweep's first launch: the stand-in x0.8 then x1.2 pool to
    # x1.0 (the latest alone would slow the 1.0 s of compute to 1.2 s)
    readings = iter([0.8, 1.2])
    monkeypatch.setattr(predict_run, "measure_target", lambda preset, ws, b, progress,
                        comm_scale=1.0: Target(ws, [0.02, 0.03], sync_wait_s=0.0,
                                               compute_slowdown=next(readings)))
    # the run at 2: its iteration, and its components, which the prediction must not read
    slower = dict(phases, forward=0.45)
    at_2 = {"phases_s": slower, "bucket_ready_s": [0.5, 0.5],
            "samples": [{"phases_s": slower, "bucket_ready_s": [0.5, 0.5]}] * 3}
    own = {"world_size": 2, "grad_accum": 1, "contention": {}, "buffer_sync": False,
           "ranks": [{"rank": r, "positions": [at_2]} for r in (0, 1)],
           "bucket_comm_s": [0.02, 0.03], "broadcast_s": 0.0}
    sweep = Sweep(results={1: {"iter_s": 1.0, "basis": basis},
                           2: {"iter_s": 1.1, "basis": {"costs": own},
                               "prediction": {"predicted_iter_s": 1.09, "components_s": {}},
                               "bucket_spans": {"bucket0": {"span_s": 0.04}}}})
    out = predict_run.held_out_from_sweep(sweep, "test", progress=lambda *a: None)
    pred = out["launches"][0]["targets"][2]
    assert pred["bucket_spans"] == {"bucket0": {"span_s": 0.04}}  # the run's, read after
    assert pred["predicted_iter_s"] == pytest.approx(1.05)
    assert out["launches"][0]["timed"][2]["compute_slowdown"] == 1.2
    assert [t["compute_slowdown"] for t in out["launches"][0]["timed_earlier"][2]] == [0.8]
    terms = pred["miss_split"]["terms_s"]
    assert terms.pop("compute") == pytest.approx(0.05)
    assert terms == pytest.approx(dict.fromkeys(terms, 0.0), abs=1e-9)
    assert pred["accuracy"]["model"]["accuracy_pct"] == pytest.approx(100 * (1 - 0.05 / 1.1))
    assert pred["accuracy"]["perfect"]["accuracy_pct"] == pytest.approx(100 * (1 - 0.1 / 1.1))
    assert pred["paired_oracle_s"] == 1.09
    assert out["summary"][2]["model"]["worst_pct"] == pred["accuracy"]["model"]["accuracy_pct"]
    with pytest.raises(ValueError, match="kept no basis"):
        predict_run.held_out_from_sweep(Sweep(results={1: {"iter_s": 1.0}, 2: {"iter_s": 1.1}}),
                                        "test", progress=lambda *a: None)
    injected = Sweep(results=sweep.results, meta={"injection": {"compute_ms": 40.0,
                                                                "ranks": [1]}})
    with pytest.raises(ValueError, match="ran with an injection"):
        predict_run.held_out_from_sweep(injected, "test", progress=lambda *a: None)


def test_a_stand_in_slowed_at_n_slows_compute_and_an_overcommit_is_not_counted_twice():
    """One rank of 1.0 s local work (0.4 forward, 0.5 backward, 0.1 optimizer), no
    communication. A stand-in 1.5x slower with 2 ranks at once on a 64-core host: every
    compute phase x1.5, predicted 1.5 s. 4 one-thread ranks on 2 cores overcommit x2 and the
    stand-in saw x1.8 there: x2, not x3.6."""
    phases = {"data_wait": 0.0, "forward": 0.4, "backward": 0.5, "exposed_comm": 0.0,
              "optimizer": 0.1, "other": 0.0}
    position = {"phases_s": dict(phases), "bucket_ready_s": [0.5],
                "samples": [{"phases_s": dict(phases), "bucket_ready_s": [0.5]}] * 3}
    costs = {"world_size": 1, "grad_accum": 1, "contention": {}, "buffer_sync": False,
             "ranks": [{"rank": 0, "positions": [position]}], "bucket_comm_s": [0.0],
             "broadcast_s": 0.0}
    wide = predict_at(costs, Target(2, [0.0], sync_wait_s=0.0, compute_slowdown=1.5),
                      Host(cores=64))
    assert wide["predicted_iter_s"] == pytest.approx(1.5)
    assert wide["components_s"]["forward"] == pytest.approx(0.6)
    assert any("stand-in" in a for a in wide["assumptions"])
    untimed = predict_at(costs, Target(2, [0.0], sync_wait_s=0.0), Host(cores=64))
    assert untimed["predicted_iter_s"] == pytest.approx(1.0)
    narrow = predict_at(costs, Target(4, [0.0], sync_wait_s=0.0, compute_slowdown=1.8),
                        Host(cores=2))
    assert narrow["predicted_iter_s"] == pytest.approx(2.0)


def test_a_straggler_known_at_n_is_waited_for_by_every_rank():
    """One rank of 1.0 s (0.4 forward, 0.5 backward, 0.1 optimizer), its bucket ready at the
    end of backward, the all-reduce free. At N' = 2 rank 1's forward is known to take 200 ms
    more: both ranks meet at the bucket, so the iteration is 1.2 s. The naive predictions
    know the injection too (every fact the model has): T(1) plus the 0.2 s it adds to the
    rank it slows, 1.2 s. Every 2nd iteration, 1.1 s on average. Rank 0 alone: the same."""
    from swinkit.predict.supervisor.held_out import predict_one
    from swinkit.injection import Injection

    phases = {"data_wait": 0.0, "forward": 0.4, "backward": 0.5, "exposed_comm": 0.0,
              "optimizer": 0.1, "other": 0.0}
    position = {"phases_s": dict(phases), "bucket_ready_s": [0.5],
                "samples": [{"phases_s": dict(phases), "bucket_ready_s": [0.5]}] * 3}
    basis = {"costs": {"world_size": 1, "grad_accum": 1, "contention": {}, "buffer_sync": False,
                       "ranks": [{"rank": 0, "positions": [position]}], "bucket_comm_s": [0.0],
                       "broadcast_s": 0.0},
             "host": {"cores": 64, "threads_per_rank": 1, "loader_workers": 0,
                      "images_per_rank": 2}}
    target = Target(2, [0.0], sync_wait_s=0.0)
    slow_one = predict_one(basis, 1.0, target, Injection(compute_ms=200, ranks=(1,)))
    assert slow_one["predicted_iter_s"] == pytest.approx(1.2)
    assert slow_one["perfect_scaling_s"] == pytest.approx(1.2)
    assert slow_one["plus_allreduce_s"] == pytest.approx(1.2)  # the all-reduce free
    assert predict_one(basis, 1.0, target)["perfect_scaling_s"] == 1.0  # nothing known
    assert any("compute_ms=200" in a for a in slow_one["assumptions"])
    half = predict_one(basis, 1.0, target, Injection(compute_ms=200, ranks=(1,), every=2))
    assert half["predicted_iter_s"] == pytest.approx(1.1)
    # a late backward on rank 0 delays its bucket (ready after the middle) by as much
    late = predict_one(basis, 1.0, target, Injection(backward_ms=100, ranks=(0,)))
    assert late["predicted_iter_s"] == pytest.approx(1.1)
    assert predict_one(basis, 1.0, target)["predicted_iter_s"] == pytest.approx(1.0)


def _one_second_basis(world_size: int = 1, cores: int = 64, injected=(0.0,)) -> dict:
    """A basis of ``world_size`` ranks of 1.0 s (0.4 forward, 0.5 backward, 0.1 optimizer),
    the bucket ready at the end of backward, the all-reduce free; rank r's forward longer by
    ``injected[r]`` (what an injection put into its timings), in every measured step."""
    def position(extra):
        phases = {"data_wait": 0.0, "forward": 0.4 + extra, "backward": 0.5,
                  "exposed_comm": 0.0, "optimizer": 0.1, "other": 0.0}
        step = {"phases_s": dict(phases), "bucket_ready_s": [0.5]}  # from forward's end
        return dict(step, samples=[step] * 3)
    ranks = [{"rank": r, "positions": [position(injected[r])]} for r in range(world_size)]
    return {"costs": {"world_size": world_size, "grad_accum": 1, "contention": {},
                      "buffer_sync": False, "ranks": ranks, "bucket_comm_s": [0.0],
                      "broadcast_s": 0.0},
            "host": {"cores": cores, "threads_per_rank": 1, "loader_workers": 0,
                     "images_per_rank": 2}}


def test_an_injection_the_run_predicted_from_had_is_not_added_again():
    """The run at 1 measured 1.2 s with a 200 ms forward injected (on every rank, so on its
    one). At N' = 2 every rank has the same 200 ms: 1.2 s, not 1.4 (which adding the
    injection on top of a basis that holds it gives). Injected on rank 0 alone: at 2 rank 1
    is 200 ms faster and waits at the bucket for rank 0, 1.2 s again. Rank 1 alone, from a
    run at 1 that did not have it (1.0 s): 1.2 s, as before."""
    from swinkit.predict.supervisor.held_out import predict_one
    from swinkit.injection import Injection

    target = Target(2, [0.0], sync_wait_s=0.0)
    held = _one_second_basis(injected=(0.2,))
    every = Injection(compute_ms=200)
    both = predict_one(held, 1.2, target, every, basis_injection=every)
    assert both["predicted_iter_s"] == pytest.approx(1.2)
    assert any("taken off its timings first" in a for a in both["assumptions"])
    first = Injection(compute_ms=200, ranks=(0,))
    assert predict_one(held, 1.2, target, first, first.for_world_size(1))[
        "predicted_iter_s"] == pytest.approx(1.2)
    # at N' without it (none given): the run's 200 ms taken off, 1.0 s
    assert predict_one(held, 1.2, target, None, every)["predicted_iter_s"] == pytest.approx(1.0)
    second = Injection(compute_ms=200, ranks=(1,))
    assert predict_one(_one_second_basis(), 1.0, target, second, second.for_world_size(1))[
        "predicted_iter_s"] == pytest.approx(1.2)


def test_the_injection_taken_off_is_each_ranks_own_and_not_scaled_by_the_sharing():
    """From 2 ranks where rank 1 held a 300 ms forward (``ranks=1``), to 4: only rank 1 is
    slow at 4, so 1.3 s; the ranks' median (0.15 s on both) would give 1.15 s, and samples
    left with rank 1's 300 ms would add an expected-maximum wait on top. On 2 cores, 4
    ranks of 1 thread run at half speed: the clean 1.0 s doubles to 2.0 and the spin stays
    300 ms (2.3 s), where scaling the basis as measured gives 2.6 s. Every rank injected,
    from 1 on 2 cores: 2.0 + 0.3 = 2.3 s as well."""
    from swinkit.predict.supervisor.held_out import predict_one
    from swinkit.injection import Injection

    straggler = Injection(compute_ms=300, ranks=(1,))
    from_two = _one_second_basis(2, injected=(0.0, 0.3))
    wide = predict_one(from_two, 1.0, Target(4, [0.0], sync_wait_s=0.0), straggler,
                       straggler.for_world_size(2))
    assert wide["predicted_iter_s"] == pytest.approx(1.3)
    shared = predict_one(_one_second_basis(2, cores=2, injected=(0.0, 0.3)), 1.0,
                         Target(4, [0.0], sync_wait_s=0.0), straggler,
                         straggler.for_world_size(2))
    assert shared["predicted_iter_s"] == pytest.approx(2.3)
    every = Injection(compute_ms=300)
    alone = predict_one(_one_second_basis(1, cores=2, injected=(0.3,)), 1.3,
                        Target(4, [0.0], sync_wait_s=0.0), every, every)
    assert alone["predicted_iter_s"] == pytest.approx(2.3)


def test_an_optimizer_injection_costs_once_a_step_under_gradient_accumulation():
    """Two micro-batches a step (0.4 forward + 0.5 backward each, the optimizer's 0.1 s on
    the second, the bucket all-reduced there): 1.9 s a step, 0.95 s an iteration. 200 ms
    more in rank 1's optimizer step at N' = 2: 2.1 s a step (rank 0 waits at the bucket),
    1.05 s an iteration; added to both micro-batches it would read 1.15."""
    from swinkit.predict.supervisor.held_out import predict_one
    from swinkit.injection import Injection

    def position(optimizer, ready):
        phases = {"data_wait": 0.0, "forward": 0.4, "backward": 0.5, "exposed_comm": 0.0,
                  "optimizer": optimizer, "other": 0.0}
        return {"phases_s": phases, "bucket_ready_s": ready,
                "samples": [{"phases_s": dict(phases), "bucket_ready_s": ready}] * 3}
    basis = {"costs": {"world_size": 1, "grad_accum": 2, "contention": {}, "buffer_sync": False,
                       "ranks": [{"rank": 0, "positions": [position(0.0, []),
                                                           position(0.1, [0.5])]}],
                       "bucket_comm_s": [0.0], "broadcast_s": 0.0},
             "host": {"cores": 64, "threads_per_rank": 1, "loader_workers": 0,
                      "images_per_rank": 2}}
    target = Target(2, [0.0], sync_wait_s=0.0)
    assert predict_one(basis, 0.95, target)["predicted_iter_s"] == pytest.approx(0.95)
    late = predict_one(basis, 0.95, target, Injection(optimizer_ms=200, ranks=(1,)))
    assert late["predicted_iter_s"] == pytest.approx(1.05)


def test_injections_a_held_out_prediction_cannot_take_are_refused_before_any_run():
    """every=2 on a rank the run predicted from has: its medians hold the cost or not,
    depending on which of its steps were injected; a slower link every 2nd step: the
    all-reduces timed at N' move the larger payload every time. Both refused, naming
    --inject, before anything runs; every=2 on a rank only N' has is taken."""
    from swinkit.predict.supervisor import held_out as predict_run
    from swinkit.injection import Injection

    for bad in (Injection(compute_ms=50, every=2), Injection(comm_scale=4, every=2)):
        with pytest.raises(ValueError, match="--inject"):
            predict_run.held_out("test", [1, 2], [1], injection=bad,
                                 progress=lambda *a: pytest.fail("started"))
    predict_run.check_held_out(Injection(ranks=()),
                               [Injection(compute_ms=50, ranks=(1,), every=2)])


def test_repeatability_scores_each_launch_as_a_prediction_of_the_next():
    """T(1) of 1.0, 1.25, 1.0 s in three launches: 1.0 as a prediction of 1.25 is 80 %
    accurate, 1.25 of 1.0 is 75 %. The runs at 2 measured 2.0, 2.0, 1.5 s: 100 %, then 2.0 as
    a prediction of 1.5 is 66.7 %. A size not scored in every launch (4: in launches 1 and 3
    only, equal times that would read 100 %) and a single launch give nothing."""
    from swinkit.predict.supervisor.held_out import repeatability

    launches = [{"measured_from": {1: t1}, "targets": {2: {"measured_iter_s": t2}, 4: {}}}
                for t1, t2 in [(1.0, 2.0), (1.25, 2.0), (1.0, 1.5)]]
    # 4 scored in one launch and then in another: not a pair of consecutive launches
    launches[0]["targets"][4] = launches[2]["targets"][4] = {"measured_iter_s": 3.0}
    got = repeatability(launches)
    assert got["1"]["per_pair_pct"] == pytest.approx([80.0, 75.0])
    assert got["1"]["worst_pct"] == pytest.approx(75.0)
    assert got["2"]["per_pair_pct"] == pytest.approx([100.0, 200 / 3])
    assert "4" not in got
    assert repeatability(launches[:1]) == {}


def _fake_launches(monkeypatch, run_ddp, measure_target, predict_one) -> None:
    """held_out's launches and prediction replaced by the test's own; no basis, no score."""
    from swinkit.predict.supervisor import held_out as predict_run

    monkeypatch.setattr(predict_run, "run_ddp", run_ddp)
    monkeypatch.setattr(predict_run, "measure_target", measure_target)
    monkeypatch.setattr(predict_run, "predict_one", predict_one)
    monkeypatch.setattr(predict_run, "basis_of", lambda run: {})
    monkeypatch.setattr(predict_run, "predict_from", lambda run, spec: None)
    monkeypatch.setattr(predict_run, "score_against", lambda pred, measured, paired: None)
    monkeypatch.setattr(predict_run, "costs", lambda local_run: None)
    monkeypatch.setattr(predict_run, "explain_miss", lambda *args: None)


def test_held_out_runs_the_basis_just_before_the_run_it_predicts(monkeypatch):
    """The order of a held-out command of 2 launches predicting 2 from 1: one short run at 1
    for the buckets' sizes, then every launch alike (nothing of one launch reaches another):
    two timings at 2 without the model, the run at 1, the prediction from that run, and only
    then the run at 2. Each launch predicts from its own run at 1 (T(1) 1.0 s, then 1.5 s) and
    the mean of its own two timings' host-sharing readings (stand-in x1.0 and x1.2: x1.1;
    then x1.7 and x1.5: x1.6, not pooled with launch 1's), keeping its latest beside it and
    the earlier one apart."""
    from swinkit.predict.supervisor import held_out as predict_run

    events, t1s, slowdowns = [], iter([9.9, 1.0, 1.5]), iter([1.0, 1.2, 1.7, 1.5])

    def run_ddp(spec, progress):
        events.append(f"run {spec.world_size}" + (" short" if spec.iters == 2 else ""))
        t = next(t1s) if spec.world_size == 1 else 2.0
        return {"iter_s": t, "device": "cpu", "local_run": {}}

    def measure_target(preset, ws, basis, progress, comm_scale=1.0):
        events.append(f"timings at {ws}")
        return Target(ws, [0.0], compute_slowdown=next(slowdowns))

    def predict_one(basis, t1, target, injection, basis_injection=None, t1_injection=None):
        events.append("prediction")
        return {"t1_s": t1, "slowdown": target.compute_slowdown}

    _fake_launches(monkeypatch, run_ddp, measure_target, predict_one)
    out = predict_run.held_out("test", [1, 2], [1], repeats=2, progress=lambda *a: None)
    launch = ["timings at 2", "timings at 2", "run 1", "prediction", "run 2"]
    assert events == ["run 1 short"] + launch + launch
    assert [row["targets"][2]["t1_s"] for row in out["launches"]] == [1.0, 1.5]
    assert [row["targets"][2]["slowdown"] for row in out["launches"]] == [
        pytest.approx(1.1), pytest.approx(1.6)]
    assert [row["timed"][2]["compute_slowdown"] for row in out["launches"]] == [1.2, 1.5]
    assert [[t["compute_slowdown"] for t in row["timed_earlier"][2]]
            for row in out["launches"]] == [[1.0], [1.7]]


def test_a_slower_link_is_timed_at_n_and_the_short_run_keeps_the_models_own_buckets(monkeypatch):
    """``--inject comm_scale=4,compute_ms=10``: the short run that gives the timings at N'
    the model's buckets runs without the slower link (its elements would come back already 4
    times larger, and be scaled again: the all-reduces timed at 16 times); the timings at 2
    scale them by 4; the run at 1 and the run at 2 keep the whole injection."""
    from swinkit.predict.supervisor import held_out as predict_run
    from swinkit.injection import Injection

    runs, scales, passed = [], [], []

    def run_ddp(spec, progress):
        runs.append((spec.world_size, spec.iters, spec.injection.comm_scale,
                     spec.injection.compute_ms))
        return {"iter_s": 1.0, "device": "cpu", "local_run": {}}

    def measure_target(preset, ws, basis, progress, comm_scale=1.0):
        scales.append(comm_scale)
        return Target(ws, [0.0])

    def predict_one(basis, t1, target, injection, basis_injection=None, t1_injection=None):
        passed.append((injection.comm_scale, basis_injection.comm_scale))
        return {}

    _fake_launches(monkeypatch, run_ddp, measure_target, predict_one)
    predict_run.held_out("test", [1, 2], [1], repeats=1, progress=lambda *a: None,
                         injection=Injection(comm_scale=4, compute_ms=10))
    assert runs == [(1, 2, 1.0, 10), (1, 10, 4, 10), (2, 10, 4, 10)]
    assert scales == [4, 4] and passed == [(4, 4)]  # both timings before the launch


def test_pooled_averages_the_host_sharing_readings_and_keeps_the_latest_network_timings():
    """Three launches' timings at 2: stand-in x1.01, x1.01, x1.13 (the third over-read, as one
    did on this host) average to x1.05; lockstep waits 1, 2 and 6 ms to 3 ms, one launch not
    timing it is left out (2 and 4 ms: 3 ms); the buckets' all-reduces are the latest's."""
    from swinkit.predict.numbers.pooled_targets import pooled

    history = [Target(2, [0.010], compute_slowdown=1.01, sync_wait_s=0.001, loader_slowdown=1.0),
               Target(2, [0.020], compute_slowdown=1.01, sync_wait_s=0.002),
               Target(2, [0.030], compute_slowdown=1.13, sync_wait_s=0.006, loader_slowdown=1.2)]
    got = pooled(history)
    assert got.compute_slowdown == pytest.approx(1.05)
    assert got.loader_slowdown == pytest.approx(1.1)  # the launch without it left out
    assert got.sync_wait_s == pytest.approx(0.003)
    assert got.bucket_comm_s == [0.030]
    assert "x1.010, x1.010, x1.130" in got.notes[-1]
    assert pooled(history[:1]) is history[0]  # one launch: its own timings, no note
    partial = [Target(2, [0.0], sync_wait_s=0.002), Target(2, [0.0], iteration_wait_s=0.004),
               Target(2, [0.0], sync_wait_s=0.004, iteration_wait_s=0.010)]
    assert pooled(partial).sync_wait_s == pytest.approx(0.003)
    assert pooled(partial).iteration_wait_s == pytest.approx(0.007)  # the wait in the rhythm
    assert pooled(partial).compute_slowdown is None
