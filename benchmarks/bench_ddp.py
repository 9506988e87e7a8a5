"""The full DDP iteration across world sizes: time, phases, blame, skew, utilisation, scaling."""
import math

from swinkit import scaling  # torch-free arithmetic

from .common import WORLD_SIZES, lazy, preset, samples

# Imported when setup_cache runs, not here (see common.py: track processes import no torch).
ddp_sweep = lazy("swinkit.workloads.ddp_sweep:ddp_sweep")
# swinkit.measure.phases.PHASES (re-exported by swinkit.workloads.ddp, which imports torch and
# mmseg), written out like BLAME_KEYS below; tests/test_benchmark_imports.py keeps them equal.
PHASES = ("data_wait", "forward", "backward", "exposed_comm", "optimizer", "other")

# swinkit.measure.phases.BLAME_KEYS, written out: asv runs this file against older commits,
# whose swinkit has no blame (tests/test_benchmarks.py keeps the two equal).
BLAME_KEYS = ("data_wait", "forward", "backward", "exposed_comm", "optimizer", "other",
              "unattributed")


class _DDPRun:
    """One expensive launch per world size (setup_cache), read by many track_* metrics."""
    timeout = 3600
    params = [list(WORLD_SIZES)]
    param_names = ["world_size"]

    def setup_cache(self):
        return ddp_sweep(preset(), WORLD_SIZES)

    def setup(self, sweep, world_size, *_):
        sweep.get(world_size)  # skipped (NotImplementedError) or failed (RuntimeError)


class Iteration(_DDPRun):
    def track_iteration(self, sweep, world_size):
        return samples(sweep.get(world_size)["ranks"][0]["iteration"])
    track_iteration.unit = "s"

    def track_mean_iteration(self, sweep, world_size):
        return sweep.get(world_size)["iter_mean_s"]
    track_mean_iteration.unit = "s"

    def track_skew(self, sweep, world_size):
        return max(sweep.get(world_size)["skew_s"].values())
    track_skew.unit = "s"

    def track_last_bucket_fraction(self, sweep, world_size):
        buckets = sweep.get(world_size)["bucket_sizes_bytes"]
        return buckets[-1] / sum(buckets)
    track_last_bucket_fraction.unit = "ratio"

    def track_loader_workers(self, sweep, world_size):
        return sweep.get(world_size)["loader_workers"]
    track_loader_workers.unit = "workers"

    def track_images_per_rank(self, sweep, world_size):
        return sweep.get(world_size)["images_per_rank"]
    track_images_per_rank.unit = "images"

    def track_straggler_rank(self, sweep, world_size):
        """The rank that made the others wait most (NaN: nobody made anybody wait)."""
        rank = (sweep.get(world_size).get("straggler") or {}).get("rank")
        return math.nan if rank is None else rank
    track_straggler_rank.unit = "rank"

    def track_cpu_cores_busy_rank0(self, sweep, world_size):
        return sweep.get(world_size)["utilisation"]["0"]["cpu"]["cores_busy"]
    track_cpu_cores_busy_rank0.unit = "cores"


class Phase(_DDPRun):
    params = [list(WORLD_SIZES), list(PHASES)]
    param_names = ["world_size", "phase"]

    def track_seconds(self, sweep, world_size, phase):
        return samples(sweep.get(world_size)["ranks"][0]["phases"][phase])
    track_seconds.unit = "s"

    def track_mean_seconds(self, sweep, world_size, phase):
        """Mean over iterations and ranks: these add up to the mean iteration (attribution)."""
        return sweep.get(world_size)["phases_mean_s"][phase]
    track_mean_seconds.unit = "s"

    def track_share(self, sweep, world_size, phase):
        return 100 * sweep.get(world_size)["phase_shares"][phase]
    track_share.unit = "%"


class Blame(_DDPRun):
    """Seconds per iteration by cause: each wait at a collective charged to the rank and phase
    that made it late (the attribution report's components)."""
    params = [list(WORLD_SIZES), list(BLAME_KEYS)]
    param_names = ["world_size", "component"]

    def setup(self, sweep, world_size, component):
        if "blame_s" not in sweep.get(world_size):
            raise NotImplementedError("this commit's swinkit records no blame")

    def track_seconds(self, sweep, world_size, component):
        """Median across ranks of per-rank medians (asv's headline statistic)."""
        return sweep.get(world_size)["blame_s"][component]
    track_seconds.unit = "s"

    def track_wait_caused(self, sweep, world_size, component):
        """Seconds per iteration the other ranks waited for a rank late from this component."""
        caused = sweep.get(world_size).get("wait_caused_s") or {}
        return sum(by_phase.get(component, 0.0) for by_phase in caused.values())
    track_wait_caused.unit = "s"


class Scaling(_DDPRun):
    def setup(self, sweep, world_size):
        sweep.get(1), sweep.get(world_size)  # every ratio needs world size 1

    def _times(self, sweep, world_size):
        return sweep.get(1)["iter_s"], sweep.get(world_size)["iter_s"]

    def track_speedup(self, sweep, world_size):
        return scaling.speedup(*self._times(sweep, world_size), world_size)
    track_speedup.unit = "x"

    def track_efficiency(self, sweep, world_size):
        return scaling.efficiency(*self._times(sweep, world_size))
    track_efficiency.unit = "ratio"

    def track_karp_flatt(self, sweep, world_size):
        return scaling.karp_flatt(scaling.speedup(*self._times(sweep, world_size), world_size),
                                  world_size)
    track_karp_flatt.unit = "serial fraction"
