"""The instrumented DDP iteration on the test preset (CPU, gloo): phases, cross-check, injection.

Every assertion compares quantities measured in the same run or between two runs of the same
configuration (a known injected delay), never a wall time against a constant.
"""
import json

import pytest

from swinkit.attribution.loss_split import Measured, split_loss
from swinkit.cli import main
from swinkit.measure.phases import PHASES
from swinkit.workloads.ddp_run import DDPRunSpec, run_ddp
from swinkit.workloads.inject import Injection, parse_injection

DELAY_MS = 150.0
INJECTIONS = {  # kind: (injection, phase that must receive the added time)
    "data": (Injection(data_ms=DELAY_MS / 2), "data_wait"),   # 2 images per rank
    "compute": (Injection(compute_ms=DELAY_MS), "forward"),
    "comm": (Injection(comm_ms=DELAY_MS / 2), "exposed_comm"),  # 2 gradient buckets
}


def _run(data_root, world_size, injection=Injection(), iters=6):
    spec = DDPRunSpec(preset="test", world_size=world_size, iters=iters, warmup=2, workers=0,
                      injection=injection, data_root=str(data_root))
    return run_ddp(spec, progress=lambda s: None)


@pytest.fixture(scope="module")
def baselines(data_root):
    return {ws: _run(data_root, ws) for ws in (1, 2)}


@pytest.mark.parametrize("world_size", [1, 2])
def test_phases_add_up_and_residual_is_small(baselines, world_size):
    r = baselines[world_size]
    assert r["world_size"] == world_size and r["backend"] == "gloo" and r["device"] == "cpu"
    for rank in r["ranks"]:
        for i, total in enumerate(rank["iteration"]):
            parts = sum(rank["phases"][p][i] for p in PHASES)
            assert parts == pytest.approx(total, rel=1e-9)
    assert sum(r["phases_s"].values()) == pytest.approx(r["iter_s"], rel=0.05)
    assert r["phases_s"]["other"] <= 0.05 * r["iter_s"]
    assert all(r["phases_s"][p] > 0 for p in ("data_wait", "forward", "backward", "optimizer"))


@pytest.mark.parametrize("world_size", [1, 2])
def test_ddp_reducer_timers_agree_with_ours(baselines, world_size):
    check = baselines[world_size]["ddp_cross_check"]["backward_total"]
    assert check["n"] >= 5
    assert check["disagreement"] <= 0.10, check


def test_result_records_buckets_environment_and_utilisation(baselines):
    r = baselines[2]
    assert sum(r["bucket_sizes_bytes"]) > 0
    assert set(r["utilisation"]) == {"0", "1"}
    assert r["utilisation"]["0"]["cpu"]["cpu_seconds"] > 0
    assert r["utilisation"]["0"]["gpu"] is None  # no GPU here: recorded as null
    assert r["environment"]["torch"].startswith("2.13")
    assert all(len(rank["loss"]) == 6 for rank in r["ranks"])


@pytest.mark.parametrize("world_size", [1, 2])
@pytest.mark.parametrize("kind", sorted(INJECTIONS))
def test_injected_delay_lands_in_its_phase(data_root, baselines, world_size, kind):
    injection, phase = INJECTIONS[kind]
    base, hit = baselines[world_size], _run(data_root, world_size, injection)
    added = hit["iter_s"] - base["iter_s"]
    # the delay acted (gloo may run the two buckets' delayed callbacks side by side, so the
    # comm kind can add as little as one bucket's delay: DELAY_MS / 2)
    assert added > 0.25 * DELAY_MS / 1e3, (kind, added)
    in_phase = hit["phases_s"][phase] - base["phases_s"][phase]
    assert in_phase >= 0.85 * added, {p: hit["phases_s"][p] - base["phases_s"][p] for p in PHASES}
    # the attribution gives that component >= 85 % of the lost time, shares adding to 100
    split = split_loss(_measured(base), _measured(hit))
    assert split["shares_pct"][phase] >= 85, split["shares_pct"]
    assert sum(split["shares_pct"].values()) == pytest.approx(100.0)


def _measured(result):
    return Measured(result["world_size"], result["iter_s"], dict(result["phases_s"]))


def test_straggler_shows_up_as_skew_and_is_named(data_root, baselines):
    r = _run(data_root, 2, Injection(compute_ms=DELAY_MS, ranks=(1,)))
    assert r["straggler"]["rank"] == 1
    assert r["skew_s"]["forward"] >= 0.85 * DELAY_MS / 1e3
    # the healthy rank waits for the straggler in the all-reduce
    per_rank = r["per_rank_phases_s"]
    assert per_rank["0"]["exposed_comm"] - per_rank["1"]["exposed_comm"] >= 0.5 * DELAY_MS / 1e3


@pytest.mark.parametrize("spec, message", [
    ("data_ms=-1", "data_ms must be >= 0"), ("compute_ms=abc", "compute_ms must be a number"),
    ("latency=3", "no field 'latency'"), ("ranks=a", "ranks must be rank numbers"),
    ("data_ms", "key=value")])
def test_bad_inject_spec_names_the_field(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_injection(spec)


def test_inject_spec_parses():
    assert parse_injection("comm_ms=2.5,ranks=1+3") == Injection(comm_ms=2.5, ranks=(1, 3))
    assert not parse_injection(None).active


@pytest.mark.parametrize("argv, message", [
    (["--world-size", "0"], "world_size must be an integer >= 1, got 0"),
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


def test_ddp_cli_prints_table_and_writes_json(capsys, data_root, tmp_path, no_orphans):
    out = tmp_path / "r.json"
    assert main(["ddp", "--preset", "test", "--world-size", "2", "--iters", "4", "--warmup", "1",
                 "--data-root", str(data_root), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    for phase in PHASES:
        assert phase in text
    r = json.loads(out.read_text())
    for key in ("world_size", "backend", "device", "preset", "iterations", "ranks", "phases_s",
                "iter_s", "skew_s", "utilisation", "bucket_sizes_bytes", "ddp_cross_check"):
        assert key in r
