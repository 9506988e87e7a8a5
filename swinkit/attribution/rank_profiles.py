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
        out.append({"phases_s": {k: statistics.median(x["phases_s"][k] for x in pos) for k in names},
                    "bucket_ready_s": [statistics.median(x["bucket_ready_s"][j] for x in pos)
                                       for j in range(n_buckets)]})
    return out


def in_place(costs: dict, n: int) -> bool:
    """Whether the basis holds world size 1 in each place of the N' ranks (a ``--same-launch``
    basis: every rank of the launch at N' ran alone in turn), so that rank r at N' is
    predicted from rank r alone, its own speed."""
    return bool(costs.get("in_place")) and len(costs["ranks"]) == n


def rank_profiles(costs: dict, n: int) -> list[list[dict]]:
    """The profile each of ``n`` ranks works to: its own where the basis is :func:`in_place`
    (rank against rank, each as it ran alone), else the median rank's for every one.

    >>> def rank(f):
    ...     return {"positions": [{"phases_s": {"forward": f}, "bucket_ready_s": []}]}
    >>> costs = {"grad_accum": 1, "in_place": True, "ranks": [rank(1.0), rank(1.2)]}
    >>> [p[0]["phases_s"]["forward"] for p in rank_profiles(costs, 2)]
    [1.0, 1.2]
    >>> [p[0]["phases_s"]["forward"] for p in rank_profiles(costs, 4)]
    [1.1, 1.1, 1.1, 1.1]
    """
    if in_place(costs, n):
        return [median_profile({**costs, "ranks": [r]}) for r in costs["ranks"]]
    return [median_profile(costs)] * n


def work_samples(costs: dict, centred: bool = False) -> list[float]:
    """Each rank's local work per micro-batch in each measured optimizer step (the sum of its
    phases), pooled over the ranks: the draws the slowest-of-N' term is taken from.
    ``centred``: each rank's less its own median, where the ranks' own speeds are predicted
    rank by rank (:func:`rank_profiles` in place): the draws are then what a rank varies
    around its own speed, not the gap between two ranks' speeds counted a second time."""
    k = costs["grad_accum"]
    out = []
    for r in costs["ranks"]:
        steps = min(len(p.get("samples") or []) for p in r["positions"])
        mine = [sum(sum(r["positions"][p]["samples"][i]["phases_s"].values())
                    for p in range(k)) / k for i in range(steps)]
        centre = statistics.median(mine) if (centred and mine) else 0.0
        out.extend(x - centre for x in mine)
    return out
