"""The asv suite's shape: classes, params, skips, the all-reduce check, and a tiny asv run."""
import importlib
import inspect
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import asv_result_values

from swinkit.attribution import asv_names
from swinkit.launch import LaunchConfig, LaunchError, launch
from swinkit.measure import phases
from swinkit.runs.sweep import Sweep, plan_world_sizes

ROOT = Path(__file__).resolve().parents[1]
# every benchmark file, so a new one is checked without being listed here
MODULES = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "benchmarks").glob("bench_*.py"))


def _classes():
    for name in MODULES:
        module = importlib.import_module(f"benchmarks.{name}")
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and not cls_name.startswith("_"):
                yield f"{name}.{cls_name}", cls


CLASSES = dict(_classes())


def test_every_benchmark_file_has_classes():
    assert {name.split(".")[0] for name in CLASSES} == set(MODULES)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_params_and_param_names_agree(name):
    cls = CLASSES[name]
    assert len(cls.params) == len(cls.param_names)
    assert all(isinstance(p, list) and p for p in cls.params)
    metrics = [m for m in dir(cls) if m.startswith(("track_", "time_"))]
    assert metrics, f"{name} measures nothing"
    for metric in metrics:
        func = getattr(cls, metric)
        assert list(inspect.signature(func).parameters)[2:] == cls.param_names
        if metric.startswith("track_"):
            assert getattr(func, "unit", None), f"{name}.{metric} has no unit"
    if any(n == "world_size" for n in cls.param_names):
        assert cls.params[cls.param_names.index("world_size")] == [1, 2, 4, 8]


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_skips_are_raised_in_setup_not_in_a_metric(name):
    """asv takes NotImplementedError as "skipped" only from setup(); raised by a track_* it is
    a failed benchmark (a stored failure and asv exit code 2). Each metric's own source (its
    helpers' too, for the engines' _eng) must not raise it: a missing value is NaN there."""
    cls = CLASSES[name]
    for metric in [m for m in dir(cls) if m.startswith(("track_", "time_"))]:
        source = inspect.getsource(getattr(cls, metric))
        assert "NotImplementedError" not in source, f"{name}.{metric} raises a skip"


@pytest.mark.parametrize("benchmark_id", asv_names.ALL)
def test_every_benchmark_id_the_attribution_reads_exists(benchmark_id):
    """A renamed benchmark must fail here, not silently empty the report."""
    module, cls, method = benchmark_id.split(".")
    assert f"{module}.{cls}" in CLASSES, benchmark_id
    assert callable(getattr(CLASSES[f"{module}.{cls}"], method, None)), benchmark_id


def test_the_ids_module_lists_the_ids_the_attribution_uses():
    """ALL is built from the module's names; check it holds the ones inputs.py reads."""
    assert {"bench_ddp.Blame.track_seconds", "bench_ddp.Iteration.track_iteration",
            "bench_model.ForwardBackward.track_time"} <= set(asv_names.ALL)


def test_blame_benchmark_keys_match_swinkit():
    """bench_ddp writes the blame keys out (older commits lack them): they must stay equal."""
    from benchmarks.bench_ddp import BLAME_KEYS
    assert BLAME_KEYS == phases.BLAME_KEYS
    assert CLASSES["bench_ddp.Blame"].params[1] == list(phases.BLAME_KEYS)


def test_setup_skips_and_fails_with_the_reason():
    sweep = Sweep(results={1: {}}, skipped={4: "needs 4 GPUs; this machine has 0"},
                  failed={2: "rank 1 was killed by SIGKILL"})
    ddp = CLASSES["bench_ddp.Iteration"]()
    ddp.setup(sweep, 1)
    with pytest.raises(NotImplementedError, match="needs 4 GPUs"):
        ddp.setup(sweep, 4)
    with pytest.raises(RuntimeError, match="SIGKILL"):
        ddp.setup(sweep, 2)
    with pytest.raises(NotImplementedError, match="not measured"):
        ddp.setup(sweep, 8)


def test_scaling_formulas_weak_and_strong_by_hand():
    """Weak (2 images per rank): T(1) = 2.0 s, T(2) = 2.5 s -> S = 2 x 2.0 / 2.5 = 1.6,
    E = 0.8, Karp-Flatt (1/1.6 - 1/2) / (1 - 1/2) = 0.25. Strong (4 images in all): T(1) =
    4.4 s for 4 images on one rank, T(2) = 2.5 s (2 per rank, the weak run itself) ->
    S = 4.4 / 2.5 = 1.76, E = 0.88, Karp-Flatt (1/1.76 - 1/2) / (1/2) = 0.1364. A strong
    formula fed the weak T(1) (or the weak one fed T(1) for 4 images) gives other numbers."""
    run = lambda t: {"iter_s": t}  # noqa: E731
    sweep = Sweep(results={1: run(2.0), 2: run(2.5), ("strong", 1): run(4.4),
                           ("strong", 2): run(2.5)})
    scaling = CLASSES["bench_ddp.Scaling"]()
    for kind in ("weak", "strong"):
        scaling.setup(sweep, 2, kind)
    assert scaling.track_speedup(sweep, 2, "weak") == pytest.approx(1.6)
    assert scaling.track_efficiency(sweep, 2, "weak") == pytest.approx(0.8)
    assert scaling.track_karp_flatt(sweep, 2, "weak") == pytest.approx(0.25)
    assert scaling.track_speedup(sweep, 2, "strong") == pytest.approx(1.76)
    assert scaling.track_efficiency(sweep, 2, "strong") == pytest.approx(0.88)
    assert scaling.track_karp_flatt(sweep, 2, "strong") == pytest.approx((1 / 1.76 - 0.5) / 0.5)
    assert scaling.track_efficiency(sweep, 1, "strong") == pytest.approx(1.0)
    # an older commit's cache (no strong runs) skips strong scaling with the reason
    with pytest.raises(NotImplementedError, match="no strong-scaling runs"):
        scaling.setup(Sweep(results={1: run(2.0), 2: run(2.5)}), 2, "strong")


def test_strong_scaling_runs_only_what_differs_from_the_weak_runs(monkeypatch):
    """On 2 runnable world sizes of a 2-image preset: strong scaling's global batch is 4, so
    world size 1 runs once more with 4 images, and world size 2 (2 per rank) is the weak run
    itself, not launched again; world size 4 keeps the weak sweep's skip reason."""
    from swinkit.runs import ddp_sweep as module
    launched = []

    def fake_run(spec, progress=print):
        launched.append((spec.world_size, spec.overrides["images_per_rank"]))
        return {"iter_s": float(spec.overrides["images_per_rank"])}
    monkeypatch.setattr(module, "run_ddp", fake_run)
    monkeypatch.setattr(module, "environment", lambda: {})
    from swinkit.runs import sweep

    def plan(sizes, **kwargs):
        return {ws: None if ws <= 2 else "needs cores" for ws in sizes}
    monkeypatch.setattr(module, "plan_world_sizes", plan)
    monkeypatch.setattr(sweep, "plan_world_sizes", plan)
    weak = module.ddp_sweep("test", [1, 2, 4], progress=lambda line: None)
    assert launched == [(1, 2), (2, 2)]
    both = module.with_strong_scaling(weak, "test", [1, 2, 4], progress=lambda line: None)
    assert launched == [(1, 2), (2, 2), (1, 4)]
    assert both.get("strong", 1) == {"iter_s": 4.0}
    assert both.get("strong", 2) is both.get(2)
    with pytest.raises(NotImplementedError, match="needs cores"):
        both.get("strong", 4)


def test_paired_sweep_stores_the_prediction_of_each_launch(monkeypatch):
    """bench_ddp's launches are paired: each spec asks for the local steps beside the DDP
    ones, and the result keeps the oracle's prediction made from them in place of the
    components themselves; the prediction tracks read it and skip a cache without one (an
    older commit's, whose ddp_sweep takes no ``paired``: the setup_cache asks first)."""
    from benchmarks.bench_ddp import ddp_sweep as stand_in
    from benchmarks.common import accepts
    from swinkit.runs import component_costs as components
    from swinkit.runs import ddp_sweep as module
    specs = []

    def fake_run(spec, progress=print):
        specs.append(spec)
        # rank 0's median is 2.0 s (what Iteration.track_iteration reports); the median of
        # the ranks' medians would be 2.5 s
        result = {"iter_s": 2.5, "ranks": [{"iteration": [1.9, 2.0, 2.2]},
                                           {"iteration": [3.0, 3.0, 3.0]}]}
        if spec.paired:
            result["local_run"] = {"from": spec.world_size}
            for rank in result["ranks"]:
                rank["local"] = {"timeline": ["a local step"]}
        return result

    def fake_predict(local_run, spec):
        assert local_run == {"from": spec.world_size}  # the launch's own components
        if spec.overrides.get("images_per_rank") == 3:
            raise ValueError("no buckets were recorded")
        return {"predicted_iter_s": 1.9, "components_s": {"forward": 0.5, "sync_s": 0.1}}
    monkeypatch.setattr(module, "run_ddp", fake_run)
    monkeypatch.setattr(module, "environment", lambda: {})
    monkeypatch.setattr(components, "predict_from", fake_predict)
    monkeypatch.setattr("swinkit.runs.sweep.plan_world_sizes", lambda sizes, **kw: dict.fromkeys(sizes))
    monkeypatch.setattr(module, "plan_world_sizes", lambda sizes, **kw: dict.fromkeys(sizes))
    sweep = module.ddp_sweep("test", [1, 2], paired=True, progress=lambda line: None)
    assert [s.paired for s in specs] == [True, True]
    assert "local_run" not in sweep.get(2)
    assert all("local" not in rank for rank in sweep.get(2)["ranks"])  # kept out of the cache
    prediction, part = CLASSES["bench_ddp.Prediction"](), CLASSES["bench_ddp.PredictedPart"]()
    prediction.setup(sweep, 2)
    assert prediction.track_iteration(sweep, 2) == 1.9
    assert prediction.track_error(sweep, 2) == pytest.approx(-0.05)  # (1.9 - 2.0) / 2.0
    assert part.track_seconds(sweep, 2, "sync_s") == 0.1
    unpaired = module.ddp_sweep("test", [1], progress=lambda line: None)
    assert specs[-1].paired is False and "prediction" not in unpaired.get(1)
    with pytest.raises(NotImplementedError, match="not paired"):
        prediction.setup(unpaired, 1)
    assert accepts(stand_in, "paired") and not accepts(stand_in, "no_such_option")
    # a prediction that fails leaves the DDP run's own measurements standing, and says why
    broken = module.ddp_sweep("test", [1], paired=True, images={1: 3}, progress=lambda x: None)
    assert broken.get(1)["iter_s"] == 2.5
    with pytest.raises(RuntimeError, match="no buckets were recorded"):
        prediction.setup(broken, 1)


def test_a_strong_run_that_runs_out_of_memory_is_skipped_not_failed(monkeypatch):
    """On GPUs, world size 1 with the whole global batch may not fit: that is the device's
    limit (asv: skipped, with the reason), not a fault of the run; other failures stay failed."""
    from swinkit.launch import LaunchError
    from swinkit.launch.diagnose import Diagnosis
    from swinkit.runs import ddp_sweep as module

    def fake_run(spec, progress=print):
        if spec.overrides["images_per_rank"] == 4:
            raise LaunchError(Diagnosis(rank=0, cause="raised", summary=(
                "rank 0 raised torch.OutOfMemoryError: CUDA out of memory")))
        return {"iter_s": 1.0}
    monkeypatch.setattr(module, "run_ddp", fake_run)
    monkeypatch.setattr(module, "environment", lambda: {})
    monkeypatch.setattr("swinkit.runs.sweep.plan_world_sizes", lambda sizes, **kw: dict.fromkeys(sizes))
    monkeypatch.setattr(module, "plan_world_sizes", lambda sizes, **kw: dict.fromkeys(sizes))
    both = module.with_strong_scaling(module.ddp_sweep("test", [1, 2], progress=lambda x: None),
                                      "test", [1, 2], progress=lambda line: None)
    with pytest.raises(NotImplementedError, match="does not fit at world size 1.*out of memory"):
        both.get("strong", 1)


def test_world_sizes_beyond_the_cores_are_skipped_unless_opted_in(monkeypatch):
    monkeypatch.delenv("SWINKIT_OVERSUBSCRIBE", raising=False)
    cores = os.cpu_count()
    plan = plan_world_sizes([1, cores, cores * 2], backend="gloo")
    assert plan[1] is None and plan[cores] is None
    assert "SWINKIT_OVERSUBSCRIBE=1" in plan[cores * 2]
    monkeypatch.setenv("SWINKIT_OVERSUBSCRIBE", "1")
    assert plan_world_sizes([cores * 2], backend="gloo")[cores * 2] is None
    assert "GPUs" in plan_world_sizes([1], backend="nccl")[1] or _has_gpu()


def _has_gpu():
    import torch
    return torch.cuda.is_available()


def test_samples_shape_for_asv():
    from benchmarks.common import samples
    assert samples([1.0, 2.0]) == {"samples": [1.0, 2.0], "number": 1}
    assert math.isnan(samples([]))


SMALL = {"backbone_flat": [1000], "segmentor_flat": [3000], "ddp_buckets": [1000, 2000],
         "preset_buckets": [500, 500]}


@pytest.mark.slow
def test_allreduce_correctness_check_passes_and_reports_bandwidth(no_orphans):
    from swinkit.components.allreduce import summarize_rank0
    run = launch("swinkit.components.allreduce:allreduce_rank", {"samples": 3, "sizes": SMALL},
                 LaunchConfig(nproc_per_node=2, wall_timeout_s=120), quiet=True)
    rank0 = run.result["ranks"][0]
    assert all(v == 0 for v in rank0["wrong"].values())
    summary = summarize_rank0(rank0, 2)
    fp32 = summary["ddp_buckets/fp32"]
    assert fp32["bytes"] == 3000 * 4 and fp32["buckets"] == 2
    assert summary["ddp_buckets/bf16"]["bytes"] == 3000 * 2
    for t, algbw in zip(fp32["seconds"], fp32["algbw_gbps"]):
        assert algbw == pytest.approx(3000 * 4 / t / 1e9)


def test_bus_bandwidth_where_the_candidate_formulas_differ():
    """nccl-tests' convention, by hand: 1e9 bytes in 0.5 s is algbw 2 GB/s; busbw multiplies by
    2 (N-1) / N: 2 at N=2 (equal to algbw, as several wrong formulas would be), 3.0 at N=4,
    3.5 at N=8 (N-1 or 2N alone give other values)."""
    from swinkit.components.allreduce import summarize_rank0
    rank0 = {"times": {"flat/fp32": [0.5]}, "sizes": {"flat": [250_000_000],
             "segmentor_flat": [250_000_000]}, "bare_times": [0.5]}
    for world, busbw in ((2, 2.0), (4, 3.0), (8, 3.5)):
        out = summarize_rank0(rank0, world)["flat/fp32"]
        assert out["algbw_gbps"] == [pytest.approx(2.0)]
        assert out["busbw_gbps"] == [pytest.approx(busbw)]


@pytest.mark.slow
def test_corrupted_reduction_fails_with_the_count(no_orphans):
    """Rank 1 sends corrupted values (every 97th element, as a faulty link would): the reduced
    tensor is wrong on every rank, the healthy rank 0 included, and each counts the same wrong
    elements against an expectation computed without any collective."""
    with pytest.raises(LaunchError) as info:
        launch("swinkit.components.allreduce:allreduce_rank", {"samples": 1, "sizes": SMALL},
               LaunchConfig(nproc_per_node=2, wall_timeout_s=120),
               env={"SWINKIT_FAULT": "corrupt_allreduce:1"}, quiet=True)
    d = info.value.diagnosis
    assert "AllReduceMismatch" in d.summary
    errors = d.records["errors"]
    assert set(errors) == {0, 1}, "the rank that corrupted nothing must see the damage too"
    for n, layout in ((1000, "backbone_flat"), (3000, "segmentor_flat")):
        corrupted = -(-n // 97)   # elements 0, 97, 194, ... of n
        for record in errors.values():
            assert f"{layout}/fp32: {corrupted}," in record["message"]


@pytest.mark.slow
def test_asv_quick_run_on_the_test_preset(asv_scratch, no_orphans):
    """A real `asv run --quick` of the DDP benchmarks the attribution reads (with the held-out
    prediction, SWINKIT_PREDICT=1), then the attribution on those stored results, then `asv
    publish`, in a scratch folder."""
    run = asv_scratch(["run", "-b", r"bench_ddp\.(Iteration\.track_iteration|Blame\.track_seconds"
                                    r"|Blame\.track_wait_caused|Iteration\.track_straggler_rank"
                                    r"|Prediction\.track_iteration|PredictedPart\.track_seconds)"],
                      SWINKIT_PREDICT="1")  # bench_predict's held-out prediction too (kept, below)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    values = asv_result_values(asv_scratch.results, "bench_ddp.Iteration.track_iteration")
    assert values[0] > 0 and values[1] > 0           # world sizes 1 and 2 measured
    if (os.cpu_count() or 1) < 4:
        assert values[2] is None or math.isnan(values[2])  # 4 ranks on fewer cores: skipped
    # blame per (world size, component): the run's own components are all there at N=1, 2
    blame = asv_result_values(asv_scratch.results, "bench_ddp.Blame.track_seconds")
    n_keys = len(phases.BLAME_KEYS)
    for ws_index in (0, 1):
        row = blame[ws_index * n_keys:(ws_index + 1) * n_keys]
        assert all(v is not None and v >= 0 for v in row), row
        assert sum(row) == pytest.approx(values[ws_index], rel=0.25)  # medians: near, not equal
    from swinkit.attribution.analysis import analyse
    from swinkit.attribution.inputs import from_asv
    report = analyse(from_asv(asv_scratch.results))
    assert report["world_sizes"] == [1, 2] and report["verdicts"][0]["world_size"] == 2
    # the prediction is the one each DDP launch made from its own components (paired), and
    # its parts add up to it (sync_s is defined as the rest, so this checks they were stored)
    predicted = asv_result_values(asv_scratch.results, "bench_ddp.Prediction.track_iteration")
    for ws_index, row in enumerate(report["runs"]):
        assert row["prediction_source"] == "paired"
        assert row["predicted_iter_s"] == pytest.approx(predicted[ws_index], rel=1e-4)
        assert row["predicted_iter_s"] == pytest.approx(values[ws_index], rel=0.25)
        assert sum(row["predicted_components_s"].values()) == pytest.approx(
            row["predicted_iter_s"], rel=1e-3)
    pub = asv_scratch(["publish"], timeout=300)
    assert pub.returncode == 0, pub.stderr[-2000:]
    assert (asv_scratch.html / "index.html").exists()
    # bench_predict's held-out report, kept beside the results: world size 4 predicted from it
    kept = list((asv_scratch.results.parent / "swinkit-held-out").glob("*/*.json"))
    assert [p.stem for p in kept] == [asv_scratch.commit[:8]]
    # and where its prediction of 2 missed, split over the run at 2's own components
    from swinkit.predict.numbers.miss_split import TERMS
    two = json.loads(kept[0].read_text())["launches"][0]["targets"]["2"]
    split = two["miss_split"]
    assert "error" not in split and set(split["terms_s"]) == set(TERMS)
    # split from the prediction scored and against the same run's iteration
    assert split["predicted_s"] == pytest.approx(two["predicted_iter_s"], rel=1e-9)
    assert split["measured_s"] == two["measured_iter_s"]
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "attribute.py"), "--results",
                          str(asv_scratch.results), "--predict", "4"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "predicted" in out.stdout and str(kept[0]) in out.stdout


def test_sweep_records_what_the_machine_cannot_run_as_skipped(monkeypatch):
    """Sweep.runnable keeps the world sizes that fit the cores and names the reason for the
    others under the caller's key (2 cores: 1 and 2 fit, 4 does not without oversubscribing)."""
    from swinkit.runs import sweep as module
    monkeypatch.setattr(module.os, "cpu_count", lambda: 2)
    monkeypatch.delenv(module.OVERSUBSCRIBE_ENV, raising=False)
    s = module.Sweep()
    assert s.runnable([1, 2, 4], key=lambda ws: ("ddp", ws), threads_per_rank=1) == [1, 2]
    assert list(s.skipped) == [("ddp", 4)] and "needs 4 CPU cores" in s.skipped[("ddp", 4)]
    monkeypatch.setenv(module.OVERSUBSCRIBE_ENV, "1")
    assert module.Sweep().runnable([1, 2, 4]) == [1, 2, 4]
