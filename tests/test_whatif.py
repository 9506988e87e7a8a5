"""The oracle's replay, the remedy catalogue, and predict-then-run end to end.

Expected values are worked by hand in the comments (a timeline drawn on paper), so an oracle
that sums every collective, takes a typical rank instead of the slowest, or ignores the
broadcast barrier gets a different number.
"""
import json

import pytest

from swinkit.attribution.oracle import rank_correlation, simulate
from swinkit.attribution.overlap import overlap_backward
from swinkit.attribution.whatif import judge
from swinkit.ddp_options import DDPOptions
from swinkit.experiments.remedies import CATALOGUE, DEFAULT, select


def _rank(rank, data, fwd=0.2, bwd=0.3, tail=0.01, opt=0.05, other=0.01, ready=(0.1, 0.3)):
    phases = {"data_wait": data, "forward": fwd, "backward": bwd, "exposed_comm": tail,
              "optimizer": opt, "other": other}
    return {"rank": rank, "positions": [{"phases_s": phases, "bucket_ready_s": list(ready)}]}


def _costs(ranks, comm=(0.05, 0.04), broadcast=0.0, k=1):
    return {"world_size": len(ranks), "grad_accum": k, "ranks": ranks,
            "bucket_comm_s": list(comm), "broadcast_s": broadcast}


def test_replay_waits_for_the_slowest_rank_and_runs_buckets_in_order():
    # rank 0 ends forward at 0.3, rank 1 (slower loader) at 0.4. Bucket 0 is ready on both at
    # max(0.3, 0.4) + 0.1 = 0.5 and done at 0.55; bucket 1 ready at 0.4 + 0.3 = 0.7, done 0.74.
    # Backward returns at max(own compute end, 0.74) = 0.74 on both, then 0.01 + 0.05 + 0.01:
    # the period is 0.81 s. (All comm summed and exposed: 0.86; rank 0 alone: 0.71.)
    out = simulate(_costs([_rank(0, 0.1), _rank(1, 0.2)]))
    assert out["predicted_iter_s"] == pytest.approx(0.81)
    # local phases, median over ranks: data (0.1 + 0.2) / 2; what syncing adds is the rest
    assert out["components_s"]["data_wait"] == pytest.approx(0.15)
    assert out["components_s"]["sync_s"] == pytest.approx(0.81 - (0.15 + 0.2 + 0.3 + 0.07))


def test_broadcast_is_a_barrier_before_forward():
    # No buckets: the buffer broadcast (0.02 s) starts when rank 1 arrives at 0.2 and ends at
    # 0.22 for both; then 0.2 + 0.3 + 0.07 of local work: 0.79 s.
    out = simulate(_costs([_rank(0, 0.1), _rank(1, 0.2)], comm=(), broadcast=0.02))
    assert out["predicted_iter_s"] == pytest.approx(0.79)
    # rank 0 loads slowly (0.2), rank 1 computes slowly (forward 0.4). After a broadcast both
    # leave together; rank 0 is back at the next one 0.2 + 0.57 = 0.77 s later, rank 1 after
    # 0.1 + 0.77 = 0.87 s: the period is the slower cycle plus the broadcast, 0.89 s (rank 0's
    # loading overlaps rank 1's compute). Adding both slow parts would give 0.99, leaving out
    # the broadcast 0.87.
    out = simulate(_costs([_rank(0, 0.2), _rank(1, 0.1, fwd=0.4)], comm=(), broadcast=0.02))
    assert out["predicted_iter_s"] == pytest.approx(0.89)


def test_the_buffer_sync_is_a_barrier_even_when_it_adds_no_time():
    # The local steps already ran the broadcast over one rank, so over two it may add nothing
    # (broadcast_s 0), but the ranks still meet before every forward. The stragglers
    # alternate: in iteration i rank i % 2 computes forward in 0.4 s, the other in 0.2 s;
    # loading 0.1, backward 0.3, the rest 0.07: a slow cycle 0.87 s, a fast one 0.67 s.
    # Met before every forward, each iteration waits for its slow rank: 0.87 s. Unmet (no
    # buckets either), each rank runs its own cycles and both average 0.77 s; the slowest
    # rank's step ends alternate 0.87 / 0.67 s apart, whose median (5 periods) is 0.67 s.
    def rank(r):
        samples = [{"phases_s": _rank(r, 0.1, fwd=0.4 if i % 2 == r else 0.2)
                    ["positions"][0]["phases_s"], "bucket_ready_s": []} for i in range(6)]
        out = _rank(r, 0.1, ready=())
        out["positions"][0]["samples"] = samples
        return out

    met = _costs([rank(0), rank(1)], comm=(), broadcast=0.0)
    met["buffer_sync"] = True
    assert simulate(met)["predicted_iter_s"] == pytest.approx(0.87)
    unmet = _costs([rank(0), rank(1)], comm=(), broadcast=0.0)
    assert simulate(unmet)["predicted_iter_s"] == pytest.approx(0.67)


def test_accumulation_synchronises_only_the_last_micro_batch():
    # k=2 on one rank. Micro-batch 1 (no_sync): 0.1 + 0.2 + 0.3 + 0.01 + 0 (no optimizer)
    # + 0.01 = 0.62. Micro-batch 2 syncs: forward ends at 0.92; bucket 0 ready at 1.02, done
    # 1.52; bucket 1 ready at 1.22, starts after bucket 0 at 1.52, done 2.02; backward returns
    # at 2.02, + 0.07: a step of 2.09 s, 1.045 s per micro-batch. (Syncing both: 2.74 s.)
    no_sync = _rank(0, 0.1, opt=0.0)["positions"][0]
    sync = _rank(0, 0.1)["positions"][0]
    costs = _costs([{"rank": 0, "positions": [no_sync, sync]}], comm=(0.5, 0.5), k=2)
    out = simulate(costs)
    assert out["predicted_step_s"] == pytest.approx(2.09)
    assert out["predicted_iter_s"] == pytest.approx(1.045)


def test_with_accumulation_only_the_first_micro_batch_meets_at_the_buffer_sync():
    # DDP syncs buffers in a forward that follows a gradient-synchronising one: with k=2 the
    # first micro-batch of each step. Ranks load in 0.1 / 0.2 s; micro-batch 1 then takes
    # 0.52 s (no optimizer), micro-batch 2 0.57 s; broadcast 0.02 s, no buckets. Step 1: met
    # at 0.22, both at 0.74; then rank 1 loads to 0.94 and ends at 1.51. Step 2 meets at
    # 1.71 + 0.02 = 1.73, ... ends at 3.02: a step of 1.51 s. (Meeting before micro-batch 2
    # too: 1.53 s.)
    def rank(r, data):
        no_sync = _rank(r, data, opt=0.0)["positions"][0]
        return {"rank": r, "positions": [no_sync, _rank(r, data)["positions"][0]]}
    costs = _costs([rank(0, 0.1), rank(1, 0.2)], comm=(), broadcast=0.02, k=2)
    assert simulate(costs)["predicted_step_s"] == pytest.approx(1.51)


def test_results_from_before_the_broadcast_split_still_give_costs():
    # comm of a component run stored before buffer_sync existed: a broadcast was timed (so
    # the ranks met), or not
    from swinkit.runs.component_costs import costs
    timeline = {"marks": [["begin", 0.0], ["forward", 0.1]], "collectives": []}
    for timed, met in ((0.001, True), (0.0, False)):
        rank = {"rank": 0, "timeline": [timeline],
                "comm": {"bucket_s": [], "broadcast_s": timed, "dtype": "float32"}}
        run = {"world_size": 1, "warmup": 0, "grad_accum": 1, "ranks": [rank],
               "bucket_sizes_bytes": [], "per_batch_s": 0.06}
        assert costs(run)["buffer_sync"] is met


def test_injected_launch_delay_on_one_rank_delays_every_bucket():
    # As the first test with rank 1's launches 0.1 s late: bucket 0 at 0.6 -> 0.65, bucket 1
    # at 0.8 -> 0.84; period 0.84 + 0.07 = 0.91.
    out = simulate(_costs([_rank(0, 0.1), _rank(1, 0.2)]), launch_delay_s={1: 0.1})
    assert out["predicted_iter_s"] == pytest.approx(0.91)


def _two_ranks_backward(compute_rate, comm_rate):
    # Two ranks begin backward at 0 for 0.4 s alone; bucket 0 is ready 0.1 s in, bucket 1 at
    # the end; their all-reduces take 0.2 and 0.1 s alone.
    ends, comm_free = overlap_backward(
        {0: 0.0, 1: 0.0}, {0: 0.4, 1: 0.4}, {0: [0.1, 0.4], 1: [0.1, 0.4]}, {0: 0.0, 1: 0.0},
        [0.2, 0.1], 0.0, compute_rate=compute_rate, comm_rate=comm_rate)
    assert ends[0] == ends[1] == pytest.approx(comm_free)
    return comm_free


def test_overlap_without_contention_hides_what_fits_in_backward():
    # bucket 0 runs 0.1-0.3 under backward, bucket 1 0.4-0.5 after it: 0.5 s (serial: 0.7).
    assert _two_ranks_backward(1.0, 1.0) == pytest.approx(0.5)


def test_overlap_at_half_speed_each_is_no_better_than_serial():
    # Both at half speed while they overlap (a saturated CPU shared by the two): from 0.1
    # bucket 0 needs 0.4 s of wall time (ends 0.5) while backward does 0.2 s of its work (at
    # 0.3); then 0.1 s alone to 0.6, bucket 1 alone 0.6-0.7: exactly the serial 0.7 s.
    assert _two_ranks_backward(0.5, 0.5) == pytest.approx(0.7)


def test_overlap_slowing_compute_only():
    # Compute at 0.8 while an all-reduce runs, the all-reduce unslowed: bucket 0 0.1-0.3,
    # backward does 0.16 s of work meanwhile (0.26 done), the last 0.14 alone to 0.44, then
    # bucket 1 0.44-0.54.
    assert _two_ranks_backward(0.8, 1.0) == pytest.approx(0.54)


def test_replay_applies_measured_contention():
    # The first replay test (0.81 s at no contention) with the all-reduces at half speed under
    # compute. Bucket 0 is ready on both at 0.5; rank 0 computes until 0.6, rank 1 until 0.7,
    # so its 0.05 s take 0.1 s: done at 0.6. Bucket 1 is ready at 0.7 (rank 1) when no rank
    # computes: 0.7-0.74. Period 0.74 + 0.07 = 0.81, unchanged: the overlap had room.
    costs = _costs([_rank(0, 0.1), _rank(1, 0.2)])
    costs["contention"] = {"compute_rate": 1.0, "comm_rate": 0.5}
    assert simulate(costs)["predicted_iter_s"] == pytest.approx(0.81)
    # Compute at half speed while an all-reduce runs: bucket 0 0.5-0.55 slows both ranks'
    # backward by 0.025 s; rank 1 ends at 0.725, bucket 1 0.725-0.765; period 0.835.
    costs["contention"] = {"compute_rate": 0.5, "comm_rate": 1.0}
    assert simulate(costs)["predicted_iter_s"] == pytest.approx(0.835)


def test_overlap_whose_all_reduces_end_before_the_compute_does():
    # One bucket ready 0.1 s into 0.4 s of backward, its all-reduce 0.1 s: done at 0.2, and
    # the compute runs on alone to 0.4 (the replay used to stop with nothing left to wait
    # for: a bucket ready before the end with no bucket after it).
    ends, comm_free = overlap_backward({0: 0.0}, {0: 0.4}, {0: [0.1]}, {0: 0.0}, [0.1], 0.0)
    assert comm_free == pytest.approx(0.2) and ends[0] == pytest.approx(0.4)


def test_contention_rates_outside_0_1_are_refused():
    with pytest.raises(ValueError, match="compute_rate"):
        overlap_backward({0: 0.0}, {0: 0.1}, {0: [0.1]}, {0: 0.0}, [0.1], 0.0, compute_rate=0)


def test_contention_rates_by_hand():
    from swinkit.measure.contention import rates
    # backward: median 0.11 s alone, 0.215 s with all-reduces beside it -> 0.11 / 0.215.
    # rounds: the first and last (9 s: they straddle the loop's start and end) are dropped;
    # the median of 0.5, 0.4, 0.6 is 0.5 against 0.25 alone -> 0.5. (Keeping them: 0.6 ->
    # 0.417; the mean of the kept three is also 0.5, the mean of all five 3.9.)
    out = rates([0.10, 0.12, 0.11], [0.2, 0.22, 0.21, 0.3], 0.25, [9, 0.5, 0.4, 0.6, 9])
    assert out["compute_rate"] == pytest.approx(0.11 / 0.215)
    assert out["comm_rate"] == pytest.approx(0.5)
    # faster beside the load is noise, not a speed-up: capped at 1; too few rounds: unknown
    out = rates([0.2], [0.1], 0.25, [9, 0.2, 0.2, 9])
    assert out["compute_rate"] == 1.0 and out["comm_rate"] is None


def test_rank_correlation_by_hand():
    # one swapped pair of four: 1 - 6 * (1 + 1) / (4 * 15) = 0.8
    assert rank_correlation([1, 2, 3, 4], [10, 30, 20, 40]) == pytest.approx(0.8)
    assert rank_correlation([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # ties get average ranks: x ranks 1.5, 1.5, 3 against 1, 2, 3 -> r = 0.866
    assert rank_correlation([1, 1, 2], [1, 2, 3]) == pytest.approx(3 ** 0.5 / 2)
    assert rank_correlation([1], [2]) is None


def test_judge_holds_only_where_the_remedy_changed_something():
    common = dict(what="", overrides={}, world_size=2, reference_iter_s=1.0,
                  predicted_reference_s=1.0, predicted_phases={"forward": 0.5},
                  measured_phases={"forward": 0.6})
    # measured 0.8 vs baseline 1.0 with noise sigma 0.02: changed; predicted 0.85 is 6.25 % off
    row = judge(name="a", predicted_iter_s=0.85, measured_iter_s=0.8, baseline_iter_s=1.0,
                noise_s=0.02, **common)
    assert row["changes_iteration"] and row["holds"]
    # weak scaling: 2 ranks doing 2 x the reference's images in the reference's 1.0 s scale
    # perfectly (1.0, not 1.0 / 2); in 0.8 s they beat it (1.25)
    assert row["efficiency_before"] == pytest.approx(1.0)    # 1.0 / 1.0
    assert row["efficiency_after"] == pytest.approx(1.25)    # 1.0 / 0.8
    # 20 % off: does not hold, and the worst phase is named
    row = judge(name="b", predicted_iter_s=0.96, measured_iter_s=0.8, baseline_iter_s=1.0,
                noise_s=0.02, **common)
    assert row["holds"] is False and row["why_not"].startswith("forward")
    # a change of 0.03 s with sigma 0.02 is under the 2-sigma floor: not judged
    row = judge(name="c", predicted_iter_s=2.0, measured_iter_s=0.97, baseline_iter_s=1.0,
                noise_s=0.02, **common)
    assert row["changes_iteration"] is False and row["holds"] is None


def test_a_miss_that_the_runs_own_launch_predicts_is_blamed_on_the_launches():
    common = dict(what="", overrides={}, world_size=2, reference_iter_s=1.0,
                  predicted_reference_s=1.0, predicted_phases={"forward": 0.5},
                  measured_phases={"forward": 0.6}, baseline_iter_s=1.0, noise_s=0.02)
    # written beforehand 0.96 against 0.8 measured: 20 % off. From the run's own launch 0.82:
    # 2.5 % off, and that launch's components ran 1.2 / 1.0 - 1 = 20 % faster
    row = judge(name="a", predicted_iter_s=0.96, measured_iter_s=0.8,
                in_launch_predicted_iter_s=0.82, components_shift=0.2, **common)
    assert row["holds"] is False
    assert row["in_launch_prediction_error"] == pytest.approx(0.025)
    assert row["why_not"] == ("launch to launch: from the run's own launch the prediction is "
                              "+2.5% off; its components ran +20% against the run's own")
    # the run's own launch misses too (0.9: 12.5 % off): the oracle, not the launches
    row = judge(name="b", predicted_iter_s=0.96, measured_iter_s=0.8,
                in_launch_predicted_iter_s=0.9, components_shift=0.05, **common)
    assert row["why_not"].startswith("forward")


def test_powersgd_payload_follows_torch_compression_rule():
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress

    from swinkit.rank.components import POWERSGD_MIN_COMPRESSION_RATE, powersgd_payload
    shapes = [[64, 32, 3, 3], [64], [2, 2], [128, 16]]
    rank = 4
    unc = p = q = 0
    for s in shapes:  # torch's own rule decides, element counts by hand
        if len(s) <= 1:
            unc += s[0]
            continue
        rows = s[0]
        cols = 1
        for d in s[1:]:
            cols *= d
        r = min(rows, cols, rank)
        if _should_compress(rows, cols, r, POWERSGD_MIN_COMPRESSION_RATE)[0]:
            p, q = p + rows * r, q + cols * r
        else:
            unc += rows * cols
    assert powersgd_payload(shapes, rank) == [n for n in (unc, p, q) if n]
    assert powersgd_payload(shapes, rank) == [64 + 4, 64 * 4 + 128 * 4, 288 * 4 + 16 * 4]


def test_catalogue_names_and_selection():
    assert len(CATALOGUE) >= 12 and set(DEFAULT) <= set(CATALOGUE)
    assert [r.name for r in select("bf16_hook,accum_2")] == ["bf16_hook", "accum_2"]
    assert len(select("all")) == len(CATALOGUE)
    with pytest.raises(ValueError, match="unknown remedy nope"):
        select("bf16_hook,nope")
    for remedy in CATALOGUE.values():  # every remedy is a valid configuration
        DDPOptions.from_dict(remedy.ddp)
        assert remedy.what and remedy.overrides()


def test_remedy_applies_to_a_spec_and_keeps_whole_steps():
    from swinkit.runs.ddp_run import DDPRunSpec
    spec = DDPRunSpec(preset="test", nproc_per_node=2, iters=9, warmup=3)
    out = CATALOGUE["accum_4"].apply(spec, preset_workers=0)
    assert (out.iters, out.warmup, out.ddp.grad_accum) == (12, 4, 4)
    out = CATALOGUE["workers_plus2"].apply(spec, preset_workers=1)
    assert out.workers == 3
    out = CATALOGUE["threads_plus1"].apply(spec, preset_workers=1)
    assert out.launch_config().threads_per_rank == 2


@pytest.mark.parametrize("options, field", [
    ({"bucket_cap_mb": 0}, "bucket_cap_mb"), ({"comm_hook": "int8"}, "comm_hook"),
    ({"grad_accum": 0}, "grad_accum"), ({"static_graph": "yes"}, "static_graph"),
    ({"bucket_mb": 5}, "unknown DDP option"),
])
def test_bad_ddp_options_name_the_field(options, field):
    with pytest.raises(ValueError, match=field):
        DDPOptions.from_dict(options)


def test_spec_rejects_partial_steps_and_hook_with_comm_injection():
    from swinkit.runs.ddp_run import DDPRunSpec
    from swinkit.injection import Injection
    with pytest.raises(ValueError, match="multiples of grad_accum"):
        DDPRunSpec(preset="test", nproc_per_node=1, iters=5, warmup=2,
                   ddp=DDPOptions(grad_accum=2)).validate()
    with pytest.raises(ValueError, match="comm_hook bf16 cannot be combined"):
        DDPRunSpec(preset="test", nproc_per_node=1, ddp=DDPOptions(comm_hook="bf16"),
                   injection=Injection(comm_ms=5)).validate()
    # PowerSGD's first two optimizer steps send uncompressed gradients: 2 steps of k=2 are 4
    # warm-up iterations; 2 would measure an uncompressed step
    with pytest.raises(ValueError, match=r"warmup \(2\) must be at least 2 x grad_accum \(4\)"):
        DDPRunSpec(preset="test", nproc_per_node=1, iters=4, warmup=2,
                   ddp=DDPOptions(comm_hook="powersgd", grad_accum=2)).validate()
    DDPRunSpec(preset="test", nproc_per_node=1, iters=4, warmup=4,
               ddp=DDPOptions(comm_hook="powersgd", grad_accum=2)).validate()


@pytest.mark.slow
def test_accumulation_all_reduces_once_per_optimizer_step(tmp_path):
    """grad_accum=2 at N=2: only every second micro-batch has gradient buckets on the
    timeline, and each such micro-batch reduces every gradient byte once."""
    from swinkit.runs.ddp_run import DDPRunSpec, run_ddp
    out = run_ddp(DDPRunSpec(preset="test", nproc_per_node=2, iters=4, warmup=2,
                             ddp=DDPOptions(grad_accum=2)))
    for rank in out["ranks"]:
        its = rank["timeline"][2:]
        buckets = [[c for c in it["collectives"] if c["name"].startswith("bucket")] for it in its]
        assert [bool(b) for b in buckets] == [False, True, False, True]
        for b in buckets[1::2]:
            assert sum(c["bytes"] for c in b) == sum(rank["bucket_sizes_bytes"])
    assert out["grad_accum"] == 2 and out["step_s"] == pytest.approx(2 * out["per_batch_s"])


@pytest.mark.slow
def test_one_remedy_predicted_then_run_end_to_end(tmp_path):
    """bf16_hook at N=1 and 2: the predictions are on disk before the runs, and each row has
    both numbers and the efficiencies."""
    from swinkit.experiments.whatif_run import what_if
    path = tmp_path / "pred.json"
    seen = []

    def progress(line):
        if line.startswith("[run 1/"):
            seen.append(path.exists())  # the first remedy run starts after the file is there
    out = what_if("test", [1, 2], [CATALOGUE["bf16_hook"]], iters=4, warmup=2,
                  predictions_path=path, progress=progress)
    assert seen == [True]
    written = json.loads(path.read_text())["predictions"]
    assert {(p["name"], p["world_size"]) for p in written} == {
        ("baseline", 1), ("baseline", 2), ("bf16_hook", 1), ("bf16_hook", 2)}
    rows = {(r["name"], r["world_size"]): r for r in out["what_if"]}
    assert set(rows) == {(p["name"], p["world_size"]) for p in written}
    for row in rows.values():
        assert row["predicted_iter_s"] > 0 and row["measured_iter_s"] > 0
        # each run was paired: predicted again from its own launch's components
        assert row["in_launch_predicted_iter_s"] > 0 and row["components_shift"] is not None
        assert row["overrides"] == ({} if row["name"] == "baseline" else {"ddp.comm_hook": "bf16"})
    # the baseline at its smallest world size is the efficiency reference: 1 by definition
    assert rows[("baseline", 1)]["efficiency_before"] == pytest.approx(1.0)
    assert set(out["what_if_rank_correlation"]) == {"1", "2"}


@pytest.mark.slow
def test_components_measure_contention_beside_the_local_loop(no_orphans):
    """At N=2 the component run times backward with the bucket all-reduces beside it and the
    all-reduces beside backward; the extra iterations stay out of the local run's results."""
    from swinkit.runs.component_costs import costs
    from swinkit.runs.ddp_run import DDPRunSpec, run_ddp
    out = run_ddp(DDPRunSpec(preset="test", nproc_per_node=2, iters=3, warmup=1, local=True))
    for rank in out["ranks"]:
        c = rank["contention"]
        assert len(rank["timeline"]) == 4 and len(rank["loss"]) == 3
        assert len(c["rounds_loaded_s"]) >= 5 and c["round_alone_s"] > 0
        assert 0 < c["compute_rate"] <= 1 and 0 < c["comm_rate"] <= 1
        # the contention loop's iterations stay out of the local run: its last measured
        # iteration's tail is an ordinary one, not the load's set-up and start
        others = [it["marks"][-1][1] - it["marks"][-2][1] for it in rank["timeline"]]
        assert others[-1] <= 3 * max(others[:-1]) + 0.005, others
    assert set(costs(out)["contention"]) == {"compute_rate", "comm_rate"}


def test_paired_plan_alternates_whole_optimizer_steps_and_lines_up_between_kinds():
    """The plan of a paired launch (the schedule of step kinds is a value now,
    :class:`~swinkit.rank.plan.StepPlan`): warm-up 2 DDP iterations, then steps of k=2
    alternating, 4 iterations of each kind; the index counts its own kind, so the second
    micro-batch of each step (odd index) syncs. The ranks line up before every measured
    optimizer step of either kind, never inside one, never in the warm-up."""
    from swinkit.rank.plan import DDP, LOCAL, StepPlan
    plan = StepPlan.paired(2, 4, 2)
    assert plan.kinds() == [
        ("ddp", 0), ("ddp", 1), ("ddp", 2), ("ddp", 3), ("local", 0), ("local", 1),
        ("ddp", 4), ("ddp", 5), ("local", 2), ("local", 3)]
    assert sorted(plan.line_up) == [2, 4, 6, 8]
    assert (plan.main, plan.apart) == ("ddp", ("local",))
    assert StepPlan.paired(1, 2, 1).kinds() == [("ddp", 0), ("ddp", 1), ("local", 0),
                                                ("ddp", 2), ("local", 1)]
    # a plain run: one kind, nothing lined up or read apart; a component run: all local
    plain = StepPlan.plain(1, 2)
    assert plain.kinds() == [("ddp", 0), ("ddp", 1), ("ddp", 2)]
    assert (plain.line_up, plain.apart) == (frozenset(), ())
    local = StepPlan.plain(1, 2, LOCAL)
    assert {k.name for k, _ in local.steps} == {"local"} and local.main == "local"
    # what each kind switches: local steps over the group of one, meeting where DDP would
    assert (DDP.local, DDP.meets, LOCAL.local, LOCAL.meets) == (False, False, True, True)
    # every measured local step follows a DDP step, in which every rank ran the model
    kinds = StepPlan.paired(1, 7, 1).kinds()
    assert {kinds[n - 1][0] for n, (k, _) in enumerate(kinds) if k == "local"} == {"ddp"}


def test_building_the_stand_in_leaves_the_global_random_stream_alone():
    """The timing launch builds the stand-in with its own generator: torch's global random
    stream draws what it would have drawn without it."""
    import torch

    from swinkit.predict.rank.stand_in import swin_block_work
    torch.manual_seed(1)
    without = torch.rand(3)
    torch.manual_seed(1)
    swin_block_work(images=1)
    assert torch.equal(torch.rand(3), without)


def test_time_between_end_and_begin_belongs_to_no_iteration():
    from swinkit.measure.timeline import Timeline, phase_durations

    class Clock:  # reads 0, 1, 2, ... seconds
        name, t = "fake", -1.0

        def now(self):
            self.t += 1.0
            return self.t

        def seconds(self, mark, near=None):
            return mark

        def finish(self):
            pass
    tl = Timeline(Clock())
    tl.begin()             # 0
    tl.mark("forward")     # 1
    tl.end()               # 2: other 1 s
    tl.clock.now()         # 3: a barrier, say: in no iteration
    tl.clock.now()         # 4
    tl.begin()             # 5
    tl.mark("backward")    # 6
    tl.end()               # 7
    first, second = (phase_durations(it) for it in tl.resolve())
    assert (first["forward"], first["other"], sum(first.values())) == (1.0, 1.0, 2.0)
    assert (second["backward"], second["other"], sum(second.values())) == (1.0, 1.0, 2.0)


@pytest.mark.slow
def test_paired_run_measures_ddp_and_its_components_in_one_launch(no_orphans):
    """DDP and local optimizer steps alternate in one launch: the result is the DDP
    iterations' (their buffer broadcast and real bucket all-reduces), the local ones (the
    broadcast over the rank's group of one) come back as a component run the oracle predicts
    from."""
    import torch

    from swinkit.rank.components import module_buffers
    from swinkit.runs.component_costs import predict_from
    from swinkit.runs.ddp_run import DDPRunSpec, run_ddp
    spec = DDPRunSpec(preset="test", nproc_per_node=2, iters=4, warmup=2, paired=True)
    out = run_ddp(spec)
    for rank in out["ranks"]:
        assert len(rank["timeline"]) == 6 and len(rank["loss"]) == 4
        assert len(rank["local"]["timeline"]) == 4 and len(rank["local"]["iteration"]) == 4
        # the barriers between the kinds are in no iteration, by either clock. A barrier left
        # in would show in each of the 4 DDP steps that follow a kind change; one iteration
        # apart is the host preempting the rank between the loop's clock read and the
        # timeline's first mark (once 3.9 ms on a loaded 2-core CI host), so one may differ
        apart = [(t, loop) for t, loop in zip(rank["iteration"], rank["loop_iteration"])
                 if t != pytest.approx(loop, abs=0.003, rel=0.02)]
        assert len(apart) <= 1, apart
        names = [[c["name"] for c in it["collectives"]] for it in rank["timeline"]]
        local_names = [[c["name"] for c in it["collectives"]] for it in rank["local"]["timeline"]]
        assert all("buffers" in n for n in names)             # the test preset has BN buffers
        # DDP's buffer sync runs in the local steps too, over the rank's group of one
        assert all("buffers" in n for n in local_names)
        assert all(any(x.startswith("bucket") for x in n) for n in local_names)
        # the local steps meet where DDP would hold the ranks; DDP steps meet through DDP
        assert all(n.count("meet") == 2 for n in local_names)
        assert not any("meet" in n for n in names)
        assert 0 < rank["contention"]["compute_rate"] <= 1
        # the broadcast is timed on tensors shaped as the module's buffers, all of its bytes
        buffers = module_buffers(rank, torch.device("cpu"))
        assert sum(b.numel() * b.element_size() for b in buffers) == rank["buffer_bytes"]
        assert {b.dtype for b in buffers} == {torch.float32, torch.int64}  # BN stats, counters
        comm = rank["comm"]
        assert comm["buffer_sync"] and comm["broadcast_world_s"] > 0 and comm["broadcast_alone_s"] > 0
    assert out["local_run"]["warmup"] == 0 and len(out["local_run"]["ranks"]) == 2
    pred = predict_from(out["local_run"], spec)
    assert pred["predicted_iter_s"] > 0 and pred["contention"]
    with pytest.raises(ValueError, match="paired"):
        DDPRunSpec(preset="test", local=True, paired=True).validate()


@pytest.mark.slow
def test_an_injection_reaches_both_kinds_of_step_of_a_paired_launch(no_orphans):
    """A paired launch of 2 with a forward delay on rank 0: the delay reaches its DDP steps
    and its local steps alike (each kind's read-out files what was injected in its own
    steps), never rank 1's; each rank's per-iteration clocks are those of a paired run (the
    barriers between kinds in no iteration)."""
    from swinkit.injection import Injection
    from swinkit.runs.ddp_run import DDPRunSpec, run_ddp
    spec = DDPRunSpec(preset="test", nproc_per_node=2, iters=4, warmup=2, paired=True,
                      injection=Injection(compute_ms=30, ranks=(0,)))
    out = run_ddp(spec)
    zero, one = out["ranks"]
    for rank in (zero, one):
        assert len(rank["timeline"]) == 6 and len(rank["local"]["iteration"]) == 4
        for timeline_s, loop_s in zip(rank["iteration"], rank["loop_iteration"]):
            assert timeline_s == pytest.approx(loop_s, abs=0.003, rel=0.02)
    assert zero["injected_s"]["compute"] == pytest.approx([0.03] * 4, rel=0.5)
    assert zero["local"]["injected_s"]["compute"] == pytest.approx([0.03] * 4, rel=0.5)
    assert "compute" not in one["injected_s"] and "compute" not in one["local"]["injected_s"]


def test_replay_pairs_iterations_so_alternating_stragglers_cost_the_slow_one():
    """Rank 0 loads in 0.1, 0.3, 0.1, ... s and rank 1 in 0.3, 0.1, 0.3, ...: each has a median
    of 0.2, but in every iteration one of them is 0.3 late and the other waits for it. Replayed
    iteration by iteration the period is the first test's with 0.3 s loading: bucket 1 done
    at 0.3 + 0.2 + 0.3 + 0.04 = 0.84, + 0.07 = 0.91 s. From the medians alone it would be 0.81."""
    def rank(r, loads):
        base = _rank(r, 0.2)
        pos = base["positions"][0]
        pos["samples"] = [{"phases_s": {**pos["phases_s"], "data_wait": d},
                           "bucket_ready_s": pos["bucket_ready_s"]} for d in loads]
        return base
    fast_slow = [0.1, 0.3] * 4
    out = simulate(_costs([rank(0, fast_slow), rank(1, fast_slow[1:] + [0.1])]))
    assert out["predicted_iter_s"] == pytest.approx(0.91)
    medians = _costs([_rank(0, 0.2), _rank(1, 0.2)])
    assert simulate(medians)["predicted_iter_s"] == pytest.approx(0.81)


def test_remedies_run_only_where_asked_and_the_baseline_everywhere(monkeypatch):
    """remedy_world_sizes=[2]: bf16_hook is predicted and run at N=2 only, the baseline at 1
    and 2 (N=1 stays the efficiency reference). The components and DDP runs are stand-ins that
    record which (hook, world size) they were given."""
    from swinkit.experiments import whatif_run
    calls = []

    def fake_run(spec, progress=print):
        calls.append(("run", spec.ddp.comm_hook, spec.world_size))
        assert spec.paired  # each run measures its own components too
        return {"per_batch_s": 1.0 + spec.world_size / 10, "phases_s": {}, "iteration_stats": {},
                "local_run": {"world_size": spec.world_size}}

    def fake_predict(spec, progress=print):
        calls.append(("predict", spec.ddp.comm_hook, spec.world_size))
        return {"predicted_iter_s": 1.0 + spec.world_size / 10, "components_s": {},
                "local_iter_s": 1.0}

    def fake_predict_from(local_run, spec):  # from the run's own launch: 10 % high
        assert local_run == {"world_size": spec.world_size}
        return {"predicted_iter_s": 1.1 * (1.0 + spec.world_size / 10), "local_iter_s": 0.8}
    monkeypatch.setattr(whatif_run, "run_ddp", fake_run)
    monkeypatch.setattr(whatif_run, "predict_run", fake_predict)
    monkeypatch.setattr(whatif_run, "predict_from", fake_predict_from)
    out = whatif_run.what_if("test", [1, 2], [CATALOGUE["bf16_hook"]], iters=2, warmup=1,
                             progress=lambda line: None, remedy_world_sizes=[2])
    expected = {(None, 1), (None, 2), ("bf16", 2)}
    assert {(h, ws) for kind, h, ws in calls if kind == "predict"} == expected
    assert {(h, ws) for kind, h, ws in calls if kind == "run"} == expected
    # every prediction is made before the first run (the prediction cannot peek)
    kinds = [kind for kind, _, _ in calls]
    assert kinds == ["predict"] * 3 + ["run"] * 3
    assert {(r["name"], r["world_size"]) for r in out["what_if"]} == {
        ("baseline", 1), ("baseline", 2), ("bf16_hook", 2)}
    # weak-scaling efficiency against the baseline at N=1 (1.1 s): 2 x 2 images / (2 x 1.2 s)
    # per rank over 2 images / 1.1 s
    row = next(r for r in out["what_if"] if r["name"] == "bf16_hook")
    assert row["efficiency_after"] == pytest.approx(1.1 / 1.2)
    assert row["in_launch_prediction_error"] == pytest.approx(0.1)
    assert row["components_shift"] == pytest.approx(1.0 / 0.8 - 1)
