"""The instrumented DDP iteration on the test preset (CPU, gloo): timeline, blame, injections.

Ground truth: each injection adds a known cost to one component. Its expected size is stated
from the injection alone (``data_ms`` x images per rank; ``compute_ms`` once per forward;
``comm_ms`` once per iteration, since every bucket's launch moves by the same amount and the
last one is exposed), and blame must put the added time in that component. Every comparison is
between runs of one test (a baseline and an injected run), never a wall time against a constant.
"""
import json
import warnings

import pytest
import torch
from conftest import ForeignLoad

from swinkit.cli import main
from swinkit.launch import LaunchConfig, launch
from swinkit.measure.phases import BLAME_KEYS, PHASES
from swinkit.runs.ddp_run import DDPRunSpec, run_ddp
from swinkit.injection import Injection, parse_injection

pytestmark = pytest.mark.slow

CUDA = torch.cuda.is_available()  # the assertions below hold on a GPU machine too
IMAGES_PER_RANK = 2            # the test preset's
DELAY_S = 0.120
# The test preset's 2.6 MB of gradients become ~300 MB per step. On CPU, gloo's copies take
# cycles from backward compute on the same cores (real contention, bounded by backward's
# length): K is large enough that the transfer, not that contention, dominates the added time.
COMM_SCALE = 120
GROUND_TRUTH = {  # kind: (injection, blame key, expected added seconds; None: not deterministic)
    "data": (dict(data_ms=1e3 * DELAY_S / IMAGES_PER_RANK), "data_wait", DELAY_S),
    "compute": (dict(compute_ms=1e3 * DELAY_S), "forward", DELAY_S),
    "comm": (dict(comm_ms=1e3 * DELAY_S), "exposed_comm", DELAY_S),
    "comm_scale": (dict(comm_scale=COMM_SCALE), "exposed_comm", None),
}


def _run(data_root, world_size, injection=Injection(), iters=8, **kw):
    spec = DDPRunSpec(preset="test", nproc_per_node=world_size, iters=iters, warmup=2, workers=0,
                      injection=injection, data_root=str(data_root), **kw)
    return run_ddp(spec, progress=lambda s: None)


@pytest.fixture(scope="module")
def baselines(data_root):
    return {ws: _run(data_root, ws) for ws in (1, 2)}


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [1, 2])
def test_timeline_agrees_with_an_independent_loop_clock(baselines, world_size):
    """The timeline's iterations (sum of phases between its marks) against one perf_counter
    read per loop turn, taken outside the timeline: the same iterations, to within the cost of
    the heartbeat file write that sits between the two clocks' reads."""
    r = baselines[world_size]
    assert r["world_size"] == world_size
    # what the launcher must pick on this machine: NCCL on GPUs (one per rank), gloo on CPU
    assert (r["backend"], r["device"].split(":")[0]) == (("nccl", "cuda") if CUDA else ("gloo", "cpu"))
    for rank in r["ranks"]:
        assert len(rank["iteration"]) == len(rank["loop_iteration"]) == 8
        for timeline_s, loop_s in zip(rank["iteration"], rank["loop_iteration"]):
            assert timeline_s == pytest.approx(loop_s, abs=0.003, rel=0.02)
    assert all(r["phases_s"][p] > 0 for p in ("data_wait", "forward", "backward", "optimizer"))


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [1, 2])
def test_ddp_reducer_timers_agree_with_ours(baselines, world_size):
    check = baselines[world_size]["ddp_cross_check"]["backward_total"]
    assert check["n"] >= 7
    assert check["disagreement"] <= 0.10, check


@pytest.mark.slow
def test_healthy_run_blame_is_nearly_all_attributed_and_residual_shown(baselines):
    r = baselines[2]
    assert set(r["blame_s"]) == set(BLAME_KEYS)
    assert r["blame_s"]["unattributed"] <= 0.05 * r["iter_s"], r["blame_s"]
    # the residual is the median iteration minus the sum of the blame medians: not 0 by
    # construction, but small when the medians describe the same iterations
    assert r["residual_s"] == pytest.approx(r["iter_s"] - sum(r["blame_s"].values()))
    assert abs(r["residual_s"]) <= 0.10 * r["iter_s"]
    # the collectives a DDP iteration enters on every rank: the buffer broadcast, each bucket
    # and the final gradient sync
    names = [c["name"] for c in r["ranks"][0]["timeline"][-1]["collectives"]]
    assert names[0] == "buffers" and names[-1] == "grad_sync"
    buckets = [n for n in names if n.startswith("bucket")]
    assert len(buckets) == len(r["bucket_sizes_bytes"])


@pytest.mark.slow
def test_result_records_buckets_clock_and_utilisation(baselines):
    r = baselines[2]
    assert sum(r["bucket_sizes_bytes"]) > 0
    assert set(r["utilisation"]) == {"0", "1"}
    assert r["utilisation"]["0"]["cpu"]["cpu_seconds"] > 0
    # NVML's samples on a GPU machine; recorded as null where there is no GPU
    assert (r["utilisation"]["0"]["gpu"] is not None) == CUDA
    assert r["environment"]["torch"] == torch.__version__   # the torch this environment has
    clock = r["clock"]
    assert clock["same_host"] and clock["offsets_applied_s"] == [0.0, 0.0]
    # one host shares one monotonic clock: the ping-pong estimate must find ~0 within its bound
    assert abs(clock["offsets_estimated_s"][1]) <= clock["offset_error_s"] + 1e-4


@pytest.mark.slow
def test_clock_offset_estimate_finds_a_known_skew(no_orphans):
    """Rank 1's clock shifted by +0.25 s: the ping-pong estimate recovers +0.25 within its
    error bound (a sign or half-trip mistake would miss it by far more)."""
    out = launch("swinkit.rank.selftest:clock_offset_check", {"skew_s": 0.25},
                 LaunchConfig(nproc_per_node=2, wall_timeout_s=120), quiet=True).result["ranks"][0]
    assert out["offset_s"][0] == 0.0
    assert out["offset_s"][1] == pytest.approx(0.25, abs=out["error_s"][1] + 1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [None, (1,)], ids=["all-ranks", "rank-1"])
@pytest.mark.parametrize("kind", sorted(GROUND_TRUTH))
def test_ground_truth_injection_is_blamed_on_its_component(data_root, kind, ranks):
    """One run with the injection on every other iteration (``every=2``): each injected
    iteration against its clean neighbours, so a busy machine's drift cancels (two separate
    launches differ by several percent here). Blame must hold >= 85 % of the added time in the
    injected component, recover a deterministic injection's size within 20 %, and a one-rank
    injection must name that rank and that component as the straggler. The amount is held
    only when no other process competes for the cores: there, a rank that waits frees a core
    for the others and the injection costs less, as it would on any shared machine."""
    values, key, expected = GROUND_TRUTH[kind]
    with ForeignLoad() as load:
        hit = _run(data_root, 2, Injection(**values, ranks=ranks, every=2), iters=10)
    idle = load.cores <= 0.05   # NaN (unreadable) counts as busy
    assert hit.get("injection_effect") is not None, "no injected iteration had a clean neighbour"
    # what a failure needs to be read: every iteration's time and flags, per rank
    paired = {**hit["injection_effect"], "foreign_cores": load.cores,
              "iterations_ms": {r["rank"]: [round(1e3 * t) for t in r["iteration"]]
                                for r in hit["ranks"]},
              "injected": hit["ranks"][-1]["injected"]}
    added, growth = paired["added_iter_s"], paired["growth_s"]
    assert paired["pairs"] >= 8   # 5 injected iterations of 10, each against 1 or 2 neighbours
    assert added > 0.03, (kind, paired)                       # the injection acted
    # comm_scale moves 120 x the gradient bytes through gloo's copies, which occupy the same
    # two cores as compute: a little of its cost shows as slower compute on the injected
    # iterations (83 % measured once in a full suite run), so its floor is lower
    floor = 0.75 if kind == "comm_scale" else 0.85
    assert growth[key] >= floor * added, paired
    assert key == max(growth, key=growth.get), paired        # and it is the largest grower
    if expected is not None and idle:                         # deterministic: the amount too
        assert growth[key] == pytest.approx(expected, rel=0.20), paired
        # the iteration itself may grow by less: while one rank spins or sleeps, the waiting
        # rank's core serves the others' background work (loader, gloo, the test runner), which
        # the clean neighbours pay for instead. (Two full CI runs measured +88 ms and +39 ms
        # for 120 ms on one rank while blame found ~120 ms in the component: the estimator then
        # averaged each injected iteration's two neighbours, so two slow clean iterations
        # spoiled four of five pairs; see the paired-effect unit test.)
        assert 0.6 * expected <= added <= 1.2 * expected, paired
    elif expected is not None:
        warnings.warn(f"{kind}: another process competes for the cores; the injected amount "
                      f"({expected} s, recovered {growth[key]:.4f} s) is not checked")
    straggler = hit["straggler"]
    if ranks and kind != "comm_scale":
        assert (straggler["rank"], straggler["phase"]) == (1, key), straggler
        # waits happen on injected iterations only: half of them
        assert straggler["wait_caused_s"] >= 0.7 * (expected if idle else added) / 2, straggler
    elif kind == "comm_scale":
        # a collective runs at its slowest link's pace: the cost is every rank's transfer and
        # nobody arrives late, so no rank may be blamed for it (ordinary jitter between ranks
        # still makes small waits in compute phases: those are not the injection's). On two
        # shared CPU cores gloo's copy threads and the ranks' compute take turns, so a rank
        # now and then reaches the next collective late from exposed_comm: 18 % of the added
        # time once in a full CI run (7 of 7 alone under 15 %). A blame that charged the
        # transfer to a rank would charge most of it, which 25 % still catches.
        caused = (straggler.get("by_phase") or {}).get("exposed_comm", 0.0)
        assert caused <= 0.25 * added, straggler


@pytest.mark.slow
def test_comm_scale_adds_what_the_isolated_allreduce_says(data_root, no_orphans):
    """comm_scale=K moves K times each bucket's bytes: the added exposed transfer is about the
    isolated all-reduce of (K-1) x the buckets at 2 ranks (measured here, in the same test),
    less what backward hides (little on the test preset), plus the copies into the K-times
    buffer that share the two cores with backward. Measured on an idle host: 0.77-1.16 x the
    isolated figure (9 runs, K = 60 and 120).

    The upper bound is held only when no other process competes for the cores, as in the
    ground-truth test above. In one full suite run and two runs alone right after it the growth
    came to 0.265-0.275 s against 0.155-0.158 s isolated; the host's load then was not recorded.
    A foreign load slows the DDP run, where the transfer shares the cores with backward, more
    than the bare all-reduce, so such runs now say how busy the host was and only warn. The lower bound holds on any host: an
    injection that did not scale the bytes would add almost nothing."""
    with ForeignLoad() as load:
        hit = _run(data_root, 2, Injection(comm_scale=COMM_SCALE, every=2), iters=10)
        elems = [b // 4 for b in hit["bucket_sizes_bytes"]]
        extra = [int(e * (COMM_SCALE - 1)) for e in elems]
        iso = launch("swinkit.components.allreduce:allreduce_rank",
                     dict(samples=5, layouts=["preset_buckets"], dtypes=["fp32"], bare_iters=1,
                          sizes={"preset_buckets": extra, "segmentor_flat": [sum(extra)]}),
                     LaunchConfig(nproc_per_node=2, wall_timeout_s=300), quiet=True).result["ranks"][0]
    import statistics
    isolated = statistics.median(iso["times"]["preset_buckets/fp32"])
    growth = hit["injection_effect"]["growth_s"]["exposed_comm"]
    seen = (growth, isolated, f"foreign cores {load.cores:.2f}")
    assert growth >= 0.5 * isolated, seen
    if load.cores <= 0.05:   # NaN (unreadable) counts as busy
        assert growth <= 1.3 * isolated, seen
    elif growth > 1.3 * isolated:
        warnings.warn(f"comm_scale: another process competes for the cores; growth {growth:.3f} s "
                      f"against {isolated:.3f} s isolated is not bounded above")


def test_one_rank_injection_applies_only_where_the_rank_exists():
    inj = Injection(data_ms=5, ranks=(1,))
    assert not inj.for_world_size(1).active
    assert inj.for_world_size(2) == inj
    assert Injection(data_ms=5, ranks=(1, 3)).for_world_size(2).ranks == (1,)


@pytest.mark.parametrize("spec, message", [
    ("data_ms=-1", "data_ms must be >= 0"), ("compute_ms=abc", "compute_ms must be a number"),
    ("comm_scale=0.5", "comm_scale must be >= 1"),
    ("latency=3", "no field 'latency'"), ("ranks=a", "ranks must be rank numbers"),
    ("data_ms", "key=value")])
def test_bad_inject_spec_names_the_field(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_injection(spec)


def test_inject_spec_parses():
    assert parse_injection("comm_ms=2.5,ranks=1+3") == Injection(comm_ms=2.5, ranks=(1, 3))
    assert parse_injection("comm_scale=4").comm_scale == 4
    assert not parse_injection(None).active


@pytest.mark.parametrize("argv, message", [
    (["--world-size", "0"], "--world-size must be an integer >= 1, got 0"),
    (["--workers", "-1"], "workers must be an integer >= 0, got -1"),
    (["--inject", "ranks=5"], "--inject ranks [5] do not exist at world size 2"),
    (["--backend", "nccl"], "nccl needs CUDA"),
])
def test_ddp_cli_rejects_bad_config_before_starting(capsys, argv, message, tmp_path):
    import torch
    if "nccl" in argv and torch.cuda.is_available():
        pytest.skip("CUDA present")
    assert main(["ddp", "--preset", "test", *argv, "--json", str(tmp_path / "r.json")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_ddp_cli_prints_phases_and_blame_and_writes_json_and_trace(capsys, data_root, tmp_path,
                                                                    no_orphans):
    out, trace = tmp_path / "r.json", tmp_path / "timeline.json"
    assert main(["ddp", "--preset", "test", "--world-size", "2", "--iters", "4", "--warmup", "1",
                 "--data-root", str(data_root), "--json", str(out), "--timeline", str(trace),
                 "--inject", "data_ms=30,ranks=1"]) == 0
    text = capsys.readouterr().out
    for key in BLAME_KEYS:
        assert key in text
    assert "straggler: rank 1, late from data_wait" in text
    r = json.loads(out.read_text())
    for key in ("world_size", "backend", "device", "preset", "iterations", "ranks", "phases_s",
                "iter_s", "skew_s", "utilisation", "bucket_sizes_bytes", "ddp_cross_check",
                "blame_s", "sync_wait_s", "transfer_s", "straggler", "residual_s", "clock"):
        assert key in r
    assert set(r["straggler"]) >= {"rank", "phase", "wait_caused_s"}
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["pid"] for e in events} == {0, 1}
    assert {e["name"] for e in events if e.get("tid") == 0 and e["ph"] == "X"} == set(PHASES)
