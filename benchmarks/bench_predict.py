"""The held-out prediction tracked over commits: world size 2 predicted from world size 1's run
plus what is cheap to time at 2 without the model (the buckets' all-reduces, the buffer
broadcast, the loaders' supply), then run, and the error per predictor: swinkit's, and the two
naive ones beside it (perfect scaling, T(1) plus the all-reduce at 2). One launch of each
(about 2 minutes with the cpu preset on 2 cores); where the machine cannot run 2 ranks the
whole class is skipped with the reason. docs/prediction.md explains the method.
"""
import math

from .common import lazy, module, preset

Sweep, plan_world_sizes = module("swinkit.runs.sweep").Sweep, module("swinkit.runs.sweep").plan_world_sizes

held_out = lazy("swinkit.experiments.predict_run:held_out")  # torch and MMSeg in setup_cache only

PREDICTORS = ["model", "perfect", "plus_allreduce"]
_ITERATION_KEYS = {"model": "predicted_iter_s", "perfect": "perfect_scaling_s",
                   "plus_allreduce": "plus_allreduce_s"}


class HeldOut:
    """World size 2 predicted from 1, then run: each predictor's iteration and its error."""
    timeout = 1800
    params = [PREDICTORS]
    param_names = ["predictor"]

    def setup_cache(self):
        sweep = Sweep(meta={"preset": preset(), "from": 1, "target": 2})
        reason = plan_world_sizes([1, 2])[2]
        if reason:
            sweep.skipped["held_out"] = reason
        else:
            sweep.run("held_out", lambda: held_out(preset(), [2], [1], iters=6, warmup=3,
                                                    repeats=1), print)
        return sweep

    def setup(self, sweep, predictor):
        sweep.get("held_out")

    def _target(self, sweep):
        """The scored prediction at world size 2 of the one launch; {} where it is missing."""
        launches = sweep.get("held_out")["launches"]
        return launches[0]["targets"].get(2, {}) if launches else {}

    def track_predicted_iteration(self, sweep, predictor):
        """Seconds per iteration this predictor gave for world size 2 before it was run."""
        return self._target(sweep).get(_ITERATION_KEYS[predictor], math.nan)
    track_predicted_iteration.unit = "s"

    def track_prediction_error(self, sweep, predictor):
        """(predicted - measured) / measured at world size 2."""
        acc = self._target(sweep).get("accuracy", {}).get(predictor)
        return acc["prediction_error"] if acc else math.nan
    track_prediction_error.unit = "ratio"

    def track_accuracy(self, sweep, predictor):
        """Kahira et al.'s accuracy: 100 x (1 - |error|)."""
        acc = self._target(sweep).get("accuracy", {}).get(predictor)
        return acc["accuracy_pct"] if acc else math.nan
    track_accuracy.unit = "%"

    def track_measured_iteration(self, sweep, predictor):
        """The held-out run's measured iteration at world size 2 (the same for every predictor)."""
        return self._target(sweep).get("measured_iter_s", math.nan)
    track_measured_iteration.unit = "s"
