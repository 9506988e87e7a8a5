"""The same workload under every engine: DDP, DeepSpeed ZeRO-1 and ZeRO-2, DataParallel and
DataParallel from its primitives; and gradient accumulation. Time, bytes moved per optimizer
step and peak memory per rank, side by side (swinkit.runs.engine_run).

What this machine cannot run is skipped with the reason (asv: NotImplementedError in setup):
DataParallel needs GPUs (at least 2 to communicate), DeepSpeed needs to be installed
(tools/setup.sh does), and world sizes beyond the cores or GPUs as everywhere in the suite.

The default run is kept to what a commit needs tracked (the whole default ``asv run`` holds to
8 minutes on 2 CPU cores): ZeRO runs where it has something to partition (world size > 1), its
efficiency taken against DDP at world size 1 (what a user gains over one device trained
plainly). Accumulation runs only with ``SWINKIT_ENGINES=all`` (K = 2 and 4), as does ZeRO at
world size 1: what accumulation changes, communication rounds and bytes per image, is fixed by
the engine's code, which tests/test_engines.py holds to the analytic counts on every commit,
and its step time is DDP's with K micro-batches (a 28 s launch on 2 CPU cores). In the default
run ``GradAccum`` reads K = 1, the ``ddp`` engine's run.
"""
import math
import os

from .common import WORLD_SIZES, lazy, preset

# Imported when setup_cache runs: a track process only reads the unpickled Sweep (no torch).
engine_sweep = lazy("swinkit.runs.engine_run:engine_sweep")

ENGINES = ["ddp", "zero1", "zero2", "dp", "dp_vanilla"]
STEPS = [1, 2, 4]
# the default run's share of the above ($SWINKIT_ENGINES=all: everything)
EVERYTHING = os.environ.get("SWINKIT_ENGINES") == "all"
DEFAULT_STEPS = STEPS if EVERYTHING else [1]
ZERO = ("zero1", "zero2")
NOT_BY_DEFAULT = "not in the default run: set SWINKIT_ENGINES=all"
# Optimizer steps per launch: the engines differ most in bytes, rounds and memory, which are the
# same every step; 3 timed steps after 1 warm-up keep the whole file near 2.5 minutes on 2 CPU
# cores (the step time's median of 3 is noisier: compare engines as ratios within one run).
ITERS, WARMUP = 3, 1


# The docstring below predates the default run's trim and is kept as it is (asv versions a
# benchmark by its setup_cache's source): the accumulation runs are DEFAULT_STEPS' K > 1, by
# default none (SWINKIT_ENGINES=all: K = 2 and 4).
def _engines_and_accumulation(self):
    """Both classes' one setup_cache (asv shares a setup_cache by its source location): every
    engine at every world size (by default ZeRO above world size 1 only), then DDP at K = 4
    (and 2 with everything) micro-batches per step where there is communication to save
    (world size > 1); K = 1 is the engine run of ``ddp``."""
    at_one = ENGINES if EVERYTHING else [e for e in ENGINES if e not in ZERO]
    engines = engine_sweep(preset(), at_one, [ws for ws in WORLD_SIZES if ws == 1],
                           iters=ITERS, warmup=WARMUP)
    above = engine_sweep(preset(), ENGINES, [ws for ws in WORLD_SIZES if ws > 1],
                         iters=ITERS, warmup=WARMUP)
    for store in ("results", "skipped", "failed"):
        getattr(engines, store).update(getattr(above, store))
    for engine in set(ENGINES) - set(at_one):
        engines.skipped[(engine, 1)] = f"ZeRO at one rank partitions nothing; {NOT_BY_DEFAULT}"
    accumulation = {k: engine_sweep(preset(), ["ddp"], [ws for ws in WORLD_SIZES if ws > 1],
                                    grad_accum=k, iters=3, warmup=1)
                    for k in DEFAULT_STEPS if k > 1}
    return {"engines": engines, "accumulation": accumulation}


class Engine:
    """One launch per (world size, engine) in setup_cache, read by every metric."""
    timeout = 3600
    params = [list(WORLD_SIZES), ENGINES]
    param_names = ["world_size", "engine"]
    setup_cache = _engines_and_accumulation

    def setup(self, cache, world_size, engine):
        cache["engines"].get(engine, world_size)  # skipped (NotImplementedError) or failed

    def _eng(self, cache, world_size, engine):
        return cache["engines"].get(engine, world_size)["engine"]

    def track_iteration(self, sweep, world_size, engine):
        """Median optimizer step (median of per-rank medians)."""
        return self._eng(sweep, world_size, engine)["step_s"]
    track_iteration.unit = "s"

    def track_efficiency(self, sweep, world_size, engine):
        """DDP's step at world size 1 / this engine's step at N (weak scaling): against one
        device trained plainly, the reference every engine is chosen over."""
        base = sweep["engines"].get("ddp", 1)["engine"]["step_s"]
        return base / self._eng(sweep, world_size, engine)["step_s"]
    track_efficiency.unit = "ratio"

    def track_exposed_comm(self, sweep, world_size, engine):
        return self._eng(sweep, world_size, engine)["step_phases_s"]["exposed_comm"]
    track_exposed_comm.unit = "s"

    def track_message_bytes(self, sweep, world_size, engine):
        """Bytes handed to collectives (or copied between devices) per optimizer step."""
        return self._eng(sweep, world_size, engine)["traffic"]["message_bytes"]
    track_message_bytes.unit = "bytes"

    def track_wire_bytes_per_rank(self, sweep, world_size, engine):
        """Bytes each rank sends per optimizer step (ring algorithms)."""
        return self._eng(sweep, world_size, engine)["traffic"]["wire_bytes_per_rank"]
    track_wire_bytes_per_rank.unit = "bytes"

    def track_peak_memory(self, sweep, world_size, engine):
        """Largest peak over ranks (CUDA allocator on GPU; peak RSS on CPU)."""
        peak = self._eng(sweep, world_size, engine)["peak_memory_bytes"]
        # NaN where not recorded: asv takes a skip only from setup(); raised here it fails
        return math.nan if peak is None else peak
    track_peak_memory.unit = "bytes"

    def track_optimizer_state_bytes(self, sweep, world_size, engine):
        """Optimizer-state bytes held by rank 0 (what ZeRO-1/2 shard N ways)."""
        state = self._eng(sweep, world_size, engine)["model_state"].get("0")
        # NaN where the engine's loop records no model state (DDP's): asv shows it as n/a
        return state["optimizer_states"] if state else math.nan
    track_optimizer_state_bytes.unit = "bytes"


class GradAccum:
    """DDP with K micro-batches per optimizer step (no_sync on all but the last): one gradient
    communication per step, so communication per image falls with K."""
    timeout = 3600
    params = [list(WORLD_SIZES), STEPS]
    param_names = ["world_size", "steps"]
    setup_cache = _engines_and_accumulation

    def setup(self, cache, world_size, steps):
        if steps > 1 and world_size == 1:
            raise NotImplementedError("world size 1 communicates nothing: accumulation has no "
                                      "communication to save")
        if steps not in DEFAULT_STEPS:
            raise NotImplementedError(f"K = {steps}: {NOT_BY_DEFAULT}")
        self._sweep(cache, steps).get("ddp", world_size)

    def _sweep(self, cache, steps):
        return cache["engines"] if steps == 1 else cache["accumulation"][steps]

    def _eng(self, sweeps, world_size, steps):
        return self._sweep(sweeps, steps).get("ddp", world_size)["engine"]

    def track_step(self, sweeps, world_size, steps):
        return self._eng(sweeps, world_size, steps)["step_s"]
    track_step.unit = "s"

    def track_comm_rounds(self, sweeps, world_size, steps):
        """Micro-steps per optimizer step in which gradients were communicated."""
        return self._eng(sweeps, world_size, steps)["traffic"]["comm_rounds_per_step"]
    track_comm_rounds.unit = "rounds"

    def track_comm_per_image(self, sweeps, world_size, steps):
        return self._eng(sweeps, world_size, steps)["comm_per_image_s"]
    track_comm_per_image.unit = "s"

    def track_wire_bytes_per_image(self, sweeps, world_size, steps):
        return self._eng(sweeps, world_size, steps)["wire_bytes_per_image"]
    track_wire_bytes_per_image.unit = "bytes"
