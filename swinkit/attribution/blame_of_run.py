"""Blame of one DDP run read from its ranks' results (torch-free): the figures ``run_ddp``
reports, and what ``swinkit validate`` scores, computed from the ranks' timelines alone, so a
recorded run can be read again (with a defect planted in blame, in the tests)."""
from __future__ import annotations

import statistics

from swinkit.attribution.blame import addup_error, compute_blame, resolution, summarize_blame
from swinkit.attribution.neighbours import injected_anywhere, injection_effect
from swinkit.injection import Injection


def blame_figures(ranks: list[dict], warmup: int, injection: Injection) -> dict:
    """Blame of a run (``ranks``: each rank's result, with its ``timeline``, ``iteration``,
    ``injected`` and ``clock``): :func:`~swinkit.attribution.blame.summarize_blame`'s
    figures, ``blame_addup_s`` (how far a rank's blame misses its iteration), what each
    injection measured, and with an injection every N-th iteration its added cost read
    from neighbouring iterations, every rank's (:mod:`swinkit.attribution.neighbours`)."""
    timelines = {r["rank"]: r["timeline"] for r in ranks}
    blame = compute_blame(timelines, warmup, resolution_s=resolution([r["clock"] for r in ranks]))
    iterations = {r["rank"]: r["iteration"] for r in ranks}
    out = {**summarize_blame(blame), "injected_measured_s": injected_measured(ranks),
           "blame_addup_s": addup_error(blame.blame, iterations)}
    if injection.active and injection.every > 1:  # injected vs clean neighbours
        # the others wait for an optimizer step at the next iteration's first collective
        lag = 1 if injection.optimizer_ms > 0 else 0
        out["injection_effect"] = injection_effect(
            iterations, blame.blame,
            injected_anywhere({r["rank"]: r["injected"] for r in ranks}, lag))
    return out


def injected_measured(ranks: list[dict]) -> dict[str, float]:
    """Per injection kind, what one requested delay measured on the device (the median over
    the injected ranks of each one's median call): the amount recovery is held to, not the
    requested figure (a sleep kernel's clock moves under load).

    >>> injected_measured([{"injected_call_s": {"compute": 0.25}},
    ...                    {"injected_call_s": {"compute": 0.75, "comm": None}}, {}])
    {'compute': 0.5}
    """
    calls: dict[str, list[float]] = {}
    for r in ranks:
        for name, seconds in (r.get("injected_call_s") or {}).items():
            if seconds is not None:
                calls.setdefault(name, []).append(seconds)
    return {name: statistics.median(v) for name, v in calls.items()}
