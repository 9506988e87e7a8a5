"""Scaling arithmetic, the loss split, prediction and recommendations (numbers only)."""
import math

import pytest

from swinkit.attribution import scaling
from swinkit.attribution.analysis import analyse
from swinkit.attribution.headroom import loader_headroom
from swinkit.attribution.loss_split import COMPONENTS, Measured, scaling_rows, split_loss
from swinkit.attribution.inputs import Inputs
from swinkit.attribution.prediction import Isolated, predict, prediction_error
from swinkit.attribution.thesis import THESIS_SPEEDUPS


def _m(ws, **phases):
    comps = {c: phases.get(c, 0.0) for c in COMPONENTS}
    return Measured(ws, sum(comps.values()), comps)


def test_thesis_speedups_reproduce_its_efficiencies():
    """Per-iteration times built from the thesis's speedups give back S(N) and E(N) = S/N:
    all platforms below 0.5 at 4 GPUs, as the thesis reports."""
    for platform, speedups in THESIS_SPEEDUPS.items():
        t1 = 1.0
        for n, s in speedups.items():
            tn = n * t1 / s   # weak scaling: S = N T(1) / T(N)
            assert scaling.speedup(t1, tn, n) == pytest.approx(s)
            assert scaling.efficiency(t1, tn) == pytest.approx(s / n)
        if 4 in speedups:
            assert speedups[4] / 4 < 0.5, platform
    assert THESIS_SPEEDUPS["CRC V100 (PCIe)"][4] / 4 == pytest.approx(0.365)
    assert THESIS_SPEEDUPS["CRC A100 (PCIe)"][2] / 2 == pytest.approx(0.875)


def test_karp_flatt_known_values():
    assert scaling.karp_flatt(2.0, 2) == pytest.approx(0.0)      # perfect scaling
    assert scaling.karp_flatt(1.0, 2) == pytest.approx(1.0)      # no speedup: all serial
    assert scaling.karp_flatt(1.46, 4) == pytest.approx((1 / 1.46 - 0.25) / 0.75)
    assert math.isnan(scaling.karp_flatt(1.0, 1))


def test_weak_scaling_training_projection():
    assert scaling.projected_training_s(0.5, 4, 160_000) == pytest.approx(20_000)


def test_loss_split_adds_to_100_with_residual():
    ref = _m(1, data_wait=0.1, forward=0.3, backward=0.5, exposed_comm=0.0, optimizer=0.1)
    run = _m(2, data_wait=0.2, forward=0.3, backward=0.5, exposed_comm=0.3, optimizer=0.1)
    run.iter_s += 0.1  # medians need not add up: 0.1 s unexplained
    split = split_loss(ref, run)
    assert split["lost_s"] == pytest.approx(0.5)
    assert sum(split["shares_pct"].values()) == pytest.approx(100.0)
    assert split["shares_pct"]["exposed_comm"] == pytest.approx(60.0)
    assert split["shares_pct"]["data_wait"] == pytest.approx(20.0)
    assert split["shares_pct"]["residual"] == pytest.approx(20.0)


def test_no_loss_no_shares():
    a = _m(1, forward=1.0)
    assert split_loss(a, _m(2, forward=0.9))["shares_pct"] is None


def test_scaling_rows_without_world_size_1():
    rows = scaling_rows({2: _m(2, forward=1.0), 4: _m(4, forward=1.5)})
    assert all(r["speedup"] is None and r["loss"] is None for r in rows)
    report = analyse(Inputs({2: _m(2, forward=1.0)}))
    assert any("world size 1 is missing" in n for n in report["notes"])
    assert any("only one world size" in n for n in report["notes"])


def test_analyse_schema_and_recommendation_order():
    base = _m(1, data_wait=0.05, forward=0.3, backward=0.5, optimizer=0.1)
    two = _m(2, data_wait=0.35, forward=0.3, backward=0.5, exposed_comm=0.1, optimizer=0.1)
    r = analyse(Inputs({1: base, 2: two}, meta={"preset": "cpu", "backend": "gloo"}))
    for key in ("commit", "machine", "preset", "backend", "world_sizes", "runs", "loss_shares"):
        assert key in r
    row = r["runs"][1]
    for key in ("world_size", "iter_s", "components_s", "speedup", "efficiency", "karp_flatt",
                "predicted_iter_s", "prediction_error"):
        assert key in row
    assert sum(r["loss_shares"]["2"].values()) == pytest.approx(100.0)
    assert [rec["component"] for rec in r["recommendations"]] == ["data_wait", "exposed_comm"]
    assert r["recommendations"][0]["efficiency_recoverable"] > r["recommendations"][1]["efficiency_recoverable"]


def test_prediction_sums_components_and_overlaps_comm():
    iso = Isolated(2, forward_s=0.2, forward_backward_s=0.6, optimizer_s=0.05, images_per_rank=2,
                   loader_workers=0, supply_images_per_s=20.0, allreduce_s=0.5,
                   last_bucket_fraction=0.1)
    p = predict(iso)
    assert p["components_s"]["backward"] == pytest.approx(0.4)
    assert p["components_s"]["data_wait"] == pytest.approx(0.1)       # synchronous loading
    assert p["components_s"]["exposed_comm"] == pytest.approx(0.1)    # 0.5 - 0.4 overlapped
    assert p["predicted_iter_s"] == pytest.approx(sum(p["components_s"].values()))
    with_workers = predict(Isolated(**{**iso.__dict__, "loader_workers": 2}))
    assert with_workers["components_s"]["data_wait"] == 0.0            # hidden under compute
    err = prediction_error(0.9, 1.0)
    assert err["prediction_error"] == pytest.approx(-0.1) and err["accuracy_pct"] == pytest.approx(90)


def test_loader_headroom_and_binding_projection():
    h = loader_headroom({1: 30.0, 2: 16.0}, {1: 4.0, 2: 4.0})
    assert h["per_world_size"][2]["headroom"] == pytest.approx(4.0)
    assert h["binds_at_world_size"] is None
    assert h["projected_binding_world_size"] == 9   # 32 images/s total / 4 per rank, + 1
    assert loader_headroom({1: 3.0}, {1: 4.0})["binds_at_world_size"] == 1
