"""The timings at a target size N' without the model, for a prediction of N' (a
:class:`~swinkit.predict.numbers.extrapolate.Target`): one launch of N' ranks running
:func:`swinkit.predict.rank.probes.target_rank` over the backend the basis ran on."""
from __future__ import annotations

import statistics

from swinkit.predict.numbers.extrapolate import Target
from swinkit.predict.numbers.rank_profiles import meeting_segments
from swinkit.launch import LaunchConfig, launch
from swinkit.runs.sweep import oversubscribe_allowed


def measure_target(preset: str, world_size: int, basis: dict, progress=print,
                   comm_scale: float = 1.0) -> Target:
    """The target-size measurements for a prediction from ``basis`` (:func:`basis_of`).
    ``comm_scale``: an injected slower link known at N' (``--inject comm_scale=K``): each
    bucket's all-reduce timed with K times its elements, as the run's collectives move them."""
    probe = basis["probe"]
    elements = [[int(n * comm_scale) for n in bucket] for bucket in probe["elements"]]
    progress(f"[world size {world_size}] without the model: loader supply with {world_size} "
             "loaders at once, the buckets' all-reduces and the buffer broadcast")
    # over the backend the basis ran on, which decides the device (a basis kept before it
    # was recorded: the one a run here would take)
    lc = LaunchConfig(nproc_per_node=world_size, backend=probe.get("backend", "auto"),
                      allow_oversubscribe=oversubscribe_allowed())
    ranks = launch("swinkit.predict.rank.probes:target_rank",
                   dict(preset=preset, workers=basis["host"]["loader_workers"],
                        elements=elements, dtype=probe["dtype"],
                        buffer_shapes=probe["buffer_shapes"],
                        segments_s=meeting_segments(basis["costs"])),
                   lc, quiet=True).result["ranks"]
    readings = ranks[0].get("compute_slowdowns") or []
    notes = ([f"the stand-in's compute slowdown read {len(readings)} times over the timing "
              f"launch at N': " + ", ".join(f"x{x:.3f}" for x in readings) + "; the median taken"]
             if len(readings) > 1 else [])
    if comm_scale > 1:
        notes.append(f"known at N': the link {comm_scale:g} times slower (comm_scale): each "
                     f"bucket's all-reduce timed with {comm_scale:g} times its elements")
    return Target(world_size, ranks[0]["bucket_comm_s"], ranks[0]["broadcast_s"],
                  statistics.median(r["images_per_s"] for r in ranks),
                  loader_slowdown=_loader_slowdown(ranks[0]),
                  sync_wait_s=ranks[0].get("sync_wait_s"),
                  iteration_wait_s=ranks[0].get("iteration_wait_s"),
                  contention=_median_rates(ranks),
                  compute_slowdown=ranks[0].get("compute_slowdown"), notes=notes)


def _loader_slowdown(rank0: dict) -> float | None:
    """Rank 0's loader alone over its own rate with every loader at once (one rank's data)."""
    alone = rank0.get("alone_images_per_s")
    return alone / rank0["images_per_s"] if alone and rank0.get("images_per_s") else None


def _median_rates(ranks: list[dict]) -> dict:
    """The ranks' median of each proxy rate (as the component run's rates are combined)."""
    names = {k for r in ranks for k in r.get("contention") or {}}
    return {k: statistics.median(r["contention"][k] for r in ranks
                                 if k in (r.get("contention") or {}))
            for k in names}
