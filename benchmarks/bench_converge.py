"""Steps and time to a held-out target on the test preset, tracked over commits (``swinkit
converge``'s cells, docs/converge.md).

Per world size, per-rank batch and learning-rate rule: the steps to a held-out loss of 4.0 (the
median over 3 seeds; NaN where the cell missed its 200-step budget), the time to it (steps x
the bare DDP step time), efficiency in steps beside efficiency in time against world size 1,
and Pollux's statistical efficiency and goodput from the gradient noise scale measured in the
runs. A change that slows convergence (a broken gradient average, a learning-rate rule that no
longer scales) shows here even where the step time holds still.

Not in the default run: ``SWINKIT_CONVERGE=1`` trains batch 2 per rank under the linear rule
at the world sizes this machine holds (about 95 s on 2 CPU cores, a fifth of the default run),
``SWINKIT_CONVERGE=all`` adds batch 4 and the rule ``none``. Convergence moves only when the
training itself changes (the gradient average, the learning-rate rule, the data order), and
tests/test_converge_equivalence.py holds DDP's held-out curve to one process's on every
commit; so it is tracked where asked (a release, a change to the training), not on every
commit. Always the test preset: a convergence grid of a larger preset takes hours on a CPU.
"""
import math
import os

from .common import WORLD_SIZES, lazy, module

Sweep = module("swinkit.runs.sweep").Sweep
bench_cells = lazy("swinkit.experiments.converge:bench_cells")  # torch in setup_cache only

BATCHES = [2, 4]
LR_RULES = ["linear", "none"]
EVERYTHING = os.environ.get("SWINKIT_CONVERGE") == "all"
ASKED = EVERYTHING or os.environ.get("SWINKIT_CONVERGE") == "1"
NOT_ASKED = ("convergence is not in the default run: set SWINKIT_CONVERGE=1 (batch 2, the "
             "linear rule) or all")
RUN_BATCHES, RUN_RULES = (BATCHES, LR_RULES) if EVERYTHING else ([2], ["linear"])
# a target the test preset reaches in about 100 steps at 2 images per rank (docs/converge.md)
TARGET_LOSS, MAX_STEPS, SEEDS = 4.0, 200, 3


def _has_convergence() -> bool:
    try:
        module("swinkit.experiments.converge_spec")  # torch-free
    except ModuleNotFoundError:
        return False
    return True


class _Grid:
    """One setup_cache trains every cell; the tracks read it (a per-file base: asv keys
    setup_cache by module and line)."""
    timeout = 3600
    params = [list(WORLD_SIZES), BATCHES, LR_RULES]
    param_names = ["world_size", "batch", "lr_rule"]

    def setup_cache(self):
        sweep = Sweep(meta={"preset": "test"})
        if not ASKED:
            sweep.skipped.update({ws: NOT_ASKED for ws in WORLD_SIZES})
            return sweep
        if not _has_convergence():  # an older commit's swinkit (asv's history mode)
            sweep.skipped.update({ws: "this commit's swinkit has no convergence run"
                                  for ws in WORLD_SIZES})
            return sweep
        runnable = sweep.runnable(WORLD_SIZES)
        oversubscribe = module("swinkit.runs.sweep").oversubscribe_allowed()
        sweep.run("grid", lambda: bench_cells(runnable, RUN_BATCHES, RUN_RULES, SEEDS,
                                              TARGET_LOSS, MAX_STEPS, oversubscribe), print)
        grid = sweep.results.pop("grid", None)
        for ws in runnable:
            if grid is None:
                sweep.failed[ws] = sweep.failed.get("grid", "the grid failed")
            elif ws in grid["failed"]:
                sweep.failed[ws] = grid["failed"][ws]
            else:
                sweep.results[ws] = dict(grid["world_sizes"][ws], noise_scale=grid["noise_scale"])
        return sweep

    def setup(self, sweep, world_size, batch, lr_rule):
        if batch not in RUN_BATCHES or lr_rule not in RUN_RULES:
            raise NotImplementedError(f"batch {batch}, rule {lr_rule}: not in the default run "
                                      "(set SWINKIT_CONVERGE=all)")
        if f"{batch}/{lr_rule}" not in sweep.get(world_size)["cells"]:
            raise NotImplementedError(f"batch {batch}, rule {lr_rule}: not measured")

    @staticmethod
    def _value(row, key):
        value = (row or {}).get(key)
        return math.nan if value is None else value


class Convergence(_Grid):
    """Steps, images and time to the held-out target (NaN: the cell missed it)."""

    def track_steps_to_target(self, sweep, world_size, batch, lr_rule):
        return self._value(sweep.get(world_size)["cells"][f"{batch}/{lr_rule}"], "steps")
    track_steps_to_target.unit = "steps"

    def track_time_to_target(self, sweep, world_size, batch, lr_rule):
        cell = sweep.get(world_size)["cells"][f"{batch}/{lr_rule}"]
        return self._value(cell, "time_to_target_s")
    track_time_to_target.unit = "s"

    def track_seeds_reached(self, sweep, world_size, batch, lr_rule):
        return sweep.get(world_size)["cells"][f"{batch}/{lr_rule}"]["reached"]
    track_seeds_reached.unit = "seeds"


class Efficiency(_Grid):
    """Against world size 1 with the same batch per rank and rule: in steps, in time, and to
    the target (their product)."""

    def track_steps(self, sweep, world_size, batch, lr_rule):
        row = sweep.get(world_size)["scaling"].get(f"{batch}/{lr_rule}")
        return self._value(row, "efficiency_steps")
    track_steps.unit = "ratio"

    def track_time(self, sweep, world_size, batch, lr_rule):
        return self._value(sweep.get(world_size)["scaling"].get(f"{batch}/{lr_rule}"),
                           "efficiency_time")
    track_time.unit = "ratio"

    def track_to_target(self, sweep, world_size, batch, lr_rule):
        return self._value(sweep.get(world_size)["scaling"].get(f"{batch}/{lr_rule}"),
                           "efficiency_target")
    track_to_target.unit = "ratio"


class Goodput(_Grid):
    """Pollux's goodput (images/s at the base batch's efficiency) and its statistical
    efficiency from the gradient noise scale (the same for every rule: a rule changes no
    step time)."""

    def track_goodput(self, sweep, world_size, batch, lr_rule):
        return self._value(sweep.get(world_size)["goodput"].get(batch), "goodput")
    track_goodput.unit = "images/s"

    def track_statistical_efficiency(self, sweep, world_size, batch, lr_rule):
        return self._value(sweep.get(world_size)["goodput"].get(batch), "efficiency")
    track_statistical_efficiency.unit = "ratio"

    def track_noise_scale(self, sweep, world_size, batch, lr_rule):
        return self._value(sweep.get(world_size), "noise_scale")
    track_noise_scale.unit = "images"
