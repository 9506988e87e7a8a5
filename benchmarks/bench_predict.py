"""The held-out prediction tracked over commits: world size 2 predicted from world size 1's run
plus what is cheap to time at 2 without the model (the buckets' all-reduces, the buffer
broadcast, the loaders' supply), and the error per predictor against the run at 2: swinkit's,
and the two naive ones beside it (perfect scaling, T(1) plus the all-reduce at 2).

The runs at 1 and 2 are bench_ddp's own (weak, paired): this class shares its setup_cache,
which adds only the timings at 2 (one launch without the model). The run at 2 was made first,
but the prediction reads nothing of it; its median iteration only scores the prediction. Where
the machine cannot run 2 ranks the class is skipped with the reason. docs/prediction.md
explains the method.
"""
import math

from .bench_ddp import _DDPRun

PREDICTORS = ["model", "perfect", "plus_allreduce"]
_ITERATION_KEYS = {"model": "predicted_iter_s", "perfect": "perfect_scaling_s",
                   "plus_allreduce": "plus_allreduce_s"}


class HeldOut(_DDPRun):
    """World size 2 predicted from 1, then scored: each predictor's iteration and its error."""
    params = [PREDICTORS]
    param_names = ["predictor"]

    def setup(self, sweep, predictor):
        sweep.get("held_out")

    def _target(self, sweep):
        """The scored prediction at world size 2; {} where it is missing."""
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
        """The run's measured iteration at world size 2 (the same for every predictor)."""
        return self._target(sweep).get("measured_iter_s", math.nan)
    track_measured_iteration.unit = "s"
