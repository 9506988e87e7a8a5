"""Engines side by side at each world size: one table (text) and one figure (PNG bytes).

Input: :func:`swinkit.runs.engine_run.compare_rows` rows (plus the skipped/failed
reasons, keyed ``(engine, world size)`` or ``(engine, world size, K)``). Columns: iteration,
efficiency against the same engine at world size 1, blame by cause, bytes per iteration
(message, and wire bytes per rank), gradient-communication rounds per optimizer step,
communication per image, peak memory, optimizer-state bytes per rank.
"""
from __future__ import annotations

import io

from swinkit.measure.phases import BLAME_KEYS

_SHORT = {"data_wait": "data", "forward": "fwd", "backward": "bwd", "exposed_comm": "comm",
          "optimizer": "optim", "other": "other", "unattributed": "unattr"}
MB = 2**20


def _f(value, fmt="{:.4f}", scale=1.0):
    return "-" if value is None else fmt.format(value / scale)


def compare_table(rows: list[dict], skipped: dict | None = None, failed: dict | None = None) -> str:
    head = (f"{'engine':<11}{'N':>3}{'K':>3}{'iter s':>9}{'eff':>6}"
            + "".join(f"{_SHORT[k]:>8}" for k in BLAME_KEYS)
            + f"{'msg MB':>9}{'wire MB':>9}{'rounds':>7}{'comm/img s':>11}{'peak MB':>9}"
            f"{'optst MB':>9}")
    precisions = ", ".join(dict.fromkeys(r.get("precision") or "fp32" for r in rows))
    lines = ["engines side by side (blame s per iteration; bytes per optimizer step and rank)"
             + (f"; precision {precisions}" if rows else ""), head]
    world = None
    for r in rows:
        if world is not None and r["world_size"] != world:
            lines.append("")
        world = r["world_size"]
        blame = r["blame_s"]
        lines.append(
            f"{r['engine']:<11}{r['world_size']:>3}{r.get('grad_accum', 1):>3}"
            f"{_f(r['iter_s']):>9}{_f(r['efficiency'], '{:.2f}'):>6}"
            + "".join(f"{_f(blame.get(k)):>8}" for k in BLAME_KEYS)
            + f"{_f(r['message_bytes'], '{:.2f}', MB):>9}{_f(r['wire_bytes_per_rank'], '{:.2f}', MB):>9}"
            f"{_f(r['comm_rounds_per_step'], '{:g}'):>7}{_f(r['comm_per_image_s'], '{:.5f}'):>11}"
            f"{_f(r['peak_memory_bytes'], '{:.0f}', MB):>9}"
            f"{_f(r['optimizer_state_bytes'], '{:.2f}', MB):>9}")
    for label, reasons in (("skipped", skipped or {}), ("failed", failed or {})):
        for (key, ws, *k), why in sorted(reasons.items(),
                                         key=lambda kv: (kv[0][1], kv[0][0], kv[0][2:])):
            lines.append(f"{label}: {key} at world size {ws}" + (f", K={k[0]}" if k else "")
                         + f": {why}")
    lines.append("eff = iteration at N=1 / at N (same engine, weak scaling); rounds = micro-steps "
                 "with gradient communication per optimizer step; peak = CUDA allocator peak on "
                 "GPU, process peak RSS on CPU")
    return "\n".join(lines)


def compare_figure(rows: list[dict]) -> bytes:
    """One PNG: blame stacked per engine and world size; bytes per step; peak memory."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['engine']}\nN={r['world_size']}" + (f" K={r['grad_accum']}"
                                                      if r.get("grad_accum", 1) > 1 else "")
              for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    bottom = [0.0] * len(rows)
    for key in BLAME_KEYS:
        vals = [r["blame_s"].get(key) or 0.0 for r in rows]
        axes[0].bar(labels, vals, bottom=bottom, label=key)
        bottom = [b + v for b, v in zip(bottom, vals)]
    axes[0].set(ylabel="seconds per iteration", title="iteration by cause (blame)")
    axes[0].legend(fontsize=6)
    axes[1].bar(labels, [(r["wire_bytes_per_rank"] or 0) / MB for r in rows], label="wire / rank")
    axes[1].plot(labels, [(r["message_bytes"] or 0) / MB for r in rows], "kx", label="message")
    axes[1].set(ylabel="MiB per optimizer step", title="bytes moved")
    axes[1].legend(fontsize=6)
    axes[2].bar(labels, [(r["peak_memory_bytes"] or 0) / MB for r in rows])
    axes[2].set(ylabel="MiB", title="peak memory per rank")
    for ax in axes:
        ax.tick_params(axis="x", labelsize=6)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def engine_table(result: dict) -> str:
    """The engine block of one run, under its phase table (what `swinkit ddp --engine` prints
    after the DDP-style table)."""
    eng = result["engine"]
    t = eng["traffic"]
    lines = [f"engine {eng['key']} (grad_accum {eng['grad_accum']}): "
             f"{_f(t['message_bytes'], '{:.3f}', MB)} MiB message / "
             f"{_f(t['wire_bytes_per_rank'], '{:.3f}', MB)} MiB wire per rank per optimizer step; "
             f"{_f(t.get('collectives_per_step'), '{:g}')} collectives, gradient communication "
             f"in {_f(t.get('comm_rounds_per_step'), '{:g}')} micro-step(s); "
             f"exposed comm per image {_f(eng['comm_per_image_s'], '{:.5f}')} s"]
    for op, v in (t.get("by_op") or {}).items():
        lines.append(f"  {op:<24} {_f(v['count'], '{:g}'):>4} x, {_f(v['bytes'], '{:.3f}', MB)} MiB")
    for kind, nbytes in (t.get("by_copy") or {}).items():
        lines.append(f"  {kind:<24} {_f(nbytes, '{:.3f}', MB)} MiB")
    model = t.get("expected")
    if model:  # the engine record's analytic bytes for this run's sizes, beside the measured
        lines.append(f"  analytic model: {_f(model['message_bytes'], '{:.3f}', MB)} MiB message "
                     f"/ {_f(model['wire_bytes_per_rank'], '{:.3f}', MB)} MiB wire per rank "
                     f"({model['formula']})")
    comms = eng.get("comms_logger")
    if comms:
        lines.append(f"DeepSpeed comms logger ({comms['steps']} extra steps): "
                     + ", ".join(f"{name} {o['count_per_step']:g} x / {o['bytes_per_step'] / MB:.3f} MiB"
                                 for name, o in comms["ops"].items()))
    for rank, m in eng["memory"].items():
        state = eng["model_state"].get(rank) or {}
        if m:
            lines.append(f"  rank {rank}: peak {m['peak_bytes'] / MB:.0f} MiB ({m['kind']}); "
                         f"optimizer states {_f(state.get('optimizer_states'), '{:.2f}', MB)} MiB, "
                         f"params {_f(state.get('params'), '{:.2f}', MB)} MiB")
    check = result.get("ds_cross_check") or {}
    for key, c in check.items():
        if c:
            lines.append(f"DeepSpeed timer {c['timer']} vs ours ({key}): {c['deepspeed_s']:.4f} s "
                         f"vs {c['ours_s']:.4f} s ({100 * (c['disagreement'] or 0):.1f} % apart)")
    return "\n".join(lines)
