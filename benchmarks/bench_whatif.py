"""What-ifs tracked over commits: each remedy predicted from its components, then run.

A change in swinkit or torch that breaks a remedy (or the oracle's prediction of it) shows in
asv's history. The default run tracks one remedy, the bf16 compression hook (what is sent;
how often is bench_engines' GradAccum), predicted and run at half a minute a launch on 2 CPU
cores; the rest with ``SWINKIT_WHATIF=all``, ``default`` (the report's six) or comma-separated
names. The remedies run where there is communication to change (world
size > 1), and so does the baseline by default (the default ``asv run`` holds to 8 minutes on
2 CPU cores; world size 1 would add two launches): ``SWINKIT_WHATIF_WORLD_SIZES=1,2`` adds
world size 1, the efficiency's reference (without it the efficiency is n/a). World sizes the
machine cannot hold are skipped with the reason.
"""
import math
import os

from .common import WORLD_SIZES as ALL_WORLD_SIZES, lazy, module, preset

CATALOGUE, select = module("swinkit.experiments.remedies").CATALOGUE, module("swinkit.experiments.remedies").select
Sweep, plan_world_sizes = module("swinkit.runs.sweep").Sweep, module("swinkit.runs.sweep").plan_world_sizes

what_if = lazy("swinkit.experiments.whatif_run:what_if")  # torch and MMSeg in setup_cache only

SUITE_DEFAULT = "bf16_hook"
REMEDIES = ["baseline"] + [r.name for r in select(os.environ.get("SWINKIT_WHATIF") or SUITE_DEFAULT)]
# the suite's world sizes are the params (ids stay the same whatever runs); these run
WORLD_SIZES = list(ALL_WORLD_SIZES)
# (only the suite's world sizes: others would run where no benchmark parameter reads them)
_ASKED = os.environ.get("SWINKIT_WHATIF_WORLD_SIZES")
RUN_WORLD_SIZES = ([ws for ws in WORLD_SIZES if ws in {int(x) for x in _ASKED.split(",")}]
                   if _ASKED else [ws for ws in WORLD_SIZES if ws > 1])


class Remedy:
    """One setup_cache predicts and runs every (remedy, world size); the tracks read it."""
    timeout = 3600
    params = [WORLD_SIZES, REMEDIES]
    param_names = ["world_size", "remedy"]

    def setup_cache(self):
        sweep = Sweep(meta={"preset": preset(), "world_sizes": RUN_WORLD_SIZES})
        for ws in set(WORLD_SIZES) - set(RUN_WORLD_SIZES):
            sweep.skipped[ws] = (f"not in the default set (world sizes {RUN_WORLD_SIZES}): "
                                 "set SWINKIT_WHATIF_WORLD_SIZES")
        plan = plan_world_sizes(RUN_WORLD_SIZES)
        runnable = [ws for ws, reason in plan.items() if not reason]
        for ws, reason in plan.items():
            if reason:
                sweep.skipped[ws] = reason
        if runnable:
            sweep.run("what_if", lambda: what_if(
                preset(), runnable, [CATALOGUE[n] for n in REMEDIES if n != "baseline"],
                iters=5, warmup=2, remedy_world_sizes=[ws for ws in runnable if ws > 1],
                # unpaired: a paired run's own components would add ~1 min to the default
                # asv run, which must stay within 12; `tools/attribute.py --run --what-if`
                # pairs them
                paired=False), print)
        return sweep

    def setup(self, sweep, world_size, remedy):
        sweep.get("what_if") if world_size not in sweep.skipped else sweep.get(world_size)
        if world_size == 1 and remedy != "baseline":
            raise NotImplementedError("remedies run where there is communication to change "
                                      "(world size > 1)")

    def _value(self, sweep, world_size, remedy, key):
        """``key`` of the (remedy, world size) row; NaN where the row is missing."""
        for row in sweep.get("what_if")["what_if"]:
            if row["name"] == remedy and row["world_size"] == world_size:
                return row[key]
        return math.nan

    def track_iteration(self, sweep, world_size, remedy):
        """Measured seconds per iteration (per micro-batch with accumulation)."""
        return self._value(sweep, world_size, remedy, "measured_iter_s")
    track_iteration.unit = "s"

    def track_predicted_iteration(self, sweep, world_size, remedy):
        return self._value(sweep, world_size, remedy, "predicted_iter_s")
    track_predicted_iteration.unit = "s"

    def track_efficiency(self, sweep, world_size, remedy):
        """Weak-scaling efficiency with the remedy, against the baseline at world size 1
        (n/a where world size 1 was not run: the default set)."""
        if 1 not in sweep.meta.get("world_sizes", [1]) or 1 in sweep.skipped:
            return math.nan
        return self._value(sweep, world_size, remedy, "efficiency_after")
    track_efficiency.unit = "ratio"

    def track_prediction_error(self, sweep, world_size, remedy):
        return self._value(sweep, world_size, remedy, "prediction_error")
    track_prediction_error.unit = "ratio"
