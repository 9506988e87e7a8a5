"""Where the scaling goes: per world size, time, scaling metrics and the split of lost time.

Numbers only (rendering is in swinkit.report). Inputs are per-world-size measurements of the
DDP iteration (:class:`Measured`): the median iteration and the median *blame* of each
component (seconds per iteration charged to each cause, see swinkit.attribution.blame). The
reference for the lost time is world size 1 (scaling) or another run at the same world size
(a comparison, or a run with an injected cost).

Medians do not add up, so the split is not an identity: ``residual`` is the measured change of
the median iteration minus the sum of the components' changes, and it is shown. A loss smaller
than twice its spread (across repeated launches where there are several; within one launch's
iterations otherwise) is reported as not significant instead of being divided into shares,
unless every paired launch shows it beyond its own noise (its iterations' spread and the
reference launches'), in the same direction.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from swinkit.attribution import scaling
from swinkit.measure.phases import BLAME_KEYS

IQR_PER_SIGMA = 1.349  # the IQR of a normal distribution in standard deviations
RESOLUTION_S = 1e-6    # changes below a microsecond are float and clock rounding, not causes


@dataclass
class Measured:
    """One world size's DDP iteration.

    Attributes:
        iter_s: median iteration (over launches: the median of per-launch medians).
        components_s: median blame per component (BLAME_KEYS), seconds per iteration.
        iter_iqr_ratio: IQR / median of the iterations of one launch (spread within a launch).
        launch_iter_s: each repeated launch's median iteration, in launch order; launches of
            different world sizes were interleaved, so the k-th of each pair up.
        launch_iqr_ratio: each repeated launch's IQR / median of its iterations, same order.
    """
    world_size: int
    iter_s: float
    components_s: dict[str, float]
    iter_iqr_ratio: float | None = None
    samples: int | None = None
    launch_iter_s: list[float] = field(default_factory=list)
    launch_iqr_ratio: list[float] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def scaled(self, ratio: float) -> "Measured":
        """This run with every time multiplied by ``ratio``: world size 1's iteration scaled
        to the work one rank does at N (strong scaling: 1/N of it), the perfect-scaling
        reference the lost time is measured from."""
        return Measured(self.world_size, self.iter_s * ratio,
                        {c: v * ratio for c, v in self.components_s.items()},
                        self.iter_iqr_ratio, self.samples,
                        [t * ratio for t in self.launch_iter_s], list(self.launch_iqr_ratio),
                        dict(self.extra))

    @property
    def unstable(self) -> bool:
        return self.iter_iqr_ratio is not None and self.iter_iqr_ratio > 0.10

    @property
    def residual_s(self) -> float:
        """Median iteration minus the sum of the component medians (not 0 by construction)."""
        return self.iter_s - sum(self.components_s.get(c, 0.0) for c in BLAME_KEYS)


def lost_spread(reference: Measured, run: Measured) -> tuple[float | None, str]:
    """Standard deviation of the lost time ``run - reference`` and where it comes from.

    With two or more paired (interleaved) launches: the sample standard deviation of the
    per-pair differences. Otherwise from the spread of single iterations within each launch
    (IQR / 1.349 per side, added in quadrature): launch-to-launch noise is not in it, so it is
    a lower bound, and the report says so. None when neither is known.
    """
    pairs = list(zip(reference.launch_iter_s, run.launch_iter_s))
    if len(pairs) >= 2:
        return statistics.stdev(b - a for a, b in pairs), f"{len(pairs)} paired launches"
    if reference.iter_iqr_ratio is None or run.iter_iqr_ratio is None:
        return None, "unknown"
    return (iteration_spread(reference.iter_s, reference.iter_iqr_ratio, run.iter_s,
                             run.iter_iqr_ratio),
            "iterations of one launch (launch-to-launch noise not included)")


def iteration_spread(ref_s: float, ref_iqr_ratio: float, run_s: float,
                     run_iqr_ratio: float) -> float:
    """Standard deviation of ``run_s - ref_s`` from each launch's iteration spread: IQR / 1.349
    per side (a normal distribution's), added in quadrature."""
    return math.hypot(ref_iqr_ratio * ref_s, run_iqr_ratio * run_s) / IQR_PER_SIGMA


def beyond_noise_in_every_launch(reference: Measured, run: Measured) -> bool:
    """True when every paired launch changed beyond its own noise, all in one direction.

    A pair's noise is its two launches' iteration spread (IQR / 1.349 per side, in quadrature,
    as for a single launch) plus the launch-to-launch spread, estimated from the *reference's*
    launches (their sample standard deviation, counted for both launches of the pair): under
    "no change" the run's launches vary as the reference's do, and the reference does not carry
    the change under test. The pair must move by more than twice that.

    Two or three launches estimate the spread of the paired differences poorly: one run launch
    slowed by the machine inflates it past a loss every launch shows, as in a CI run here (lost
    0.063 and 0.143 s, floor 0.114 s). This second test passes such a loss; one that only the
    pooled median shows, that changes sign between launches, or that the reference's own
    launches vary as much as, does not pass it.
    """
    lists = (reference.launch_iter_s, run.launch_iter_s,
             reference.launch_iqr_ratio, run.launch_iqr_ratio)
    if len(reference.launch_iter_s) < 2 or len({len(x) for x in lists}) != 1:
        return False
    values = [v for x in lists for v in x]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
        return False
    launch_var = statistics.variance(reference.launch_iter_s)
    signs = set()
    for ref_s, run_s, ref_iqr, run_iqr in zip(*lists):
        within = iteration_spread(ref_s, ref_iqr, run_s, run_iqr)
        floor = 2 * math.sqrt(within ** 2 + 2 * launch_var)
        if abs(run_s - ref_s) <= max(floor, RESOLUTION_S):
            return False
        signs.add(run_s > ref_s)
    return len(signs) == 1


def split_loss(reference: Measured, run: Measured) -> dict:
    """Split ``run.iter_s - reference.iter_s`` over the components' growth.

    Returns ``lost_s``, ``growth_s`` (signed seconds per component), ``residual_s`` (the
    change of the median iteration that the component medians do not explain), the noise
    floor (``spread_s``, ``noise_floor_s`` = 2 x spread, ``significant``; a change under the
    floor is still significant when every paired launch shows it beyond its own noise, in one
    direction: ``significant_only_by_every_launch``) and, for a
    significant loss, ``shares_pct``: each component's part of the time that grew, in percent
    (components that shrank are listed in ``gains_s`` instead, so no share is negative or
    above 100). A significant gain (``lost_s`` < 0) has no shares: it is a gain.
    """
    lost = run.iter_s - reference.iter_s
    growth = {c: run.components_s.get(c, 0.0) - reference.components_s.get(c, 0.0)
              for c in BLAME_KEYS}
    residual = lost - sum(growth.values())
    spread, spread_from = lost_spread(reference, run)
    floor = None if spread is None else 2 * spread
    significant = floor is None or abs(lost) > floor
    only_by_every_launch = not significant and beyond_noise_in_every_launch(reference, run)
    significant = significant or only_by_every_launch
    out = {"lost_s": lost, "growth_s": growth, "residual_s": residual,
           "residual_of_iter": abs(residual) / run.iter_s if run.iter_s else math.nan,
           "spread_s": spread, "spread_from": spread_from, "noise_floor_s": floor,
           "significant": significant, "significant_only_by_every_launch": only_by_every_launch,
           "kind": "loss" if lost > 0 else "gain",
           "lost_interval_s": _interval([b - a for a, b in zip(reference.launch_iter_s,
                                                              run.launch_iter_s)]),
           "shares_pct": None, "gains_s": {}}
    if not significant or lost <= 0:
        return out
    parts = {**growth, "residual": residual}
    grew = {k: v for k, v in parts.items() if v > RESOLUTION_S}
    total = sum(grew.values())
    out["shares_pct"] = {k: 100 * v / total for k, v in grew.items()}
    out["gains_s"] = {k: v for k, v in parts.items() if v < -RESOLUTION_S}
    return out


def _interval(values: list[float]) -> list[float] | None:
    return [min(values), max(values)] if len(values) >= 2 else None


def scaling_rows(measured: dict[int, Measured]) -> list[dict]:
    """Per world size: iteration time, components, speedup, efficiency, Karp-Flatt and the
    split of lost time against world size 1 (None where world size 1 is missing).

    With repeated interleaved launches, ``efficiency_interval`` is the range of the paired
    launches' efficiencies.

    Weak scaling (images per rank fixed, as the thesis ran) compares T(N) with T(1); strong
    scaling (global batch fixed) with T(1) x images per rank at N / at 1, i.e. T(1) / N: the
    iteration N ranks would take if they scaled perfectly. Each run's ``images_per_rank`` (in
    ``extra``) gives the ratio, so one formula serves both:
    E(N) = r T(1) / T(N), S(N) = N E(N), lost time = T(N) - r T(1) with r = 1 (weak), 1/N (strong).
    """
    base = measured.get(1)
    rows = []
    for ws in sorted(measured):
        m = measured[ws]
        row = {"world_size": ws, "iter_s": m.iter_s, "components_s": dict(m.components_s),
               "residual_s": m.residual_s, "iter_iqr_ratio": m.iter_iqr_ratio,
               "unstable": m.unstable, "samples": m.samples, "launches": len(m.launch_iter_s),
               "launch_iter_s": list(m.launch_iter_s), "straggler": m.extra.get("straggler"),
               "speedup": None, "efficiency": None, "efficiency_interval": None,
               "karp_flatt": None, "loss": None}
        if base is not None:
            ideal = base.scaled(work_ratio(base, m))
            s = scaling.speedup(ideal.iter_s, m.iter_s, ws)
            row.update(speedup=s, efficiency=scaling.efficiency(ideal.iter_s, m.iter_s),
                       karp_flatt=None if ws == 1 else scaling.karp_flatt(s, ws),
                       efficiency_interval=_interval(
                           [a / b for a, b in zip(ideal.launch_iter_s, m.launch_iter_s)]))
            if ws != 1:
                row["loss"] = split_loss(ideal, m)
        rows.append(row)
    return rows


def work_ratio(base: Measured, run: Measured) -> float:
    """Images per rank at ``run``'s world size over those at ``base``'s (1 when not recorded,
    and for weak scaling)."""
    a, b = base.extra.get("images_per_rank"), run.extra.get("images_per_rank")
    return b / a if a and b else 1.0
