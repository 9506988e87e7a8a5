"""Where a held-out prediction missed, input by input (torch-free).

A scored launch also measured the run at N' by its paired components (the oracle's inputs,
inside that launch at N'). So each input the held-out model took from elsewhere (the run at
N0 scaled by the stand-in, the timings at N' without the model) can be swapped for what the
run itself showed, one after another, re-predicting after each swap; a term is how far its
swap moved the prediction. The order is fixed: compute, loading, communication, contention,
then the ranks' wait (the model's median rank plus its timed wait, against the run's own
ranks replayed iteration by iteration: the paired oracle; on GPU presets at N > 1 this term
also holds SyncBN's collectives, which the held-out model leaves out), then what the DDP
steps took beyond that replay. The terms telescope: they sum to measured - predicted. Where
two inputs interact (compute moves when a bucket is ready, and so how much of its all-reduce
hides), the shared part falls to the later term: another order would split it a little
differently.

A second rank's cost to the model's compute, its loading and its synchronisation each vary
from one launch to the next on a shared host; this tells one launch's miss from another's
and, over launches, a bias from noise.
"""
from __future__ import annotations

import copy
import dataclasses
import statistics

from swinkit.predict.numbers.extrapolate import Host, Target, predict_at
from swinkit.predict.numbers.rank_profiles import median_profile
from swinkit.attribution.oracle import simulate

TERMS = ("compute", "loading", "communication", "contention", "rank_wait", "beyond_replay")


def split_miss(basis: dict, target: Target, host: Host, paired: dict,
               measured_s: float) -> dict:
    """The miss of the prediction of ``target`` from ``basis`` (the costs of the run at N0, as
    :func:`~swinkit.predict.numbers.extrapolate.predict_at` takes them), split over the inputs by
    swapping in ``paired`` (the component costs measured in the run at N') in :data:`TERMS`'
    order. Returns ``terms_s`` (seconds each swap added; positive: the prediction was short),
    ``predicted_s``, ``paired_s`` and ``measured_s``. Without injections: an injection known
    at N' is no input of the run's own to swap (the caller leaves those launches out)."""
    if paired["grad_accum"] != basis["grad_accum"]:
        raise ValueError("split_miss: the run at N' and the basis accumulate differently "
                         f"({paired['grad_accum']} against {basis['grad_accum']} micro-batches)")

    first = predict_at(basis, target, host)
    slow = first["compute_slowdown"]

    def predicted(costs: dict, tgt: Target) -> float:
        # the slowdown held: from the overcommit it moves with the compute it is the share of
        return predict_at(costs, tgt, host, slowdown=slow)["predicted_iter_s"]

    steps = [first["predicted_iter_s"]]
    seen = median_profile(paired)
    # compute: the run's median rank's phases and ready times, put in before the prediction
    # scales them by the host's sharing (so that they come out as the run showed them)
    basis = _with_profile(basis, [seen] * len(basis["ranks"]), slow)
    steps.append(predicted(basis, target))
    target = dataclasses.replace(target, data_wait_s=statistics.fmean(
        p["phases_s"]["data_wait"] for p in seen))
    steps.append(predicted(basis, target))
    target = dataclasses.replace(target, bucket_comm_s=list(paired["bucket_comm_s"]),
                                 broadcast_s=paired["broadcast_s"])
    steps.append(predicted(basis, target))
    # the rates the replay takes: from the basis when N0 > 1, else the ones timed at N'
    basis = {**basis, "contention": paired.get("contention") or {}}
    target = dataclasses.replace(target, contention=paired.get("contention") or {})
    steps.append(predicted(basis, target))
    steps.append(simulate(paired)["predicted_iter_s"])
    steps.append(measured_s)
    terms = {name: b - a for name, a, b in zip(TERMS, steps, steps[1:])}
    return {"terms_s": terms, "predicted_s": steps[0], "paired_s": steps[-2],
            "measured_s": measured_s}


def _with_profile(basis: dict, seen: list[list[dict]], slow: float) -> dict:
    """``basis`` with each rank's compute phases and bucket ready times those of its profile
    in ``seen`` (one per basis rank, per micro-batch position) divided by ``slow``; its data
    wait and samples kept (the loading and the spread of its ranks are later terms)."""
    out = copy.deepcopy(basis)
    for rank, profile in zip(out["ranks"], seen):
        for pos, mine in zip(rank["positions"], profile):
            for name, value in mine["phases_s"].items():
                if name != "data_wait":
                    pos["phases_s"][name] = value / slow
            pos["bucket_ready_s"] = [t / slow for t in mine["bucket_ready_s"]]
    return out


def mean_terms(splits: list[dict]) -> dict:
    """Each term's mean over launches (seconds): a term whose mean stands clear of its
    spread is a bias of the model, not one launch's noise."""
    return ({name: statistics.fmean(s["terms_s"][name] for s in splits) for name in TERMS}
            if splits else {})
