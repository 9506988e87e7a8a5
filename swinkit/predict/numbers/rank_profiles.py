"""A basis's ranks as the per-rank work of a prediction at N' (torch-free): one profile per
micro-batch position of an optimizer step (each phase and each bucket's ready time), the
per-iteration samples the slowest-of-N' term draws from, and the rhythm the timings at N'
work in between the ranks' meetings."""
from __future__ import annotations

import statistics


def median_profile(costs: dict) -> list[dict]:
    """Per micro-batch position, the ranks' median of each phase and of each bucket's ready
    time: one rank standing for every rank (the medians, not the samples)."""
    ranks = costs["ranks"]
    out = []
    for p in range(costs["grad_accum"]):
        pos = [r["positions"][p] for r in ranks]
        names = pos[0]["phases_s"]
        n_buckets = min(len(x["bucket_ready_s"]) for x in pos)
        out.append({"phases_s": {k: statistics.median(x["phases_s"][k] for x in pos)
                                 for k in names},
                    "bucket_ready_s": [statistics.median(x["bucket_ready_s"][j] for x in pos)
                                       for j in range(n_buckets)]})
    return out


def rank_profiles(costs: dict, n: int) -> list[list[dict]]:
    """The profile each of ``n`` ranks works to: the median rank's for every one.

    >>> def rank(f):
    ...     return {"positions": [{"phases_s": {"forward": f}, "bucket_ready_s": []}]}
    >>> costs = {"grad_accum": 1, "ranks": [rank(1.0), rank(1.2)]}
    >>> [p[0]["phases_s"]["forward"] for p in rank_profiles(costs, 4)]
    [1.1, 1.1, 1.1, 1.1]
    """
    return [median_profile(costs)] * n


def rank_samples(costs: dict) -> list[list[float]]:
    """Per rank, its local work per micro-batch in each measured optimizer step (the sum of
    its phases): the draws the slowest-of-N' term is taken from."""
    k = costs["grad_accum"]
    out = []
    for r in costs["ranks"]:
        steps = min(len(p.get("samples") or []) for p in r["positions"])
        out.append([sum(sum(r["positions"][p]["samples"][i]["phases_s"].values())
                        for p in range(k)) / k for i in range(steps)])
    return out


def meeting_segments(costs: dict) -> list[float]:
    """Seconds of a rank's work between the points where DDP makes the ranks meet, per
    optimizer step, from a basis's component costs (torch-free): forward and backward up to
    the last bucket, then the rest of the step and the next batch's loading up to the buffer
    broadcast at the next forward; one segment, the whole step, without a buffer broadcast.

    >>> ph = {"data_wait": 0.007, "forward": 0.03, "backward": 0.03, "exposed_comm": 0.001,
    ...       "optimizer": 0.008, "other": 0.001}
    >>> position = {"phases_s": ph, "bucket_ready_s": []}
    >>> [round(x, 3) for x in meeting_segments({"grad_accum": 1, "buffer_sync": True,
    ...                                          "ranks": [{"positions": [position]}]})]
    [0.06, 0.017]
    """
    profile = median_profile(costs)
    step = sum(sum(p["phases_s"].values()) for p in profile)
    if not costs.get("buffer_sync", True):
        return [step]
    first, last = profile[0]["phases_s"], profile[-1]["phases_s"]
    between = first.get("data_wait", 0.0) + sum(last.get(k, 0.0) for k in
                                                  ("exposed_comm", "optimizer", "other"))
    return [step - between, between]
