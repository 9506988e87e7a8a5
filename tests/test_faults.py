"""The reliability fault matrix (docs/troubleshooting.md), one or more named tests per row.

Row -> tests (module::test):
  1  killed rank             test_dist::test_killed_rank_is_named_with_its_signal
  2  raising rank            test_dist::test_raising_rank_traceback_is_the_root_cause
  3  hung rank               test_dist::test_hung_rank_is_named_not_the_survivor
  4  busy, no progress       test_dist::test_watchdog_ends_spinning_ranks
  5  rank never joins        test_dist::test_rank_that_never_joins_is_named
  6  port taken              test_dist::test_busy_explicit_port_fails_fast, test_default_port_is_free
  7  invalid config          test_dist::test_bad_launch_config_names_the_field,
                             test_dist::test_validation_holds_under_python_O,
                             test_config::test_bad_values_name_the_field,
                             test_ddp::test_ddp_cli_rejects_bad_config_before_starting
  8  bad images / masks      test_data::test_bad_sample_names_file_and_index,
                             test_data::test_verify_data_names_every_bad_file,
                             test_faults::test_bit_flipped_files_are_named,
                             test_faults::test_skip_mode_replaces_and_records_up_to_the_cap,
                             test_faults::test_corrupt_sample_in_ddp_names_file_and_index,
                             test_faults::test_corrupt_sample_in_loader_benchmark_is_named
  9  loader worker dies/stalls test_faults::test_killed_loader_worker_is_reported,
                             test_faults::test_stalled_loader_times_out
 10  out of memory           test_faults::test_out_of_memory_names_rank_and_batch,
                             test_faults::test_a_failed_sweep_entry_does_not_stop_the_rest
 11  no GPU / no NVML        test_faults::test_nvml_absent_records_null_with_one_warning,
                             test_faults::test_gpu_only_parameters_skip_with_a_reason
 12  interrupted / Ctrl-C    test_dist::test_ctrl_c_stops_every_rank_and_keeps_old_results,
                             test_atomic::test_failed_write_keeps_old_content_and_leaves_no_temp,
                             test_atomic::test_killed_writer_leaves_old_or_new,
                             test_attribute_cli::test_latest_commit_report_json_and_html (corrupt file skipped, named)
 13  noisy measurement       test_faults::test_spread_flags_unstable_and_too_few,
                             test_faults::test_attribution_flags_unstable_runs
 14  wrong all-reduce        test_benchmarks::test_corrupted_reduction_fails_with_the_count
 15  leftovers of a crash    test_atomic::test_stale_lock_and_temp_files_are_taken_over_with_a_warning,
                             test_atomic::test_live_run_is_not_trampled
 asv: a crashing benchmark is recorded as failed, the next still runs
                             test_faults::test_asv_records_a_crashing_benchmark_as_failed
"""
import math
import os
import time
import warnings
from pathlib import Path

import pytest
from conftest import asv_result_values

from swinkit.data.errors import CorruptSampleError
from swinkit.data.loader import LoaderError, batches, build_dataset, build_loader
from swinkit.launch import LaunchConfig, LaunchError, launch
from swinkit.runs.ddp_run import DDPRunSpec, run_ddp

ROOT = Path(__file__).resolve().parents[1]


def _cfg(root, **overrides):
    from swinkit.config import load_config
    return load_config("test", root, overrides)


def _flip_bits(path: Path, offset: int, count: int = 8):
    data = bytearray(path.read_bytes())
    for i in range(offset, offset + count):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _sample_paths(root, i):
    img = sorted((root / "images" / "training").glob("*.jpg"))[i]
    return img, root / "annotations" / "training" / (img.stem + ".png")


def test_bit_flipped_files_are_named(data_copy):
    from swinkit.data.verify import verify_data
    img, _ = _sample_paths(data_copy, 2)
    _, seg = _sample_paths(data_copy, 4)
    _flip_bits(img, 2, 16)     # the JPEG header: no decoder accepts it
    _flip_bits(seg, 40, 8)     # inside the PNG's first chunk: its CRC fails
    report = verify_data(data_copy, progress=None)
    assert {p.path for p in report.problems} == {str(img), str(seg)}
    dataset = build_dataset(_cfg(data_copy))
    index = next(i for i in range(len(dataset)) if dataset.get_data_info(i)["img_path"] == str(img))
    with pytest.raises(CorruptSampleError, match=f"sample {index}: {img}"):
        dataset[index]


def test_skip_mode_replaces_and_records_up_to_the_cap(data_copy):
    bad = [_sample_paths(data_copy, i)[0] for i in (3, 4)]
    for path in bad:
        path.write_bytes(b"garbage")
    dataset = build_dataset(_cfg(data_copy, skip_bad_samples=2))
    index = next(i for i in range(len(dataset)) if dataset.get_data_info(i)["img_path"] == str(bad[0]))
    sample = dataset[index]
    skipped = sample["data_samples"].metainfo["skipped_samples"]
    assert len(skipped) == 2 and str(bad[0]) in skipped[0] and str(bad[1]) in skipped[1]
    strict = build_dataset(_cfg(data_copy, skip_bad_samples=1))
    with pytest.raises(CorruptSampleError, match="more than skip_bad_samples=1"):
        strict[index]


@pytest.mark.slow
def test_corrupt_sample_in_ddp_names_file_and_index(data_copy, no_orphans):
    img, _ = _sample_paths(data_copy, 5)
    img.write_bytes(img.read_bytes()[:300])
    spec = DDPRunSpec(preset="test", nproc_per_node=2, iters=4, warmup=2, workers=0,
                      data_root=str(data_copy),
                      launch=LaunchConfig(nproc_per_node=2, pg_timeout_s=10, wall_timeout_s=120))
    with pytest.raises(LaunchError) as info:
        run_ddp(spec, progress=lambda s: None)
    d = info.value.diagnosis
    assert "CorruptSampleError" in d.summary and str(img) in d.summary
    assert "sample " in d.summary and d.rank in (0, 1)


@pytest.mark.slow
def test_corrupt_sample_in_loader_benchmark_is_named(data_copy, no_orphans):
    _, seg = _sample_paths(data_copy, 1)
    seg.write_bytes(b"")
    with pytest.raises(LaunchError) as info:
        launch("swinkit.components.loader_throughput:loader_rank",
               dict(preset="test", data_root=str(data_copy), workers=0, batches=8),
               LaunchConfig(nproc_per_node=2, pg_timeout_s=10, wall_timeout_s=120), quiet=True)
    assert f"{seg}: file is empty" in info.value.diagnosis.summary


def _first_index(cfg):
    loader = build_loader(cfg, workers=0)
    loader.sampler.set_epoch(0)
    return next(iter(loader.sampler))


def test_killed_loader_worker_is_reported(test_cfg, monkeypatch):
    monkeypatch.setenv("SWINKIT_FAULT", f"loader_kill:{_first_index(test_cfg)}")
    loader = build_loader(test_cfg, workers=1, timeout_s=30)
    with pytest.raises(LoaderError, match=r"loader worker died \(signal 9, possible host OOM"):
        next(batches(loader))


@pytest.mark.slow
def test_stalled_loader_times_out(test_cfg, monkeypatch):
    monkeypatch.setenv("SWINKIT_FAULT", f"loader_stall:{_first_index(test_cfg)}")
    loader = build_loader(test_cfg, workers=1, timeout_s=3)
    start = time.monotonic()
    with pytest.raises(LoaderError, match="loader timed out after 3 s"):
        next(batches(loader))
    assert time.monotonic() - start < 3 + 5
    del loader  # its stalled worker is stopped with it


@pytest.mark.slow
def test_out_of_memory_names_rank_and_batch(no_orphans):
    """The cpu preset: its iterations allocate tens of MB afresh, so a capped address space
    fails on the next one (the test preset's small tensors come from reused heap)."""
    spec = DDPRunSpec(preset="cpu", nproc_per_node=2, iters=2, warmup=1, workers=0,
                      launch=LaunchConfig(nproc_per_node=2, pg_timeout_s=10, wall_timeout_s=300))
    os.environ["SWINKIT_FAULT"] = "oom:1"
    try:
        with pytest.raises(LaunchError) as info:
            run_ddp(spec, progress=lambda s: None)
    finally:
        del os.environ["SWINKIT_FAULT"]
    d = info.value.diagnosis
    assert d.rank == 1 and "OutOfMemory" in d.summary
    assert "out of memory at batch size 2 per rank" in d.summary


def test_a_failed_sweep_entry_does_not_stop_the_rest():
    from swinkit.runs.sweep import Sweep

    def oom():
        raise MemoryError("simulated")
    sweep = Sweep()
    sweep.run(1, oom, progress=lambda s: None)
    sweep.run(2, lambda: {"ok": True}, progress=lambda s: None)
    assert sweep.get(2) == {"ok": True}
    with pytest.raises(RuntimeError, match="MemoryError: simulated"):
        sweep.get(1)


def test_nvml_absent_records_null_with_one_warning():
    import torch

    from swinkit.measure.samplers import NvmlSampler
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: NVML works here")
    sampler = NvmlSampler()
    sampler.start()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figures = sampler.stop()
    assert figures["gpu_util_percent"] is None and figures["gpu_mem_used_mib"] is None
    assert figures["nvml_error"]
    assert len([w for w in caught if "GPU utilisation not recorded" in str(w.message)]) == 1


def test_gpu_only_parameters_skip_with_a_reason():
    import torch

    from swinkit.components.forward_backward import model_sweep
    from swinkit.runs.sweep import plan_world_sizes
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert "needs 1 GPUs; this machine has 0" in plan_world_sizes([1], backend="nccl")[1]
    sweep = model_sweep(["thesis"], progress=lambda s: None)
    with pytest.raises(NotImplementedError, match="runs on a GPU"):
        sweep.get("thesis", "per_rank", "fp32")


def test_spread_flags_unstable_and_too_few():
    from swinkit.measure.stats import summarize
    steady = summarize([1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0])
    noisy = summarize([1.0, 1.5, 0.7, 1.3, 0.8, 1.4, 0.9])
    assert not steady.unstable and not steady.too_few
    assert noisy.unstable and noisy.to_dict()["unstable"] is True
    assert summarize([1.0, 1.0, 1.0]).too_few
    assert math.isnan(summarize([]).median)


def test_attribution_flags_unstable_runs():
    from swinkit.attribution.analysis import analyse
    from swinkit.attribution.loss_split import Measured
    from swinkit.measure.phases import BLAME_KEYS
    from swinkit.attribution.inputs import Inputs
    comps = {c: 0.1 for c in BLAME_KEYS}
    r = analyse(Inputs({1: Measured(1, 0.6, comps, iter_iqr_ratio=0.25, samples=5),
                        2: Measured(2, 0.7, dict(comps, exposed_comm=0.2), 0.02, 10)}))
    assert any("unstable" in n and "[1]" in n for n in r["notes"])
    assert any("fewer than 7 samples" in n for n in r["notes"])
    assert r["runs"][0]["unstable"] and not r["runs"][1]["unstable"]


@pytest.mark.slow
def test_asv_records_a_crashing_benchmark_as_failed(asv_scratch, no_orphans):
    """Under asv, a benchmark whose rank is killed is failed (not a number), and the next
    benchmark in the same run still produces its result. asv runs benchmarks in name order,
    so the next one is bench_engines' (a cheaper setup_cache than bench_model's, the file
    after it): DDP at world size 1, which has no rank 1 to kill."""
    run = asv_scratch(["run", "-b", "bench_ddp.Iteration.track_iteration|"
                                    "bench_engines.Engine.track_iteration"],
                      SWINKIT_FAULT="kill:1:1")
    out = run.stdout + run.stderr
    assert "was killed by SIGKILL" in out, out[-3000:]
    # the order asv ran them in: the crash first, the next file's benchmark after it
    assert out.index("was killed by SIGKILL") < out.index("bench_engines.Engine.track_iteration")
    ddp_values = asv_result_values(asv_scratch.results, "bench_ddp.Iteration.track_iteration")
    assert ddp_values[1] is None     # world size 2, where rank 1 was killed: failed, no number
    assert ddp_values[0] > 0         # world size 1 has no rank 1: measured in the same sweep
    engines = asv_result_values(asv_scratch.results, "bench_engines.Engine.track_iteration")
    assert engines[0] > 0            # (world size 1, ddp): the next benchmark still ran
