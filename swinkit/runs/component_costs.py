"""The component costs of a local or paired run, read torch-free from its ranks' timelines
(measured by :mod:`swinkit.rank.components`), and the oracle's prediction made from them."""
from __future__ import annotations

import os
import statistics

from swinkit.attribution.oracle import simulate
from swinkit.measure.timeline import work_durations


def rank_costs(rank_result: dict, warmup: int, grad_accum: int) -> dict:
    """One rank's component costs, torch-free, for :func:`swinkit.attribution.oracle.simulate`:
    per micro-batch position in an optimizer step the median of each phase and of each bucket's
    ready time after backward began ("exposed_comm" of a local run is DDP's finalisation after
    the last bucket: it stays in the real iteration)."""
    iterations = rank_result["timeline"][warmup:]
    k = grad_accum
    positions = []
    for p in range(k):
        its = iterations[p::k]
        phases = [work_durations(it) for it in its]  # the meetings are the replay's to add
        ready = [_ready_offsets(it) for it in its]
        n_buckets = max((len(r) for r in ready), default=0)
        positions.append({
            "phases_s": {name: statistics.median(ph[name] for ph in phases) for name in phases[0]},
            "bucket_ready_s": [statistics.median(r[j] for r in ready if len(r) > j)
                               for j in range(n_buckets)],
            # each measured iteration too: the replay pairs the ranks' i-th iterations, so a
            # rank that is late in one iteration makes the others wait in that one (the
            # median of a max is not the max of the medians)
            "samples": [{"phases_s": ph, "bucket_ready_s": r} for ph, r in zip(phases, ready)],
        })
    return {"rank": rank_result["rank"], "positions": positions}


def _ready_offsets(iteration: dict) -> list[float]:
    """Seconds from the end of forward (backward begins) to each bucket's ready mark."""
    forward_end = next(t for name, t in iteration["marks"] if name == "forward")
    buckets = [c for c in iteration["collectives"] if c["name"].startswith("bucket")]
    return [c["ready"] - forward_end for c in buckets]


def costs(run: dict) -> dict:
    """The component costs of a local run (``run_ddp`` of a ``local`` spec), torch-free."""
    warmup, k = run["warmup"], run["grad_accum"]
    comm = run["ranks"][0]["comm"]
    return {"world_size": run["world_size"], "grad_accum": k,
            "contention": contention_rates(run["ranks"]),
            "ranks": [rank_costs(r, warmup, k) for r in run["ranks"]],
            "bucket_comm_s": comm["bucket_s"], "broadcast_s": comm["broadcast_s"],
            # results from before SyncBN was timed: none (CPU runs had no SyncBN)
            "sync_bn_s": comm.get("sync_bn_s") or {"forward": 0.0, "backward": 0.0},
            # results from before the broadcast was split: a broadcast was timed if it ran
            "buffer_sync": comm.get("buffer_sync", comm["broadcast_s"] > 0),
            "comm_dtype": comm["dtype"], "bucket_sizes_bytes": run["bucket_sizes_bytes"],
            "local_iter_s": run["per_batch_s"]}


def contention_rates(ranks: list[dict]) -> dict:
    """The ranks' median of each measured rate (a rate no rank could measure is left out: the
    oracle then takes 1, no contention)."""
    out = {}
    for name in ("compute_rate", "comm_rate"):
        values = [r["contention"][name] for r in ranks
                  if (r.get("contention") or {}).get(name) is not None]
        if values:
            out[name] = statistics.median(values)
    return out


def predict_run(spec, progress=print) -> dict:
    """Measure ``spec``'s components (a DDPRunSpec: the same launch, nothing communicated) and
    predict its iteration. Returns the oracle's prediction plus the component run's summary."""
    from dataclasses import replace

    from swinkit.runs.ddp_run import run_ddp

    return predict_from(run_ddp(replace(spec, local=True), progress=progress), spec)


def predict_from(comp: dict, spec) -> dict:
    """The oracle's prediction of ``spec`` from a component run: a ``local`` run's result, or
    a paired run's ``local_run``."""
    injection = spec.injection
    delay = {r: own.comm_ms / 1e3 for r in range(spec.world_size)
             if (own := injection.for_rank(r)).comm_ms > 0}  # each spec its own ranks
    pred = simulate(costs(comp), delay)
    pred.update(local_iter_s=comp["per_batch_s"], bucket_comm_s=comp["ranks"][0]["comm"]["bucket_s"],
                broadcast_s=comp["ranks"][0]["comm"]["broadcast_s"],
                contention=contention_rates(comp["ranks"]),
                loader_workers=comp["loader_workers"], images_per_rank=comp["images_per_rank"],
                bucket_sizes_bytes=comp["bucket_sizes_bytes"],
                # the precision the components ran in: the spec's (its rank applied it)
                precision=(comp.get("precision") or {}).get("label"))
    return pred


def host_of(run: dict) -> dict:
    """This host as the run found it: its cores, and what each rank keeps busy (the fields
    of a prediction's ``Host``, :class:`swinkit.predict.numbers.extrapolate.Host`)."""
    return {"cores": os.cpu_count() or 1, "threads_per_rank": run["threads_per_rank"],
            "loader_workers": run["loader_workers"], "images_per_rank": run["images_per_rank"]}


def basis_of(run: dict) -> dict:
    """What a prediction of other world sizes keeps of a paired run (torch-free, JSON): its
    component costs, the host's share of it, its buckets' bytes, and what the timings at a
    target size need (``probe``: the buckets' elements and dtype, the buffers' shapes, and the
    backend, which decides the device the buckets are timed on)."""
    comm = run["local_run"]["ranks"][0]["comm"]
    return {"costs": costs(run["local_run"]), "host": host_of(run),
            "bucket_bytes": list(run["bucket_sizes_bytes"]),
            "probe": {"elements": comm["elements"], "dtype": comm["dtype"],
                      "backend": run["backend"],
                      "buffer_shapes": run["ranks"][0]["buffer_shapes"]
                      if comm.get("buffer_sync", True) else []}}
