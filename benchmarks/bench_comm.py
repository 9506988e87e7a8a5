"""Gradient all-reduce of the thesis model (SwinV2-B backbone, whole segmentor, DDP buckets),
and of the running preset's own DDP buckets."""
import os

from .common import WORLD_SIZES, lazy, preset, samples

# Imported when setup_cache runs, not here (see common.py: track processes import no torch).
_allreduce_sweep = lazy("swinkit.components.allreduce:allreduce_sweep")
# The default run leaves world size 1 out: an all-reduce over one rank moves nothing (its busbw
# is 0 by definition) and its time says nothing of scaling, while its launch reduces the
# thesis model's half a gigabyte of gradients 45 times (about 20 s on 2 CPU cores).
EVERYTHING = os.environ.get("SWINKIT_COMM") == "all"
AT_ONE = "an all-reduce over one rank moves nothing: not in the default run (set SWINKIT_COMM=all)"


def allreduce_sweep(world_sizes, preset):
    """What setup_cache runs (here, not in it: asv versions a benchmark by its setup_cache's
    source): the sweep at the world sizes the run takes, world size 1 skipped with the reason
    unless SWINKIT_COMM=all."""
    sizes = list(world_sizes) if EVERYTHING else [ws for ws in world_sizes if ws > 1]
    sweep = _allreduce_sweep(sizes, preset)
    if not EVERYTHING and 1 in world_sizes:
        sweep.skipped[1] = AT_ONE
    return sweep
# swinkit.components.allreduce's LAYOUTS and DTYPES' keys, written out (that module imports
# torch; tests/test_benchmark_imports.py keeps them equal).
LAYOUTS = ("backbone_flat", "segmentor_flat", "ddp_buckets", "preset_buckets")
DTYPES = ("fp32", "bf16")


class _Sweep:
    timeout = 3600
    params = [list(WORLD_SIZES)]
    param_names = ["world_size"]

    def setup_cache(self):
        return allreduce_sweep(WORLD_SIZES, preset())

    def setup(self, sweep, world_size, *_):
        sweep.get(world_size)


class AllReduce(_Sweep):
    """Time and bandwidth per layout and dtype; a wrong reduced element fails the run."""
    params = [list(WORLD_SIZES), list(LAYOUTS), list(DTYPES)]
    param_names = ["world_size", "layout", "dtype"]

    def setup(self, sweep, world_size, layout, dtype):
        if f"{layout}/{dtype}" not in sweep.get(world_size):
            raise NotImplementedError(f"{layout}/{dtype} was not measured")

    def track_time(self, sweep, world_size, layout, dtype):
        return samples(sweep.get(world_size)[f"{layout}/{dtype}"]["seconds"])
    track_time.unit = "s"

    def track_algbw(self, sweep, world_size, layout, dtype):
        return samples(sweep.get(world_size)[f"{layout}/{dtype}"]["algbw_gbps"])
    track_algbw.unit = "GB/s"

    def track_busbw(self, sweep, world_size, layout, dtype):
        return samples(sweep.get(world_size)[f"{layout}/{dtype}"]["busbw_gbps"])
    track_busbw.unit = "GB/s"


class BareAllReduce(_Sweep):
    """A plain torch.distributed.all_reduce loop on the whole segmentor's fp32 gradient, timed
    in the same run: the reference the suite's own timing is held to."""

    def setup(self, sweep, world_size):
        if world_size == 1:
            raise NotImplementedError("busbw is 0 by definition at world size 1")
        sweep.get(world_size)

    def track_busbw(self, sweep, world_size):
        return samples(sweep.get(world_size)["bare/fp32"]["busbw_gbps"])
    track_busbw.unit = "GB/s"

    def track_suite_to_bare_busbw(self, sweep, world_size):
        import statistics
        r = sweep.get(world_size)
        return (statistics.median(r["segmentor_flat/fp32"]["busbw_gbps"])
                / statistics.median(r["bare/fp32"]["busbw_gbps"]))
    track_suite_to_bare_busbw.unit = "ratio"
