"""Data-loader throughput of the MMSeg ADE20K pipeline: N loaders on the machine's cores."""
import statistics

# torch-free at import (its workload imports are inside its functions; see common.py)
from .common import module

_loader = module("swinkit.components.loader_throughput")
STAGE_NAMES, loader_sweep = _loader.STAGE_NAMES, _loader.loader_sweep

from .common import WORLD_SIZES, preset, samples

WORKERS = [0, 1, 2, 4]


class _Sweep:
    timeout = 3600

    def setup_cache(self):
        return loader_sweep(preset(), WORLD_SIZES, WORKERS)


class Loader(_Sweep):
    """Images per second one rank's loader supplies, and all ranks together."""
    params = [list(WORLD_SIZES), WORKERS]
    param_names = ["world_size", "workers"]

    def setup(self, sweep, world_size, workers):
        sweep.get(world_size, workers)

    def track_images_per_s_per_rank(self, sweep, world_size, workers):
        return samples([r["images_per_s"] for r in sweep.get(world_size, workers)])
    track_images_per_s_per_rank.unit = "images/s"

    def track_images_per_s_total(self, sweep, world_size, workers):
        return sum(r["images_per_s"] for r in sweep.get(world_size, workers))
    track_images_per_s_total.unit = "images/s"

    def track_headroom(self, sweep, world_size, workers):
        supply = statistics.median(r["images_per_s"] for r in sweep.get(world_size, workers))
        return supply / sweep.get("demand", world_size)["images_per_s"]
    track_headroom.unit = "supply/demand"


class ModelDemand(_Sweep):
    """Images per second the model consumes per rank at this world size."""
    params = [list(WORLD_SIZES)]
    param_names = ["world_size"]

    def setup(self, sweep, world_size):
        sweep.get("demand", world_size)

    def track_images_per_s_per_rank(self, sweep, world_size):
        return sweep.get("demand", world_size)["images_per_s"]
    track_images_per_s_per_rank.unit = "images/s"


class PipelineStage(_Sweep):
    """Seconds per sample of each pipeline step, in one process."""
    params = [list(STAGE_NAMES.values())]
    param_names = ["stage"]

    def setup(self, sweep, stage):
        if stage not in sweep.get("stages"):
            raise NotImplementedError(f"stage {stage} is not in this preset's pipeline")

    def track_seconds_per_sample(self, sweep, stage):
        return samples(sweep.get("stages")[stage])
    track_seconds_per_sample.unit = "s"
