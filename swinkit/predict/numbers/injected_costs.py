"""Injections in a held-out prediction: what one known at the target size adds
(:func:`injected_costs`), the run predicted from as if it had not had one
(:func:`without_injection`), and the injections no prediction can take (:func:`check_held_out`)."""
from __future__ import annotations

import dataclasses

from swinkit.predict.numbers.extrapolate import Host, injected_positions
from swinkit.injection import KINDS, Injection, combine


def injected_costs(injection: Injection | None, world_size: int, host: Host):
    """Per rank at ``world_size``: the seconds per phase ``injection`` adds (:func:`phase_costs`,
    ``predict_at``'s ``injected``), and the late start of its all-reduces (``comm_ms``)."""
    if injection is None or not injection.active:
        return None, None
    own = {r: injection.for_rank(r) for r in range(world_size)}  # each spec its own ranks
    extra = {r: costs for r, i in own.items() if (costs := phase_costs(i, host))}
    delay = {r: seconds for r, i in own.items() if (seconds := launch_delay(i))}
    return extra or None, delay or None


def slowest_injected_s(injection: Injection | None, world_size: int, host: Host) -> float:
    """What ``injection`` adds to an iteration on the rank it slows most (its phases' costs
    and its all-reduces' late start): the fact a naive prediction takes of a known
    straggler, as the model takes each rank's.

    >>> slowest_injected_s(combine([Injection(compute_ms=50, ranks=(1,)),
    ...                             Injection(comm_ms=20, ranks=(0,))]), 2, Host(cores=2))
    0.05
    """
    extra, delay = injected_costs(injection, world_size, host)
    return max((sum((extra or {}).get(r, {}).values()) + (delay or {}).get(r, 0.0)
                for r in range(world_size)), default=0.0)


def phase_costs(injection: Injection, host: Host) -> dict[str, float]:
    """Seconds per phase ``injection`` adds on a rank it applies to, each kind of the table
    in its phase: per iteration, the optimizer's per optimizer step
    (:func:`~swinkit.predict.numbers.extrapolate.injected_positions` puts it on a step's last
    micro-batch); ``every`` spreads them as a mean. A kind per sample counts each sample of
    the rank's batch where the rank loads itself (no loader workers: on its own time); a
    late launch of the collectives is no phase's (:func:`launch_delay`).

    >>> phase_costs(Injection(data_ms=10, compute_ms=5, comm_ms=7, every=2),
    ...             Host(cores=2, images_per_rank=4))
    {'data_wait': 0.02, 'forward': 0.0025}
    """
    extra = {}
    for kind in KINDS:
        amount = getattr(injection, kind.name)
        if not amount or kind.launch_delay or (kind.per_sample and host.loader_workers):
            continue
        per = host.images_per_rank if kind.per_sample else 1
        extra[kind.phase] = extra.get(kind.phase, 0.0) + amount * per * 1e-3 / injection.every
    return extra


def launch_delay(injection: Injection) -> float:
    """Seconds each bucket's all-reduce starts late on a rank ``injection`` applies to (the
    table's late-launch kinds), a mean over ``every``."""
    return sum(getattr(injection, k.name) for k in KINDS if k.launch_delay) * 1e-3 / injection.every


def without_injection(costs: dict, held: dict[int, dict[str, float]]) -> dict:
    """``costs`` (a basis's component costs) less what each rank's timings held of an
    injection (``held``: per rank, :func:`injected_costs` at the basis's size), in its phases,
    its buckets' ready times and each measured step: the run as if clean, so that the
    prediction adds the target's injection whole, before it scales compute by the host's
    sharing (an injected spin lasts its wall time whatever the sharing), and neither the
    median profile nor the slowest-of-N' draws keep a copy. A phase goes down to 0 at most:
    the optimizer of a micro-batch that does not step holds none of ``optimizer_ms``.

    >>> position = {"phases_s": {"forward": 0.3, "optimizer": 0.0}, "bucket_ready_s": []}
    >>> without_injection({"ranks": [{"rank": 0, "positions": [position]}]},
    ...                   {0: {"forward": 0.2, "optimizer": 0.1}})["ranks"][0]["positions"]
    [{'phases_s': {'forward': 0.09999999999999998, 'optimizer': 0.0}, 'bucket_ready_s': []}]
    """
    def clean(position: dict, extra: dict) -> dict:
        minus = {k: -min(v, position["phases_s"].get(k, 0.0)) for k, v in extra.items()}
        out = injected_positions([position], minus)[0]
        if "samples" in position:
            out["samples"] = [clean(s, extra) for s in position["samples"]]
        return out

    ranks = [dict(r, positions=[clean(p, held[r["rank"]]) for p in r["positions"]])
             if r["rank"] in held else r for r in costs["ranks"]]
    return dict(costs, ranks=ranks)


def without_link(injection: Injection | None) -> Injection | None:
    """``injection`` without its slower link (``comm_scale``): that one is no cost of a
    rank's phases but of the collectives, which the timings at N' move at its size."""
    return None if injection is None else dataclasses.replace(injection, comm_scale=1.0)


def check_held_out(basis_injection: Injection | None, target_injections) -> None:
    """ValueError naming ``--inject`` where a held-out prediction cannot take the injection:
    costs the run predicted from has too, injected every N-th step only (which of its
    measured steps hold them decides its medians, not the mean), and a slower link every
    N-th step (the all-reduces timed at N' move the larger payload every time)."""
    held = without_link(basis_injection)
    if held is not None and held.active and held.every > 1:
        raise ValueError("--inject: every=N with costs the run predicted from has too (ranks "
                         "below its world size) cannot be predicted held out; use every=1, "
                         "or ranks that run lacks")
    if any(i.comm_scale > 1 and i.every > 1 for i in target_injections):
        raise ValueError("--inject: comm_scale with every=N cannot be predicted held out (the "
                         "all-reduces timed at N' move the scaled payload every time); use "
                         "every=1")
