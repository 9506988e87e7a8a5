"""The timings at N' a held-out launch made before its prediction, pooled: the readings of the
host's sharing averaged, the network's the latest timing's (no torch)."""
from __future__ import annotations

import dataclasses
import statistics

from swinkit.predict.numbers.extrapolate import Target


def pooled(history: list[Target]) -> Target:
    """The latest timings at N' with the readings of the host's sharing (the stand-in's
    compute slowdown, the loader's, and the waits) averaged over ``history`` (a launch's own
    timings, made before its prediction). Each reading scatters from one moment to the next by
    as much as the effect it reads (the stand-in by a few per cent around x1.03 on a 2-core
    host), and the run it predicts comes at yet another moment: the mean of several moments
    guesses it better than the latest alone.
    The network timings stay the latest's."""
    latest = history[-1]
    if len(history) == 1:
        return latest

    def timed(name):
        return [getattr(t, name) for t in history if getattr(t, name) is not None]

    def mean(name):
        return statistics.fmean(timed(name)) if timed(name) else None

    slowdowns = ", ".join(f"x{x:.3f}" for x in timed("compute_slowdown"))
    note = (f"the host's sharing at N', averaged over the launch's timings: the stand-in's "
            f"slowdown over {len(timed('compute_slowdown'))} ({slowdowns or 'none timed'}), "
            f"the loader's over {len(timed('loader_slowdown'))}, "
            f"the lockstep wait over {len(timed('sync_wait_s'))}, the wait in the model's "
            f"rhythm over {len(timed('iteration_wait_s'))}")
    return dataclasses.replace(latest, compute_slowdown=mean("compute_slowdown"),
                               loader_slowdown=mean("loader_slowdown"),
                               sync_wait_s=mean("sync_wait_s"),
                               iteration_wait_s=mean("iteration_wait_s"),
                               notes=latest.notes + [note])
