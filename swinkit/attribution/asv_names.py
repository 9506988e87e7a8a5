"""The asv benchmark ids the attribution reads, and where the suite's side records live (its
environment record, and bench_predict's held-out prediction).

One place, so a renamed benchmark fails a test (``tests/test_benchmarks.py`` checks every id here
against the classes in ``benchmarks/``) instead of silently emptying the report.
"""
from __future__ import annotations

from pathlib import Path

DDP_BLAME = "bench_ddp.Blame.track_seconds"
DDP_WAIT_CAUSED = "bench_ddp.Blame.track_wait_caused"
DDP_STRAGGLER_RANK = "bench_ddp.Iteration.track_straggler_rank"
DDP_ITERATION = "bench_ddp.Iteration.track_iteration"
DDP_LAST_BUCKET_FRACTION = "bench_ddp.Iteration.track_last_bucket_fraction"
DDP_LOADER_WORKERS = "bench_ddp.Iteration.track_loader_workers"
DDP_IMAGES_PER_RANK = "bench_ddp.Iteration.track_images_per_rank"
DDP_PREDICTED = "bench_ddp.Prediction.track_iteration"
DDP_PREDICTED_PARTS = "bench_ddp.PredictedPart.track_seconds"
MODEL_TIME = "bench_model.ForwardBackward.track_time"
LOADER_SUPPLY = "bench_data.Loader.track_images_per_s_per_rank"
ALLREDUCE_TIME = "bench_comm.AllReduce.track_time"
WHATIF_ITERATION = "bench_whatif.Remedy.track_iteration"
WHATIF_PREDICTED = "bench_whatif.Remedy.track_predicted_iteration"
WHATIF_EFFICIENCY = "bench_whatif.Remedy.track_efficiency"
GRAD_ACCUM_STEP = "bench_engines.GradAccum.track_step"
GRAD_ACCUM_COMM_ROUNDS = "bench_engines.GradAccum.track_comm_rounds"
GRAD_ACCUM_COMM_PER_IMAGE = "bench_engines.GradAccum.track_comm_per_image"
GRAD_ACCUM_WIRE_BYTES_PER_IMAGE = "bench_engines.GradAccum.track_wire_bytes_per_image"
CONVERGE_EFFICIENCY_STEPS = "bench_converge.Efficiency.track_steps"
CONVERGE_EFFICIENCY_TIME = "bench_converge.Efficiency.track_time"
CONVERGE_EFFICIENCY_TARGET = "bench_converge.Efficiency.track_to_target"

ALL = tuple(v for k, v in dict(globals()).items() if k.isupper() and isinstance(v, str)
            and v.startswith("bench_"))


def environment_path(results_dir: Path, machine: str, commit: str) -> Path:
    """The suite's environment record of (machine, commit): beside asv's results folder (asv
    expects that folder to hold only its own files)."""
    return Path(results_dir).parent / "swinkit-environment" / machine / f"{commit[:8]}.json"


def held_out_root(results_dir: Path) -> Path:
    """Where bench_predict's held-out reports are kept, one folder per machine: beside asv's
    results folder, as the environment records."""
    return Path(results_dir).parent / "swinkit-held-out"


def held_out_path(results_dir: Path, machine: str, commit: str) -> Path:
    """bench_predict's held-out report of (machine, commit), whole (asv keeps only the numbers
    a track_* returns; ``tools/attribute.py --predict N`` predicts from the basis and timings
    kept here)."""
    return held_out_root(results_dir) / machine / f"{commit[:8]}.json"
