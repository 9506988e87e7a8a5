"""What an injection known at the target size adds to a held-out prediction
(:func:`injected_costs`), against what the run predicted from already had."""
from __future__ import annotations

import dataclasses
import statistics

from swinkit.attribution.extrapolate import Host
from swinkit.injection import Injection


def injected_costs(injection: Injection | None, world_size: int, host: Host,
                   already: tuple[Injection | None, int] = (None, 1)):
    """Per rank at ``world_size``: the seconds per phase and iteration ``injection`` adds
    (``predict_at``'s ``injected``), and the late start of its all-reduces (``comm_ms``).
    ``already``: (the injection of the run predicted from, its world size). Its ranks'
    median of that injection is in the profile every rank at N' starts from, so it is taken
    off first: an injection on every rank is counted once, and one on rank 0 alone of a
    basis at 1 leaves the other ranks at N' (negative seconds). Not its data_ms: the loading
    at N' comes from the clean loaders timed there. Nor comm_ms: the local steps that give
    the basis run none of the collectives it delays.

    >>> every = Injection(compute_ms=50)
    >>> injected_costs(every, 2, Host(64, 1, 0, 2), (every, 1))
    (None, None)
    >>> injected_costs(Injection(compute_ms=50, ranks=(0,)), 2, Host(64, 1, 0, 2),
    ...                (Injection(compute_ms=50, ranks=(0,)), 1))[0]
    {1: {'forward': -0.05}}
    """
    mine = {r: _phase_costs(injection, host) if injection is not None
            and injection.applies_to(r) else {} for r in range(world_size)}
    before, n0 = already
    held = [_phase_costs(before, host) if before is not None and before.applies_to(r) else {}
            for r in range(n0)]
    base = {k: statistics.median(h.get(k, 0.0) for h in held)
            for k in {k for h in held for k in h} - {"data_wait"}}
    extra = {r: {k: v for k in set(ph) | set(base)
                 if (v := ph.get(k, 0.0) - base.get(k, 0.0))} for r, ph in mine.items()}
    extra = {r: ph for r, ph in extra.items() if ph}
    delay = ({r: injection.comm_ms * 1e-3 / injection.every for r in range(world_size)
              if injection.applies_to(r)} if injection is not None and injection.comm_ms
             else None)
    return extra or None, delay


def _phase_costs(injection: Injection, host: Host) -> dict[str, float]:
    """Seconds per phase and iteration ``injection`` adds on a rank it applies to."""
    if not injection.active:
        return {}
    per_it = 1e-3 / injection.every
    extra = {"forward": injection.compute_ms * per_it, "backward": injection.backward_ms * per_it,
             "optimizer": injection.optimizer_ms * per_it}
    if host.loader_workers == 0:  # each sample of the rank's batch, on the rank's own time
        extra["data_wait"] = injection.data_ms * host.images_per_rank * per_it
    return {k: v for k, v in extra.items() if v}


def without_link(injection: Injection | None) -> Injection | None:
    """``injection`` without its slower link (``comm_scale``): that one is no cost of a
    rank's phases but of the collectives, which the timings at N' move at its size."""
    return None if injection is None else dataclasses.replace(injection, comm_scale=1.0)
