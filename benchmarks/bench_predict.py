"""The separate-launch prediction tracked over commits (with ``SWINKIT_PREDICT=1`` or
``SWINKIT_DDP=all``: not in the default run, see bench_ddp): world size 2 predicted from
world size 1's run plus what is cheap to time at 2 without the model (the buckets'
all-reduces, the buffer broadcast, the loaders' supply), and the error per predictor against the run at 2: swinkit's,
and the two naive ones beside it (perfect scaling, T(1) plus the all-reduce at 2).

The runs at 1 and 2 are bench_ddp's own (weak, paired): this class shares its setup_cache,
which adds only the timings at 2 (two launches without the model). The run at 2 was made first:
the prediction reads nothing of it (a separate launch, apart from it), but it is not made
before it, so these tracks are not held out in the strict sense `swinkit scorecard` keeps
(predicted before and apart from the run scored). Its median iteration scores the prediction,
and then its components split the miss (HeldOutMiss; the class names stay, as asv's history
is keyed by them). Where the machine cannot run 2 ranks the classes
are skipped with the reason. docs/prediction.md explains the method.
"""
import math

from .bench_ddp import _DDPRun

PREDICTORS = ["model", "perfect", "plus_allreduce"]
_ITERATION_KEYS = {"model": "predicted_iter_s", "perfect": "perfect_scaling_s",
                   "plus_allreduce": "plus_allreduce_s"}
# swinkit.predict.numbers.miss_split.TERMS, spelled out: a benchmark file imports no swinkit module
# at import time (an older commit's may lack it); tests/test_default_suite.py holds them equal
MISS_TERMS = ["compute", "loading", "communication", "contention", "rank_wait", "beyond_replay"]


def _scored(sweep) -> dict:
    """The scored prediction at world size 2; {} where it is missing."""
    launches = sweep.get("held_out")["launches"]
    return launches[0]["targets"].get(2, {}) if launches else {}


class HeldOut(_DDPRun):
    """World size 2 predicted from 1 (separate launches, reading nothing of the run at 2),
    then scored: each predictor's iteration and its error."""
    params = [PREDICTORS]
    param_names = ["predictor"]

    def setup(self, sweep, predictor):
        sweep.get("held_out")

    def track_predicted_iteration(self, sweep, predictor):
        """Seconds per iteration this predictor gave for world size 2, from the run at 1 and
        the timings at 2 alone."""
        return _scored(sweep).get(_ITERATION_KEYS[predictor], math.nan)
    track_predicted_iteration.unit = "s"

    def track_prediction_error(self, sweep, predictor):
        """(predicted - measured) / measured at world size 2."""
        acc = _scored(sweep).get("accuracy", {}).get(predictor)
        return acc["prediction_error"] if acc else math.nan
    track_prediction_error.unit = "ratio"

    def track_accuracy(self, sweep, predictor):
        """Kahira et al.'s accuracy: 100 x (1 - |error|)."""
        acc = _scored(sweep).get("accuracy", {}).get(predictor)
        return acc["accuracy_pct"] if acc else math.nan
    track_accuracy.unit = "%"

    def track_measured_iteration(self, sweep, predictor):
        """The run's measured iteration at world size 2 (the same for every predictor)."""
        return _scored(sweep).get("measured_iter_s", math.nan)
    track_measured_iteration.unit = "s"


class HeldOutMiss(_DDPRun):
    """Where swinkit's held-out prediction of world size 2 missed, input by input: the run at
    2's own components (its paired local steps) swapped in for the predicted inputs one at a
    time, the prediction remade after each (docs/prediction.md, "Where each launch's miss
    lay"); the terms add up to measured - predicted. Over commits, a term that stays on one
    side is a bias of the model; one that swings from side to side is the host's noise."""
    params = [MISS_TERMS]
    param_names = ["term"]

    def setup(self, sweep, term):
        sweep.get("held_out")

    def track_miss(self, sweep, term):
        """Seconds this input's swap moved the prediction (+: the prediction was short);
        NaN where the miss was not split (the run at 2 kept no components)."""
        return (_scored(sweep).get("miss_split") or {}).get("terms_s", {}).get(term, math.nan)
    track_miss.unit = "s"
