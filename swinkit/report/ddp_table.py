"""One DDP run as a terminal table; numbers are computed elsewhere."""
from __future__ import annotations

from swinkit.measure.phases import PHASES


def ddp_table(result: dict) -> str:
    """A per-phase table of one DDP run: seconds, share of the iteration, skew across ranks."""
    iter_s = result["iter_s"]
    lines = [f"DDP iteration: preset {result['preset']}, world size {result['world_size']} "
             f"({result['backend']}, {result['device']}), {result['iterations']} measured "
             f"iterations after {result['warmup']} warm-up",
             f"{'phase':<14}{'seconds':>10}{'% iter':>9}{'skew s':>10}"]
    for phase in PHASES:
        s = result["phases_s"][phase]
        lines.append(f"{phase:<14}{s:>10.4f}{100 * s / iter_s:>8.1f}%{result['skew_s'][phase]:>10.4f}")
    lines.append(f"{'iteration':<14}{iter_s:>10.4f}{100.0:>8.1f}%")
    strag = result["straggler"]
    lines.append(f"straggler: rank {strag['rank']} (busy {strag['busy_excess_s']:+.4f} s vs median rank)")
    check = result.get("ddp_cross_check", {}).get("backward_total")
    if check:
        lines.append(f"DDP reducer timers vs ours, loss.backward(): {check['ddp_s']:.4f} s vs "
                     f"{check['ours_s']:.4f} s ({100 * check['disagreement']:.1f} % apart)")
    return "\n".join(lines)
