"""asv runs every parameter combination of a track_* benchmark in a process of its own that
unpickles the setup_cache's Sweep and returns a number: hundreds of processes per run. Those
processes must not import torch or MMSeg (about 1.5 s each); the workloads are imported only
when setup_cache runs. These tests run a track process the way asv does and look at what it
imported, and keep the param values the benchmark files write out equal to swinkit's."""
import importlib
import inspect
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from swinkit.runs.sweep import Sweep

ROOT = Path(__file__).resolve().parents[1]
MODULES = ["bench_data", "bench_model", "bench_comm", "bench_ddp", "bench_whatif",
           "bench_validate", "bench_predict", "bench_converge"]
HEAVY = ("torch", "mmseg", "mmcv", "mmengine", "cv2", "deepspeed")

# One track benchmark per file, parameter combination 0, with a Sweep holding what it reads,
# and the value asv should store.
TRACKS = {
    "bench_ddp": ("bench_ddp.Iteration.track_mean_iteration-0",
                  Sweep(results={1: {"iter_mean_s": 0.5}}), 0.5),
    "bench_comm": ("bench_comm.AllReduce.track_time-0",  # (1, backbone_flat, fp32)
                   Sweep(results={1: {"backbone_flat/fp32": {"seconds": [0.25, 0.5]}}}),
                   {"samples": [0.25, 0.5], "number": 1}),
    "bench_data": ("bench_data.ModelDemand.track_images_per_s_per_rank-0",
                   Sweep(results={("demand", 1): {"images_per_s": 3.0}}), 3.0),
    "bench_whatif": ("bench_whatif.Remedy.track_iteration-0",  # (world size 1, baseline)
                     Sweep(results={"what_if": {"what_if": [
                         {"name": "baseline", "world_size": 1, "measured_iter_s": 0.25}]}}),
                     0.25),
    "bench_model": ("bench_model.Memory.track_peak_memory-0",  # (thesis, per_rank, fp32)
                    Sweep(results={("thesis", "per_rank", "fp32"): {"peak_memory_mib": 123.0}}),
                    123.0),
    "bench_validate": ("bench_validate.Validation.track_share-0",  # (1, compute_ms/one)
                       Sweep(results={1: {"compute_ms/one": {"share": 0.9}}}), 0.9),
    "bench_converge": ("bench_converge.Convergence.track_steps_to_target-0",  # (1, 2, linear)
                       Sweep(results={1: {"cells": {"2/linear": {"steps": 120}}}}), 120),
    "bench_predict": ("bench_predict.HeldOut.track_accuracy-0",  # (model)
                      Sweep(results={"held_out": {"launches": [{"targets": {2: {
                          "accuracy": {"model": {"accuracy_pct": 97.0}}}}}]}}), 97.0),
}

# What asv_runner's `run` command does in the benchmark process (asv/benchmark.py run ...):
# import the benchmark's module, unpickle ./cache.pickle, setup, call, write the result.
_TRACK_PROCESS = """
import json, sys
from asv_runner.run import _run
_run((sys.argv[1], sys.argv[2], "{}", "None", sys.argv[3]))
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in %r)))
""" % (HEAVY,)


@pytest.mark.parametrize("module", MODULES)
def test_a_track_process_imports_no_torch_or_mmseg(module, tmp_path):
    pytest.importorskip("asv_runner")
    benchmark_id, sweep, expected = TRACKS[module]
    (tmp_path / "cache.pickle").write_bytes(pickle.dumps(sweep))
    result = tmp_path / "result.json"
    run = subprocess.run([sys.executable, "-c", _TRACK_PROCESS, str(ROOT / "benchmarks"),
                          benchmark_id, str(result)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(result.read_text()) == expected
    heavy = json.loads(run.stdout.strip().splitlines()[-1])
    assert heavy == [], f"{benchmark_id}'s track process imported {heavy[:10]}"


def test_sweep_unpickles_without_torch(tmp_path):
    """The cached Sweep is pickled as swinkit.runs.sweep.Sweep (that module stays light)
    and as plain data: the runs' environment record holds torch.__version__, a TorchVersion,
    which would otherwise import torch when unpickled; numpy scalars become Python numbers."""
    np = pytest.importorskip("numpy")
    from swinkit.runs.ddp_run import environment
    env = environment()
    assert type(env["torch"]) is not str  # what this test is about (TorchVersion)
    sweep = Sweep(results={1: {"x": np.float64(0.5), "environment": env, "n": [np.int64(2)]}},
                  skipped={2: "why"}, meta={"environment": env})
    path = tmp_path / "cache.pickle"
    path.write_bytes(pickle.dumps(sweep))
    assert type(sweep.results[1]["x"]) is np.float64  # pickling leaves the sweep itself alone
    code = ("import pickle, sys; s = pickle.load(open(sys.argv[1], 'rb')); "
            "r = s.get(1); assert r['x'] == 0.5 and type(r['x']) is float, r; "
            "assert r['n'] == [2] and type(r['n'][0]) is int, r; "
            f"assert r['environment']['torch'] == {str(env['torch'])!r}, r; "
            "from swinkit.runs.sweep import Sweep, WORLD_SIZES, plan_world_sizes; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    run = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "[]"


def test_written_out_params_equal_swinkits():
    """The benchmark files write out what modules importing torch define; keep them equal."""
    from swinkit.measure import phases
    from swinkit.components import allreduce, forward_backward
    from swinkit.rank import ddp
    from swinkit.runs import sweep

    from benchmarks import bench_comm, bench_ddp, bench_model, common
    assert common.WORLD_SIZES == sweep.WORLD_SIZES
    assert bench_comm.LAYOUTS == allreduce.LAYOUTS
    assert list(bench_comm.DTYPES) == list(allreduce.DTYPES)
    assert bench_ddp.PHASES == phases.PHASES == ddp.PHASES
    assert bench_ddp.Phase.params[1] == list(phases.PHASES)
    from swinkit.runs.ddp_sweep import SCALING
    assert bench_ddp.SCALINGS == SCALING and bench_ddp.Scaling.params[1] == list(SCALING)
    from swinkit.measure.phases import PHASES
    assert bench_ddp.PREDICTED_PARTS == PHASES + ("sync_s",)
    assert bench_ddp.PredictedPart.params[1] == list(bench_ddp.PREDICTED_PARTS)
    assert bench_model.SCOPES == forward_backward.SCOPES
    assert bench_model.OPS == forward_backward.OPS
    assert bench_model.BATCHES == list(forward_backward.BATCHES)
    from swinkit.precision import PRECISIONS
    assert bench_model.PRECISIONS == tuple(PRECISIONS)
    from benchmarks import bench_validate
    from swinkit.attribution.validation import PLACEMENTS
    from swinkit.injection import DELAY_FIELDS  # the injection kinds' table
    assert bench_validate.ALL == [f"{c}/{p}" for c in DELAY_FIELDS for p in PLACEMENTS]


@pytest.mark.parametrize("module", MODULES)
def test_lazy_workloads_resolve(module):
    """Each lazy stand-in names a function that exists (a rename fails here, not at the start
    of an hour-long asv run), with the parameters the benchmark's setup_cache passes."""
    mod = importlib.import_module(f"benchmarks.{module}")
    stand_ins = [f for _, f in inspect.getmembers(mod, callable) if hasattr(f, "target")]
    # bench_data imports a torch-free module directly; bench_predict reads bench_ddp's cache
    if module not in ("bench_data", "bench_predict"):
        assert stand_ins, f"{module} has no lazy workload"
    for f in stand_ins:
        name, attr = f.target.split(":")
        real = getattr(importlib.import_module(name), attr)
        assert callable(real) and real.__name__ == f.__name__, f.target


def test_moved_modules_resolve_now_and_under_their_former_path(monkeypatch):
    """asv's history mode runs these benchmark files against older commits: each moved
    module's new path exists in this swinkit (a stale entry would hide a typo), every
    ``lazy`` target of the files resolves here, and a path missing from a commit's swinkit is
    looked up under its former one."""
    import importlib.util

    from benchmarks import bench_comm, bench_ddp, bench_engines, bench_model, common
    for new in common.FORMERLY:
        assert importlib.util.find_spec(new) is not None, new
    for stand_in in (bench_ddp._held_out, bench_ddp.ddp_sweep, bench_comm._allreduce_sweep,
                     bench_engines.engine_sweep, bench_model.model_sweep):
        path, name = stand_in.target.split(":")
        assert hasattr(common.module(path), name), stand_in.target
    monkeypatch.setitem(common.FORMERLY, "swinkit.predict.no_such_module", "swinkit.injection")
    assert common.module("swinkit.predict.no_such_module").__name__ == "swinkit.injection"
