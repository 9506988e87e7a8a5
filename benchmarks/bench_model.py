"""SwinV2 forward/backward in one process: backbone and whole segmentor, per preset, batch and
training precision."""
import os

from swinkit.config import PRESETS  # torch-free

from .common import accepts, lazy, samples

# Imported when setup_cache runs, not here (see common.py: track processes import no torch).
model_sweep = lazy("swinkit.components.forward_backward:model_sweep")
# swinkit.components.forward_backward's SCOPES, OPS and BATCHES' keys, and swinkit.precision's
# PRECISIONS, written out (tests/test_benchmark_imports.py keeps them equal).
SCOPES = ("backbone", "segmentor")
OPS = ("forward", "forward_backward", "optimizer")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")

MODEL_PRESETS = [p for p in PRESETS if p != "test"]
BATCHES = ["per_rank", "double"]


def sweep_all():
    """Every (preset, batch, precision) this machine can measure as itself: on CPU fp32, and
    bf16 where the CPU has bf16 instructions (tf32 would be fp32 again, fp16 is refused: each
    skipped with the reason). fp32 at every batch, the others at the per-rank batch unless
    SWINKIT_MODEL=all."""
    if not accepts(model_sweep, "precisions"):  # an older commit's swinkit: fp32 only
        old = model_sweep(MODEL_PRESETS, BATCHES)
        old.results = {(*k, "fp32"): v for k, v in old.results.items()}
        old.skipped = {(*k, "fp32"): v for k, v in old.skipped.items()}
        old.failed = {(*k, "fp32"): v for k, v in old.failed.items()}
        return old
    return model_sweep(MODEL_PRESETS, BATCHES, precisions=PRECISIONS,
                       every_batch=os.environ.get("SWINKIT_MODEL") == "all")


class ForwardBackward:
    timeout = 3600
    params = [MODEL_PRESETS, BATCHES, list(SCOPES), list(OPS), list(PRECISIONS)]
    param_names = ["preset", "batch", "scope", "op", "precision"]

    def setup_cache(self):
        return sweep_all()

    def setup(self, sweep, preset, batch, scope, op, precision):
        sweep.get(preset, batch, precision)

    def track_time(self, sweep, preset, batch, scope, op, precision):
        return samples(sweep.get(preset, batch, precision)["results"][f"{scope}/{op}"]["seconds"])
    track_time.unit = "s"

    def track_achieved_tflops(self, sweep, preset, batch, scope, op, precision):
        result = sweep.get(preset, batch, precision)["results"][f"{scope}/{op}"]
        return result["achieved_flops"] / 1e12
    track_achieved_tflops.unit = "TFLOP/s"

    def track_mfu(self, sweep, preset, batch, scope, op, precision):
        return 100 * sweep.get(preset, batch, precision)["results"][f"{scope}/{op}"]["mfu"]
    track_mfu.unit = "% of the measured matmul peak of the precision"


class Memory:
    timeout = 3600
    params = [MODEL_PRESETS, BATCHES, list(PRECISIONS)]
    param_names = ["preset", "batch", "precision"]
    setup_cache = ForwardBackward.setup_cache

    def setup(self, sweep, preset, batch, precision):
        sweep.get(preset, batch, precision)

    def track_peak_memory(self, sweep, preset, batch, precision):
        return sweep.get(preset, batch, precision)["peak_memory_mib"]
    track_peak_memory.unit = "MiB"
