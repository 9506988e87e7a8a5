"""Where the scaling goes: per world size, time, scaling metrics and the split of lost time.

Numbers only (rendering is in swinkit.report). Inputs are per-world-size measurements of the
DDP iteration (:class:`Measured`); the reference for the lost time is world size 1 (scaling) or
another run at the same world size (a comparison, or a run with an injected delay).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from swinkit.attribution import scaling
from swinkit.measure.phases import PHASES

COMPONENTS = PHASES


@dataclass
class Measured:
    """One world size's DDP iteration: median iteration time and phases (seconds)."""
    world_size: int
    iter_s: float
    components_s: dict[str, float]
    iter_iqr_ratio: float | None = None
    samples: int | None = None
    extra: dict = field(default_factory=dict)

    @property
    def unstable(self) -> bool:
        return self.iter_iqr_ratio is not None and self.iter_iqr_ratio > 0.10


def split_loss(reference: Measured, run: Measured) -> dict:
    """Split ``run.iter_s - reference.iter_s`` over the components' growth.

    Shares (percent) add to 100 with the part the components do not explain named
    ``residual`` (medians of phases need not add up to the median iteration). None when
    nothing was lost.
    """
    lost = run.iter_s - reference.iter_s
    growth = {c: run.components_s.get(c, 0.0) - reference.components_s.get(c, 0.0)
              for c in COMPONENTS}
    residual = lost - sum(growth.values())
    out = {"lost_s": lost, "growth_s": growth, "residual_s": residual,
           "residual_of_iter": abs(residual) / run.iter_s if run.iter_s else math.nan}
    if lost <= 0:
        out["shares_pct"] = None
        return out
    shares = {c: 100 * g / lost for c, g in growth.items()}
    shares["residual"] = 100 * residual / lost
    out["shares_pct"] = shares
    return out


def scaling_rows(measured: dict[int, Measured]) -> list[dict]:
    """Per world size: iteration time, components, speedup, efficiency, Karp-Flatt and the
    split of lost time against world size 1 (None where world size 1 is missing)."""
    base = measured.get(1)
    rows = []
    for ws in sorted(measured):
        m = measured[ws]
        row = {"world_size": ws, "iter_s": m.iter_s, "components_s": dict(m.components_s),
               "iter_iqr_ratio": m.iter_iqr_ratio, "unstable": m.unstable, "samples": m.samples,
               "speedup": None, "efficiency": None, "karp_flatt": None, "loss": None}
        if base is not None:
            s = scaling.speedup(base.iter_s, m.iter_s, ws)
            row.update(speedup=s, efficiency=scaling.efficiency(base.iter_s, m.iter_s),
                       karp_flatt=None if ws == 1 else scaling.karp_flatt(s, ws))
            if ws != 1:
                row["loss"] = split_loss(base, m)
        rows.append(row)
    return rows
