"""SwinV2 forward/backward in one process: backbone and whole segmentor, per preset and batch."""
from swinkit.config import PRESETS  # torch-free

from .common import lazy, samples

# Imported when setup_cache runs, not here (see common.py: track processes import no torch).
model_sweep = lazy("swinkit.components.forward_backward:model_sweep")
# swinkit.components.forward_backward's SCOPES, OPS and BATCHES' keys, written out (that module
# imports torch; tests/test_benchmark_imports.py keeps them equal).
SCOPES = ("backbone", "segmentor")
OPS = ("forward", "forward_backward", "optimizer")

MODEL_PRESETS = [p for p in PRESETS if p != "test"]
BATCHES = ["per_rank", "double"]


class ForwardBackward:
    timeout = 3600
    params = [MODEL_PRESETS, BATCHES, list(SCOPES), list(OPS)]
    param_names = ["preset", "batch", "scope", "op"]

    def setup_cache(self):
        return model_sweep(MODEL_PRESETS, BATCHES)

    def setup(self, sweep, preset, batch, scope, op):
        sweep.get(preset, batch)

    def track_time(self, sweep, preset, batch, scope, op):
        return samples(sweep.get(preset, batch)["results"][f"{scope}/{op}"]["seconds"])
    track_time.unit = "s"

    def track_achieved_tflops(self, sweep, preset, batch, scope, op):
        return sweep.get(preset, batch)["results"][f"{scope}/{op}"]["achieved_flops"] / 1e12
    track_achieved_tflops.unit = "TFLOP/s"

    def track_mfu(self, sweep, preset, batch, scope, op):
        return 100 * sweep.get(preset, batch)["results"][f"{scope}/{op}"]["mfu"]
    track_mfu.unit = "% of measured matmul peak"


class Memory:
    timeout = 3600
    params = [MODEL_PRESETS, BATCHES]
    param_names = ["preset", "batch"]
    setup_cache = ForwardBackward.setup_cache

    def setup(self, sweep, preset, batch):
        sweep.get(preset, batch)

    def track_peak_memory(self, sweep, preset, batch):
        return sweep.get(preset, batch)["peak_memory_mib"]
    track_peak_memory.unit = "MiB"
