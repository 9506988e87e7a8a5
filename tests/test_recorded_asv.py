"""The attribution end to end on a real recorded asv result (tests/data/asv_results).

The other attribution tests build asv results by hand, so they can only agree with the reader's
idea of asv's format. This one reads what asv itself wrote: ``tools/suite.py --quick`` with
``SWINKIT_PRESET=cpu`` on a 2-core machine (world sizes 1 and 2; 4 and 8 skipped), trimmed to
the benchmark ids in ``swinkit/attribution/asv_names.py`` (tests/data/asv_results/README.md
says how it was made). ``tools/attribute.py`` runs on it as a user would, and its JSON report
is checked against numbers worked out here from the raw file by another path: medians and
quartiles from the stored samples (not asv's stored statistics), parameter positions by index
arithmetic (not itertools.product), the prediction summed term by term as
``swinkit.attribution.prediction`` documents it.
"""
from __future__ import annotations

import json
import math
import shutil
import statistics
from pathlib import Path

import pytest
from conftest import tool_module

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "asv_results"
RESULTS = DATA / "results"
MACHINE = "vm"
RESULT_FILE = RESULTS / MACHINE / "5398f7fd-existing-py_work_main_.venv_bin_python.json"
ENVIRONMENT = DATA / "swinkit-environment" / MACHINE / "5398f7fd.json"

ITERATION = "bench_ddp.Iteration.track_iteration"
BLAME = "bench_ddp.Blame.track_seconds"
MODEL = "bench_model.ForwardBackward.track_time"
LOADER = "bench_data.Loader.track_images_per_s_per_rank"
ALLREDUCE = "bench_comm.AllReduce.track_time"
WORKERS = "bench_ddp.Iteration.track_loader_workers"
IMAGES = "bench_ddp.Iteration.track_images_per_rank"
LAST_BUCKET = "bench_ddp.Iteration.track_last_bucket_fraction"
STRAGGLER = "bench_ddp.Iteration.track_straggler_rank"


def _attribute(argv: list[str]) -> int:
    """tools/attribute.py's main, in this process (as a user runs it, minus the interpreter)."""
    return tool_module("attribute").main(argv)


@pytest.fixture(scope="module")
def raw() -> dict:
    return json.loads(RESULT_FILE.read_text())


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("recorded") / "attribution.json"
    assert _attribute(["--results", str(RESULTS), "--json", str(out)]) == 0
    return json.loads(out.read_text())


# --- the raw file, read by hand -------------------------------------------------------------

def _cell(raw: dict, bench: str, column: str, *wanted: str):
    """One parameter combination's entry of one column: asv stores each column as a flat list
    over the parameters' product, the last parameter varying fastest (row-major)."""
    row = raw["results"][bench]
    params = row[raw["result_columns"].index("params")]
    index = 0
    for values, want in zip(params, wanted):
        index = index * len(values) + [v.strip("'") for v in values].index(want)
    return row[raw["result_columns"].index(column)][index]


def _median(raw: dict, bench: str, *wanted: str) -> float:
    """The median of the recorded samples, computed here (not asv's stored result)."""
    return statistics.median(_cell(raw, bench, "samples", *wanted))


def _asv_5_digits(x: float) -> float:
    """asv keeps its stats_* columns to 5 significant digits (asv.util.truncate_float_list)."""
    return float(f"{x:.4e}")


def _row(report: dict, ws: int) -> dict:
    return next(r for r in report["runs"] if r["world_size"] == ws)


# --- the checks ---------------------------------------------------------------------------

def test_what_was_recorded_is_what_the_report_is_about(raw, report):
    environment = json.loads(ENVIRONMENT.read_text())
    assert environment["preset"] == "cpu"  # the run the data folder's README describes
    assert report["preset"] == environment["preset"]
    assert report["backend"] == environment["backend"]
    assert report["commit"] == raw["commit_hash"]
    assert report["machine"] == MACHINE == json.loads((RESULTS / MACHINE / "machine.json")
                                                      .read_text())["machine"]
    assert report["source"] == "asv"
    # world sizes with a measured iteration: 4 and 8 were skipped (2 cores), stored as NaN
    measured = [int(ws) for ws in ("1", "2", "4", "8")
                if not math.isnan(_cell(raw, ITERATION, "result", ws))]
    assert measured == [1, 2]
    assert report["world_sizes"] == measured
    # machine.json is asv's, not a result: not a skipped file either
    assert report["skipped_files"] == []


def test_iteration_is_the_median_of_the_samples_and_efficiency_their_ratio(raw, report):
    t = {ws: _median(raw, ITERATION, str(ws)) for ws in (1, 2)}
    for ws in (1, 2):
        samples = _cell(raw, ITERATION, "samples", str(ws))
        # The median and the mean of these samples differ by far more than the tolerance below,
        # so a reader that averaged would fail here.
        assert abs(statistics.fmean(samples) - t[ws]) > 1e-3 * t[ws]
        assert _row(report, ws)["iter_s"] == pytest.approx(t[ws], rel=1e-12)
        assert _row(report, ws)["samples"] == len(samples)
        # the spread within the launch: asv's quartiles (linear interpolation, stored to five
        # digits) over the median
        q25, _, q75 = statistics.quantiles(samples, n=4, method="inclusive")
        iqr = (_asv_5_digits(q75) - _asv_5_digits(q25)) / t[ws]
        assert _row(report, ws)["iter_iqr_ratio"] == pytest.approx(iqr, rel=1e-9)
    assert _row(report, 2)["efficiency"] == pytest.approx(t[1] / t[2], rel=1e-12)
    assert _row(report, 2)["speedup"] == pytest.approx(2 * t[1] / t[2], rel=1e-12)
    assert _row(report, 1)["efficiency"] == pytest.approx(1.0)
    # weak scaling: the lost time is T(2) - T(1)
    assert _row(report, 2)["loss"]["lost_s"] == pytest.approx(t[2] - t[1], rel=1e-12)


def test_blame_components_and_straggler_are_the_recorded_ones(raw, report):
    for ws in (1, 2):
        components = _row(report, ws)["components_s"]
        assert set(components) == {"data_wait", "forward", "backward", "exposed_comm",
                                   "optimizer", "other", "unattributed"}
        for name, value in components.items():
            assert value == _cell(raw, BLAME, "result", str(ws), name)
    # the straggler: nobody waited at N=1 (stored as NaN), rank 0 at N=2
    assert math.isnan(_cell(raw, STRAGGLER, "result", "1"))
    assert _row(report, 1)["straggler"]["rank"] is None
    assert _row(report, 2)["straggler"]["rank"] == int(_cell(raw, STRAGGLER, "result", "2"))


def test_prediction_is_the_documented_sum_of_the_recorded_components(raw, report):
    """T_pred(N) = data_stall(N) + forward + backward + exposed_comm(N) + optimizer, from the
    recorded model, loader and all-reduce benchmarks of the DDP run's own preset and batch."""
    preset = json.loads(ENVIRONMENT.read_text())["preset"]
    forward = _median(raw, MODEL, preset, "per_rank", "segmentor", "forward")
    forward_backward = _median(raw, MODEL, preset, "per_rank", "segmentor", "forward_backward")
    optimizer = _median(raw, MODEL, preset, "per_rank", "segmentor", "optimizer")
    backward = forward_backward - forward
    for ws in (1, 2):
        workers = int(_cell(raw, WORKERS, "result", str(ws)))
        images = _cell(raw, IMAGES, "result", str(ws))
        supply = _median(raw, LOADER, str(ws), str(workers))
        allreduce = _median(raw, ALLREDUCE, str(ws), "preset_buckets", "fp32")
        last = _cell(raw, LAST_BUCKET, "result", str(ws))
        load = images / supply  # one batch at the measured per-rank supply
        # with loader workers, loading overlaps compute: only the excess stalls
        stall = load if workers == 0 else max(load - (forward_backward + optimizer), 0.0)
        # the last bucket never hides; the rest hides under backward where it fits
        exposed = max(allreduce * last, allreduce - backward)
        if ws == 1:
            exposed = min(exposed, allreduce)
        predicted = stall + forward + backward + exposed + optimizer
        row = _row(report, ws)
        assert row["predicted_iter_s"] == pytest.approx(predicted, rel=1e-12)
        assert row["predicted_components_s"]["forward"] == pytest.approx(forward, rel=1e-12)
        assert row["predicted_components_s"]["exposed_comm"] == pytest.approx(exposed, rel=1e-12)
        measured = _median(raw, ITERATION, str(ws))
        assert row["prediction_error"] == pytest.approx((predicted - measured) / measured,
                                                        rel=1e-9)
    # The other presets' and batches' components differ from these by more than the tolerance
    # (a reader that picked another row would fail above): thesis is not measured on a CPU.
    assert math.isnan(_cell(raw, MODEL, "result", "thesis", "per_rank", "segmentor", "forward"))
    assert abs(_median(raw, MODEL, preset, "double", "segmentor", "forward") - forward) > \
        0.01 * forward


# --- damaged copies -------------------------------------------------------------------------

def _copy_data(tmp_path: Path) -> Path:
    folder = tmp_path / "asv"
    shutil.copytree(DATA, folder)
    return folder / "results"


def test_a_corrupted_copy_is_skipped_and_named(tmp_path, capsys):
    """A result file cut short (an interrupted write) beside the intact one: the report comes
    from the intact file and names the broken one; nothing fails."""
    results = _copy_data(tmp_path)
    text = RESULT_FILE.read_text()
    broken = results / MACHINE / "ffffffff-existing-py_work_main_.venv_bin_python.json"
    broken.write_text(text[: len(text) // 2])
    out = tmp_path / "a.json"
    assert _attribute(["--results", str(results), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["skipped_files"] == [f"{broken} (JSONDecodeError)"]
    assert report["commit"] == json.loads(text)["commit_hash"]
    assert _row(report, 2)["iter_s"] == pytest.approx(
        _median(json.loads(text), ITERATION, "2"), rel=1e-12)
    assert "skipped unreadable result file" in capsys.readouterr().out


def test_only_a_corrupted_copy_is_exit_3_naming_it(tmp_path, capsys):
    results = _copy_data(tmp_path)
    text = RESULT_FILE.read_text()
    broken = results / MACHINE / RESULT_FILE.name
    broken.write_text(text[: len(text) // 2])
    assert _attribute(["--results", str(results)]) == 3
    err = capsys.readouterr().err
    assert "no DDP results" in err and f"{broken} (JSONDecodeError)" in err


def test_a_damaged_row_in_a_newer_copy_is_skipped_and_named(tmp_path):
    """A newer copy whose iteration row lost an entry (valid JSON, wrong shape)."""
    from swinkit.attribution.inputs import from_asv
    results = _copy_data(tmp_path)
    data = json.loads(RESULT_FILE.read_text())
    data["commit_hash"], data["date"] = "f" * 40, data["date"] + 1
    data["results"][ITERATION][0].pop()
    damaged = results / MACHINE / "ffffffff-existing-py_work_main_.venv_bin_python.json"
    damaged.write_text(json.dumps(data))
    inputs = from_asv(results)
    assert inputs.meta["commit"] == json.loads(RESULT_FILE.read_text())["commit_hash"]
    assert any(str(damaged) in f and "damaged row " + ITERATION in f
               for f in inputs.skipped_files)


def test_suite_reads_each_setup_caches_seconds_from_asvs_result():
    """tools/suite.py's cost lines: asv's own record of each setup_cache (in the recorded
    file: bench_data 379.8 s, bench_comm 219.3 s, bench_model 89.2 s, bench_ddp 75.0 s)."""
    from swinkit.run_suite import setup_cache_seconds
    found = setup_cache_seconds(RESULTS, "vm", "5398f7fd" + "0" * 32)
    assert list(found) == ["bench_data", "bench_comm", "bench_model", "bench_ddp"]
    assert found["bench_data"] == pytest.approx(379.776919)
    assert setup_cache_seconds(RESULTS, "other", "5398f7fd") == {}
