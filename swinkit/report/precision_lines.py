"""The lost time's split in two precisions side by side, and the loader's demand in each
(the numbers: :mod:`swinkit.attribution.precision_shift`)."""
from __future__ import annotations


def shift_lines(shifts: list[dict]) -> list[str]:
    """The report's lines: per precision what-if, the lost time's split beside the
    baseline's, and the loader's demand per rank in each."""
    lines = []
    for s in shifts:
        b, r = s["baseline"], s["remedy"]
        lines += ["", f"lost time at N={s['world_size']} against N={s['reference_world_size']} "
                      f"(s per iteration; share of the loss), {s['baseline_precision']} vs "
                      f"{s['precision']} ({s['name']}):",
                  f"  {'phase':<14}{precision_name(s['baseline_precision']):>18}"
                  f"{precision_name(s['precision']):>26}"]
        for phase in b["lost_s"]:
            lines.append(f"  {phase:<14}{shift_cell(b, phase):>18}{shift_cell(r, phase):>26}")
        lines.append(f"  {'total':<14}{b['total_s']:>+18.4f}{r['total_s']:>+26.4f}")
        demand = s["loader_demand_images_per_s"]
        if demand["baseline"] and demand["remedy"]:
            lines.append(f"  loader demand per rank: {demand['baseline']:.1f} images/s in "
                         f"{s['baseline_precision']}, {demand['remedy']:.1f} in "
                         f"{s['precision']}")
    return lines


def shift_cell(split: dict, phase: str) -> str:
    share = split["share"][phase]
    return f"{split['lost_s'][phase]:+.4f}" + (f" ({share:+.0%})" if share is not None else "")


def precision_name(label: str | None) -> str:
    """A column's heading: the precision's name without its note (the title has the label).

    >>> precision_name("tf32 (a no-op on CPU: fp32)"), precision_name(None)
    ('tf32', '-')
    """
    return label.split(" (")[0] if label else "-"
