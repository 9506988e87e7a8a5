"""The attribution report's figures, as PNG bytes (matplotlib, Agg backend)."""
from __future__ import annotations

import io

from swinkit.measure.phases import BLAME_KEYS


def figures(r: dict) -> dict[str, bytes]:
    """PNG bytes: stacked blame per world size, efficiency vs ideal (+ thesis), loss split,
    and communication per image by accumulation K where measured."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}
    runs = r["runs"]
    ws = [row["world_size"] for row in runs]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bottom = [0.0] * len(runs)
    for comp in BLAME_KEYS:
        vals = [row["components_s"][comp] for row in runs]
        ax.bar([str(w) for w in ws], vals, bottom=bottom, label=comp)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set(xlabel="world size", ylabel="seconds per iteration", title="DDP iteration by cause (blame)")
    ax.legend(fontsize=7)
    out["phases.png"] = _png(fig, plt)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    eff = [(row["world_size"], row["efficiency"]) for row in runs if row["efficiency"] is not None]
    if eff:
        ax.plot(*zip(*eff), "o-", label="measured (swinkit)")
    xs = sorted(set(ws) | {1, 2, 4})
    ax.plot(xs, [1.0] * len(xs), "k--", label="ideal")
    for name, speedups in r["thesis_speedups"].items():
        pts = sorted((int(n), s / int(n)) for n, s in speedups.items())
        ax.plot(*zip(*pts), "x:", label=f"thesis: {name}")
    ax.set(xlabel="world size", ylabel="parallel efficiency", ylim=(0, 1.15),
           title="Efficiency vs ideal (weak scaling)")
    ax.legend(fontsize=7)
    out["efficiency.png"] = _png(fig, plt)

    if r["loss_shares"]:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        keys = list(BLAME_KEYS) + ["residual"]
        left = [0.0] * len(r["loss_shares"])
        labels = [f"N={k}" for k in r["loss_shares"]]
        for key in keys:
            vals = [shares.get(key, 0.0) for shares in r["loss_shares"].values()]
            ax.barh(labels, vals, left=left, label=key)
            left = [a + b for a, b in zip(left, vals)]
        ax.set(xlabel="% of the time that grew", title="Where the lost time goes")
        ax.legend(fontsize=7)
        out["loss_split.png"] = _png(fig, plt)
    if r.get("grad_accum"):
        out["grad_accum.png"] = _grad_accum(r["grad_accum"], plt)
    return out


def _grad_accum(summary: list[dict], plt) -> bytes:
    """Communication per image relative to K=1 against K, beside the ideal 1/K."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ks = sorted({row["grad_accum"] for g in summary for row in g["by_k"]})
    ax.plot(ks, [1 / k for k in ks], "k--", label="ideal 1/K")
    for g in summary:
        pts = [(row["grad_accum"], row["ratio"]) for row in g["by_k"] if row["ratio"] is not None]
        if pts:
            ax.plot(*zip(*pts), "o-", label=f"{g['engine'] or ''} N={g['world_size']}".strip())
    ax.set(xlabel="micro-batches per optimizer step (K)", ylabel="comm per image / at K=1",
           xticks=ks, title="Gradient accumulation: communication per image")
    ax.legend(fontsize=7)
    return _png(fig, plt)


def _png(fig, plt) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()
