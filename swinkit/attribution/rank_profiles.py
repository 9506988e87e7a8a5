"""A basis's ranks as the per-rank work of a prediction at N' (torch-free): one profile per
micro-batch position of an optimizer step (each phase and each bucket's ready time), and the
per-iteration samples the slowest-of-N' term draws from."""
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
