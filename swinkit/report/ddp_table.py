"""One DDP run as a terminal table: where time went (phases) beside why (blame)."""
from __future__ import annotations

from swinkit.measure.phases import BLAME_KEYS, PHASES


def ddp_table(result: dict) -> str:
    """Phases and blame per iteration (median of per-rank medians), waits per rank, straggler."""
    iter_s = result["iter_s"]
    lines = [f"DDP iteration: preset {result['preset']}, world size {result['world_size']} "
             f"({result['backend']}, {result['device']}), {result['iterations']} measured "
             f"iterations after {result['warmup']} warm-up"
             + f"; precision {_precision(result)}"
             + (f"; injected {result['injection_text']}" if result.get("injection_text") else ""),
             f"{'':<14}{'where time went':>24}  {'why (blame)':>20}",
             f"{'component':<14}{'phase s':>10}{'% iter':>8}{'skew s':>8}  {'blame s':>10}{'% iter':>8}"]
    for key in BLAME_KEYS:
        phase = result["phases_s"].get(key)
        left = (f"{phase:>10.4f}{100 * phase / iter_s:>7.1f}%{result['skew_s'][key]:>8.4f}"
                if key in PHASES else f"{'':>26}")
        blame = result.get("blame_s", {}).get(key)
        right = f"{blame:>10.4f}{100 * blame / iter_s:>7.1f}%" if blame is not None else ""
        lines.append(f"{key:<14}{left}  {right}")
    lines.append(f"{'iteration':<14}{iter_s:>10.4f}{100.0:>7.1f}%{'':>8}  "
                 f"{'residual':>10} {result.get('residual_s', 0.0):+.4f} s (median iteration - "
                 f"sum of blame medians)")
    lines += _waits(result) + _straggler(result)
    check = (result.get("ddp_cross_check") or {}).get("backward_total")
    if check:
        lines.append(f"DDP reducer timers vs ours, loss.backward(): {check['ddp_s']:.4f} s vs "
                     f"{check['ours_s']:.4f} s ({100 * check['disagreement']:.1f} % apart)")
    clock = result.get("clock") or {}
    if clock and not clock.get("same_host"):
        lines.append(f"clocks: {len(set(clock['hosts']))} hosts, offsets from rank 0 applied "
                     f"(error bound {clock['offset_error_s'] * 1e3:.3f} ms)")
    return "\n".join(lines)


def _precision(result: dict) -> str:
    """The precision's label (``bf16``, ``tf32 (a no-op on CPU: fp32)``); a result from before
    precisions were applied ran fp32."""
    return (result.get("precision") or {}).get("label") or "fp32"


def _waits(result: dict) -> list[str]:
    waits, transfers = result.get("sync_wait_s"), result.get("transfer_s")
    if not waits:
        return []
    lines = ["in collectives, per rank (s): sync_wait = waiting for the last rank, "
             "transfer = the rest"]
    for rank in sorted(waits, key=int):
        parts = [f"{p}: wait {waits[rank][p]:.4f} / transfer {transfers[rank][p]:.4f}"
                 for p in PHASES if waits[rank][p] or transfers[rank][p]]
        lines.append(f"  rank {rank}: " + ("; ".join(parts) or "none"))
    return lines


def _straggler(result: dict) -> list[str]:
    s = result.get("straggler") or {}
    if s.get("rank") is None:
        return ["straggler: none (no rank made another wait)"]
    share = 100 * s["wait_caused_s"] / result["iter_s"]
    return [f"straggler: rank {s['rank']}, late from {s['phase']}: made the others wait "
            f"{s['wait_caused_s']:.4f} s per iteration ({share:.1f} % of it)"]
