"""Recommendations grounded in an attribution, ranked by the efficiency they would recover.

Each rule looks at one component's share of the lost time at the largest world size; the
efficiency it could recover is what E(N) would be without that component's growth:
T(1) / (T(N) - growth) - E(N).
"""
from __future__ import annotations

ADVICE = {
    "data_wait": ("loading is on the critical path",
                  "more loader workers per rank (--workers), faster decoding (Pillow-SIMD / "
                  "turbojpeg), smaller or pre-resized images, or GPU-side augmentation"),
    "exposed_comm": ("gradient all-reduce is not hidden under backward",
                     "tune DDP's bucket_cap_mb, set gradient_as_bucket_view=True, register the "
                     "bf16 compression hook (ddp_comm_hooks.default_hooks.bf16_compress_hook), "
                     "or use a faster interconnect"),
    "forward": ("forward grows with world size",
                "look for synchronisation in forward: SyncBN and DDP buffer broadcasts "
                "(broadcast_buffers=False if BN statistics need not match)"),
    "backward": ("backward compute grows with world size",
                 "check for CPU/GPU contention from loader workers and comm threads; pin "
                 "threads per rank"),
    "optimizer": ("the optimizer step grows with world size",
                  "use a fused/foreach AdamW; check for host-side contention"),
    "other": ("time outside the measured phases grows",
              "profile the tail of the iteration (--trace)"),
}


def recommend(rows: list[dict], straggler: dict | None = None) -> list[dict]:
    """Ranked advice for the largest world size with a loss split."""
    split = [r for r in rows if r.get("loss") and r["loss"].get("shares_pct")]
    if not split:
        return []
    row = split[-1]
    base_iter = next(r["iter_s"] for r in rows if r["world_size"] == 1)
    out = []
    for comp, growth in row["loss"]["growth_s"].items():
        if growth <= 0 or comp not in ADVICE:
            continue
        recovered = base_iter / (row["iter_s"] - growth) - row["efficiency"]
        why, what = ADVICE[comp]
        out.append({"component": comp, "world_size": row["world_size"],
                    "share_pct": row["loss"]["shares_pct"][comp],
                    "efficiency_recoverable": recovered, "why": why, "what": what})
    if straggler and straggler.get("rank") is not None and straggler.get("busy_excess_s", 0) > 0:
        excess = straggler["busy_excess_s"]
        out.append({"component": "skew", "world_size": row["world_size"],
                    "share_pct": 100 * excess / row["loss"]["lost_s"] if row["loss"]["lost_s"] > 0 else 0,
                    "efficiency_recoverable": base_iter / max(row["iter_s"] - excess, 1e-12) - row["efficiency"],
                    "why": f"rank {straggler['rank']} is slower than the others by {excess:.4f} s",
                    "what": f"inspect rank {straggler['rank']}'s host: its loader, CPU binding, GPU clocks"})
    return sorted(out, key=lambda r: r["efficiency_recoverable"], reverse=True)
