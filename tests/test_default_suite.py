"""The default asv run's trimmed sets (it holds to 8 minutes on 2 CPU cores): what is left out
is skipped with the reason and the variable that brings it back, the efficiency's reference is
stated, and the loader's settings share one launch without mixing their numbers."""
import importlib
import json
import math

import pytest

from swinkit.runs.sweep import Sweep


def _fake_engine_sweep(calls):
    def engine_sweep(preset, keys, world_sizes, grad_accum=1, **kw):
        calls.append((tuple(keys), tuple(world_sizes), grad_accum))
        sweep = Sweep()
        for ws in world_sizes:
            for key in keys:
                # a step that tells the runs apart: engine, world size and K in one number
                step = {"ddp": 1.0, "zero1": 1.5, "zero2": 2.0}.get(key)
                if step is None:
                    sweep.skipped[(key, ws)] = "DataParallel needs CUDA GPUs"
                else:
                    sweep.results[(key, ws)] = {"engine": {"step_s": step * ws * grad_accum}}
        return sweep
    return engine_sweep


def _reloaded(name: str, variable: str, monkeypatch):
    """benchmarks.``name`` imported afresh with $``variable`` unset (its defaults are read at
    import), reloaded again afterwards so later tests see the module as the environment has it."""
    monkeypatch.delenv(variable, raising=False)
    module = importlib.reload(importlib.import_module(f"benchmarks.{name}"))
    yield module
    importlib.reload(module)


@pytest.fixture
def bench_engines(monkeypatch):
    yield from _reloaded("bench_engines", "SWINKIT_ENGINES", monkeypatch)


def test_default_engines_leave_out_zero_at_one_rank_and_accumulation_with_the_reason(
        bench_engines, monkeypatch):
    calls = []
    monkeypatch.setattr(bench_engines, "engine_sweep", _fake_engine_sweep(calls))
    monkeypatch.setattr(bench_engines, "WORLD_SIZES", (1, 2))
    monkeypatch.setattr(bench_engines, "preset", lambda: "test")
    cache = bench_engines._engines_and_accumulation(None)
    # world size 1: ZeRO not launched; above it: every engine; no accumulation launched (K = 1
    # is the ddp engine's run, read by GradAccum)
    assert ("zero1", 1) not in cache["engines"].results
    assert cache["accumulation"] == {}
    with pytest.raises(NotImplementedError, match="SWINKIT_ENGINES=all"):
        bench_engines.Engine().setup(cache, 1, "zero1")
    for k in (2, 4):
        with pytest.raises(NotImplementedError, match=f"K = {k}.*SWINKIT_ENGINES=all"):
            bench_engines.GradAccum().setup(cache, 2, k)
    bench_engines.GradAccum().setup(cache, 2, 1)
    assert bench_engines.GradAccum().track_step(cache, 2, 1) == \
        bench_engines.Engine().track_iteration(cache, 2, "ddp")
    # ZeRO-1's efficiency at 2: DDP's step at 1 (1.0 s) over ZeRO-1's at 2 (3.0 s), not ZeRO-1
    # at 1 over it (which was not run; it would be 1.5 / 3.0)
    assert bench_engines.Engine().track_efficiency(cache, 2, "zero1") == pytest.approx(1 / 3)
    assert bench_engines.Engine().track_efficiency(cache, 2, "ddp") == pytest.approx(1 / 2)


def test_engines_all_brings_back_zero_at_one_rank_and_k_2(monkeypatch):
    monkeypatch.setenv("SWINKIT_ENGINES", "all")
    from benchmarks import bench_engines as module
    module = importlib.reload(module)
    try:
        calls = []
        monkeypatch.setattr(module, "engine_sweep", _fake_engine_sweep(calls))
        monkeypatch.setattr(module, "WORLD_SIZES", (1, 2))
        monkeypatch.setattr(module, "preset", lambda: "test")
        cache = module._engines_and_accumulation(None)
        assert cache["engines"].get("zero2", 1)["engine"]["step_s"] == 2.0
        assert set(cache["accumulation"]) == {2, 4}
    finally:
        monkeypatch.delenv("SWINKIT_ENGINES")
        importlib.reload(module)


def test_whatif_default_runs_above_one_rank_and_its_efficiency_is_not_available(monkeypatch):
    monkeypatch.delenv("SWINKIT_WHATIF_WORLD_SIZES", raising=False)
    from benchmarks import bench_whatif as module
    module = importlib.reload(module)
    asked = {}

    def what_if(preset, world_sizes, remedies, **kw):
        asked["world_sizes"] = world_sizes
        return {"what_if": [{"name": "baseline", "world_size": 2, "measured_iter_s": 1.0,
                             "efficiency_after": 1.0}]}
    monkeypatch.setattr(module, "what_if", what_if)
    monkeypatch.setattr(module, "preset", lambda: "test")
    monkeypatch.setattr(module, "plan_world_sizes",
                        lambda sizes: {ws: None if ws <= 2 else "too many" for ws in sizes})
    sweep = module.Remedy().setup_cache()
    assert asked["world_sizes"] == [2]
    with pytest.raises(NotImplementedError, match="SWINKIT_WHATIF_WORLD_SIZES"):
        module.Remedy().setup(sweep, 1, "baseline")
    assert module.Remedy().track_iteration(sweep, 2, "baseline") == 1.0
    # against the baseline at 2 the figure would read 1.0: not the efficiency it names
    assert math.isnan(module.Remedy().track_efficiency(sweep, 2, "baseline"))


def test_loader_settings_of_one_launch_are_filed_per_setting():
    from swinkit.components.loader_throughput import _by_workers
    sweep = Sweep()
    sweep.results[("supply", 2)] = [{"0": {"rank": 0, "images_per_s": 5.0},
                                     "1": {"rank": 0, "images_per_s": 9.0}},
                                    {"0": {"rank": 1, "images_per_s": 6.0},
                                     "1": {"rank": 1, "images_per_s": 8.0}}]
    sweep.failed[("supply", 1)] = "rank 0 killed"
    _by_workers(sweep, 2, [0, 1])
    _by_workers(sweep, 1, [0, 1])
    assert [r["images_per_s"] for r in sweep.get(2, 1)] == [9.0, 8.0]
    assert [r["rank"] for r in sweep.get(2, 0)] == [0, 1]
    with pytest.raises(RuntimeError, match="rank 0 killed"):
        sweep.get(1, 1)
    assert ("supply", 2) not in sweep.results and ("supply", 1) not in sweep.failed


@pytest.mark.slow
def test_loader_sweep_measures_each_setting_in_one_launch():
    from swinkit.components.loader_throughput import loader_sweep
    sweep = loader_sweep("test", [1], workers=(0, 1), batches=3, progress=lambda *a: None)
    for w in (0, 1):
        ranks = sweep.get(1, w)
        assert [r["rank"] for r in ranks] == [0] and ranks[0]["images_per_s"] > 0
        assert len(ranks[0]["batch_wait_s"]) == 3
    assert sweep.get("demand", 1)["images_per_s"] > 0


@pytest.fixture
def bench_ddp(monkeypatch):
    """bench_ddp as SWINKIT_PREDICT=1 has it (the held-out prediction on, strong scaling off),
    reloaded afterwards as the environment has it."""
    with monkeypatch.context() as env:
        env.setenv("SWINKIT_PREDICT", "1")
        env.delenv("SWINKIT_DDP", raising=False)
        yield importlib.reload(importlib.import_module("benchmarks.bench_ddp"))
    importlib.reload(importlib.import_module("benchmarks.bench_ddp"))


def test_the_default_run_leaves_out_the_held_out_prediction_saying_how_to_have_it(monkeypatch):
    monkeypatch.delenv("SWINKIT_PREDICT", raising=False)
    for module in _reloaded("bench_ddp", "SWINKIT_DDP", monkeypatch):
        monkeypatch.setattr(module, "_held_out", lambda *a, **k: pytest.fail("predicted"))
        sweep = module.with_strong_scaling(Sweep(results={1: {"iter_s": 1.0},
                                                          2: {"iter_s": 1.1}}), "test", [1, 2])
        from benchmarks import bench_predict
        with pytest.raises(NotImplementedError, match="SWINKIT_PREDICT=1"):
            bench_predict.HeldOut().setup(sweep, "model")
        assert module.Scaling().track_efficiency(sweep, 2, "weak") == pytest.approx(1 / 1.1)


@pytest.mark.parametrize("everything", [False, True])
def test_the_default_run_leaves_out_the_all_reduce_at_one_rank(monkeypatch, everything):
    """An all-reduce over one rank moves nothing: not launched by default, skipped with the
    variable that brings it back; SWINKIT_COMM=all runs it."""
    with monkeypatch.context() as env:
        if everything:
            env.setenv("SWINKIT_COMM", "all")
        else:
            env.delenv("SWINKIT_COMM", raising=False)
        module = importlib.reload(importlib.import_module("benchmarks.bench_comm"))
        asked = []

        def sweep_of(world_sizes, preset):
            asked.append(list(world_sizes))
            return Sweep(results={ws: {"ddp_buckets/fp32": {}} for ws in world_sizes})
        env.setattr(module, "_allreduce_sweep", sweep_of)
        env.setattr(module, "WORLD_SIZES", [1, 2])
        env.setattr(module, "preset", lambda: "test")
        sweep = module.AllReduce().setup_cache()
        assert asked == ([[1, 2]] if everything else [[2]])
        module.AllReduce().setup(sweep, 2, "ddp_buckets", "fp32")
        if everything:
            module.AllReduce().setup(sweep, 1, "ddp_buckets", "fp32")
        else:
            with pytest.raises(NotImplementedError, match="SWINKIT_COMM=all"):
                module.AllReduce().setup(sweep, 1, "ddp_buckets", "fp32")
    importlib.reload(importlib.import_module("benchmarks.bench_comm"))  # as the environment is


def test_ddp_default_leaves_out_strong_scaling_and_adds_the_held_out_prediction(bench_ddp,
                                                                                monkeypatch):
    calls = []

    def held_out(sweep, preset, source, target):
        calls.append((preset, source, target, sorted(k for k in sweep.results if k != 1 and
                                                     not isinstance(k, tuple))))
        return {"launches": [{"targets": {2: {"accuracy": {"model": {"accuracy_pct": 96.0}},
                                              "miss_split": {"terms_s": {"compute": -0.02}}}}}]}
    monkeypatch.setattr(bench_ddp, "_held_out", held_out)
    monkeypatch.setattr(bench_ddp, "_exists", lambda function, keyword="preset": True)
    kept = []
    monkeypatch.setattr(bench_ddp, "_store_held_out", kept.append)
    weak = Sweep(results={1: {"iter_s": 1.0}, 2: {"iter_s": 1.1}}, skipped={4: "4 ranks"})
    sweep = bench_ddp.with_strong_scaling(weak, "test", [1, 2, 4])
    assert calls == [("test", 1, 2, [2])]
    assert kept == [sweep.get("held_out")]  # kept whole for tools/attribute.py --predict N

    def fails(report):
        raise KeyError("results_dir")  # e.g. another project's asv.conf.json
    monkeypatch.setattr(bench_ddp, "_store_held_out", fails)
    again = bench_ddp.with_strong_scaling(Sweep(results={1: {"iter_s": 1.0}, 2: {"iter_s": 1.1}}),
                                          "test", [1, 2])
    assert again.get("held_out")["launches"]  # not keeping it loses no measurement
    with pytest.raises(NotImplementedError, match="SWINKIT_DDP=all"):
        bench_ddp.Scaling().track_efficiency(sweep, 2, "strong")
    assert bench_ddp.Scaling().track_efficiency(sweep, 2, "weak") == pytest.approx(1 / 1.1)
    from benchmarks import bench_predict
    assert bench_predict.HeldOut().track_accuracy(sweep, "model") == 96.0
    # where the miss lay, one asv series per term of the split (the split's own names)
    from swinkit.predict.numbers.miss_split import TERMS
    assert bench_predict.MISS_TERMS == list(TERMS)
    assert bench_predict.HeldOutMiss().track_miss(sweep, "compute") == -0.02
    assert math.isnan(bench_predict.HeldOutMiss().track_miss(sweep, "loading"))
    # bench_predict reads bench_ddp's cache: asv runs one setup_cache per key, for both files
    from asv_runner.benchmarks._base import get_setup_cache_key
    assert get_setup_cache_key(bench_predict.HeldOut.setup_cache) == get_setup_cache_key(
        bench_ddp.Iteration.setup_cache)
    # without a run at 2 there is nothing to score: skipped with the reason
    alone = bench_ddp.with_strong_scaling(Sweep(results={1: {"iter_s": 1.0}}), "test", [1, 2])
    with pytest.raises(NotImplementedError, match="no run at world size 2"):
        bench_predict.HeldOut().setup(alone, "model")


def test_held_out_gives_the_run_at_2s_own_reason_when_it_is_missing(bench_ddp, monkeypatch):
    monkeypatch.setattr(bench_ddp, "_exists", lambda function, keyword="preset": True)
    monkeypatch.setattr(bench_ddp, "_store_held_out", lambda report: pytest.fail("kept"))
    failed = bench_ddp.with_strong_scaling(
        Sweep(results={1: {"iter_s": 1.0}}, failed={2: "rank 1 killed (SIGKILL)"}),
        "test", [1, 2])
    with pytest.raises(RuntimeError, match="world size 2 failed: rank 1 killed"):
        failed.get("held_out")
    short = bench_ddp.with_strong_scaling(
        Sweep(results={1: {"iter_s": 1.0}}, skipped={2: "needs 2 CPU cores"}), "test", [1, 2])
    with pytest.raises(NotImplementedError, match="needs 2 CPU cores"):
        short.get("held_out")
    # a world size the machine cannot hold keeps that reason for strong scaling too
    with pytest.raises(NotImplementedError, match="needs 2 CPU cores"):
        short.get("strong", 2)


def test_the_held_out_report_is_kept_under_asvs_machine_and_the_suites_commit(tmp_path,
                                                                              monkeypatch):
    """Where run_suite's asv run is (SWINKIT_ASV_*; else asv's own ASV_COMMIT where it
    installed the commit, and the results folder of the asv.conf.json in asv's working folder)
    and under the machine `asv machine` recorded; nothing without a commit."""
    from swinkit import run_suite
    (tmp_path / "asv.conf.json").write_text('// asv allows comments\n{"results_dir": "res"}')
    (tmp_path / ".asv-machine.json").write_text('{"box": {"machine": "box"}, "version": 1}')
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("ASV_CONF_DIR", str(tmp_path))
    for name in (run_suite.COMMIT_ENV, run_suite.RESULTS_ENV, "ASV_COMMIT"):
        monkeypatch.delenv(name, raising=False)
    assert run_suite.store_held_out({"launches": []}) is None
    assert not list(tmp_path.rglob("*held-out*"))
    monkeypatch.setenv("ASV_COMMIT", "f" * 40)  # asv run A..B: its conf's results folder
    assert run_suite.store_held_out({}) == tmp_path / "swinkit-held-out" / "box" / "ffffffff.json"
    monkeypatch.setenv(run_suite.COMMIT_ENV, "0123456789" + "e" * 30)
    monkeypatch.setenv(run_suite.RESULTS_ENV, str(tmp_path / "elsewhere" / "results"))
    path = run_suite.store_held_out({"launches": [], "preset": "test"})
    assert path == tmp_path / "elsewhere" / "swinkit-held-out" / "box" / "01234567.json"
    assert json.loads(path.read_text()) == {"launches": [], "preset": "test",
                                            "commit": "0123456789" + "e" * 30}


def test_the_machine_is_the_one_asv_files_this_hosts_results_under(tmp_path, monkeypatch):
    """As asv.machine.MachineCollection.load picks it: the entry named after this host, else
    the only one (a home folder shared by cluster nodes); none where asv would refuse. The
    first entry of the file is never the answer by position alone."""
    from swinkit import run_suite
    monkeypatch.setattr(run_suite.platform, "node", lambda: "node2")
    machines = tmp_path / ".asv-machine.json"
    assert run_suite.asv_machine(machines) is None  # no file: `asv machine --yes` first
    machines.write_text('{"version": 1, "node1": {"machine": "node1"}, '
                        '"node2": {"machine": "node2"}}')
    assert run_suite.asv_machine(machines) == "node2"
    machines.write_text('{"version": 1, "node1": {"machine": "node1"}}')
    assert run_suite.asv_machine(machines) == "node1"
    machines.write_text('{"version": 1, "node1": {"machine": "node1"}, '
                        '"node3": {"machine": "node3"}}')
    assert run_suite.asv_machine(machines) is None
    # asv files results under the entry's "machine" field, which `asv machine` lets differ
    machines.write_text('{"version": 1, "node2": {"machine": "gpu-box"}}')
    assert run_suite.asv_machine(machines) == "gpu-box"


def test_one_failed_loader_setting_fails_only_itself():
    from swinkit.components.loader_throughput import _by_workers
    sweep = Sweep()
    sweep.results[("supply", 2)] = [
        {"0": {"rank": 0, "images_per_s": 5.0}, "4": {"rank": 0, "error": "DataLoader timed out"}},
        {"0": {"rank": 1, "images_per_s": 6.0}, "4": {"rank": 1, "images_per_s": 2.0}}]
    _by_workers(sweep, 2, [0, 4])
    assert [r["images_per_s"] for r in sweep.get(2, 0)] == [5.0, 6.0]
    with pytest.raises(RuntimeError, match="rank 0: DataLoader timed out"):
        sweep.get(2, 4)


def test_a_failing_basis_leaves_the_ddp_run_standing(monkeypatch):
    """A paired run whose components cannot give a basis (here: a rank without a record)
    keeps its own measurements, with the reason (a TypeError here, which it once let escape)."""
    from swinkit.runs import ddp_sweep
    from swinkit.runs.ddp_run import DDPRunSpec
    monkeypatch.setattr(ddp_sweep, "run_ddp", lambda spec, progress: {
        "iter_s": 0.5, "ranks": [{"rank": 0}], "local_run": {"ranks": [None]}})
    spec = DDPRunSpec(preset="test", nproc_per_node=1, iters=1, warmup=0, paired=True)
    result = ddp_sweep._run(spec, progress=lambda *a: None)
    assert result["iter_s"] == 0.5 and "basis" not in result
    assert result["basis_failed"] and result["prediction_failed"]


def test_the_model_benchmark_measures_other_precisions_at_one_batch_unless_asked(monkeypatch):
    """The default run adds one process per extra precision (the per-rank batch);
    SWINKIT_MODEL=all asks for every batch. An older commit's swinkit, whose sweep takes no
    precisions, is read as fp32."""
    from benchmarks import bench_model
    calls = []

    def fake(presets, batches, precisions=None, every_batch=False):
        calls.append((tuple(precisions), every_batch))
        return Sweep()
    monkeypatch.setattr(bench_model, "model_sweep", fake)
    monkeypatch.setattr(bench_model, "accepts", lambda function, keyword: True)
    monkeypatch.delenv("SWINKIT_MODEL", raising=False)
    bench_model.ForwardBackward().setup_cache()
    monkeypatch.setenv("SWINKIT_MODEL", "all")
    bench_model.Memory().setup_cache()
    assert calls == [(("fp32", "tf32", "bf16", "fp16"), False),
                     (("fp32", "tf32", "bf16", "fp16"), True)]

    old = Sweep(results={("cpu", "per_rank"): {"peak_memory_mib": 5.0}},
                skipped={("thesis", "per_rank"): "runs on a GPU; none here"})
    monkeypatch.setattr(bench_model, "model_sweep", lambda presets, batches: old)
    monkeypatch.setattr(bench_model, "accepts", lambda function, keyword: False)
    sweep = bench_model.ForwardBackward().setup_cache()
    assert bench_model.Memory().track_peak_memory(sweep, "cpu", "per_rank", "fp32") == 5.0
    with pytest.raises(NotImplementedError, match="none here"):
        bench_model.Memory().setup(sweep, "thesis", "per_rank", "fp32")
    with pytest.raises(NotImplementedError):
        bench_model.Memory().setup(sweep, "cpu", "per_rank", "bf16")
