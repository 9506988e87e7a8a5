"""Recommendations that follow blame, ranked by the efficiency they would recover.

Each rule looks at one blame component's growth at the largest world size with a significant
loss; the efficiency it could recover is what E(N) would be without that growth:
T(1) / (T(N) - growth) - E(N). Blame has already charged every wait to the rank and phase that
caused it, so when one rank made the others wait for most of a component's growth, the advice
is about that rank's slow phase (its loader, its compute), not about the collective where the
others happened to wait.
"""
from __future__ import annotations

from swinkit.measure.phases import UNATTRIBUTED

ADVICE = {
    "data_wait": ("loading is on the critical path",
                  "more loader workers per rank (--workers), faster decoding (Pillow-SIMD / "
                  "turbojpeg), smaller or pre-resized images, or GPU-side augmentation"),
    "exposed_comm": ("gradient transfer is not hidden under backward",
                     "tune DDP's bucket_cap_mb, set gradient_as_bucket_view=True, register the "
                     "bf16 compression hook (ddp_comm_hooks.default_hooks.bf16_compress_hook), "
                     "or use a faster interconnect"),
    "forward": ("forward compute grows with world size",
                "look for contention on the compute device (loader workers and comm threads "
                "on the same cores) and for SyncBN's transfers"),
    "backward": ("backward compute grows with world size",
                 "check for CPU/GPU contention from loader workers and comm threads; pin "
                 "threads per rank"),
    "optimizer": ("the optimizer step grows with world size",
                  "use a fused/foreach AdamW; check for host-side contention"),
    "other": ("time outside the measured phases grows",
              "profile the tail of the iteration (--trace)"),
    UNATTRIBUTED: ("ranks wait at collectives for a cause the timeline cannot trace",
                   "open the per-rank timeline (swinkit ddp --timeline) and look for work "
                   "outside the instrumented phases (clock drift across nodes, host hiccups)"),
}

STRAGGLER_ADVICE = {
    "data_wait": "its loader is slow: check that host's disk and CPU load, give it more loader "
                 "workers, or pre-resize the data it reads",
    "forward": "its forward is slow: check its device (clocks, thermal throttling, another "
               "process on it) and its CPU binding",
    "backward": "its backward is slow: check its device (clocks, thermal throttling, another "
                "process on it) and its CPU binding",
    "exposed_comm": "it launches its collectives late: check its link (NIC, PCIe/NVLink "
                    "topology) and its comm hook",
    "optimizer": "its optimizer step is slow: check host-side contention on that rank",
    "other": "its iteration tail is slow: profile that rank (--trace)",
}
STRAGGLER_SHARE = 0.5  # a straggler explains a component when it caused half its growth
MIN_SHARE_PCT = 5.0    # below this share of the time that grew, a component gets no advice


def recommend(rows: list[dict]) -> list[dict]:
    """Ranked advice for the largest world size with a significant loss split."""
    split = [r for r in rows if r.get("loss") and r["loss"].get("shares_pct")]
    if not split:
        return []
    row = split[-1]
    base_iter = next(r["iter_s"] for r in rows if r["world_size"] == 1)
    straggler = row.get("straggler") or {}
    out = []
    for comp, growth in row["loss"]["growth_s"].items():
        if comp not in ADVICE or row["loss"]["shares_pct"].get(comp, 0.0) < MIN_SHARE_PCT:
            continue
        why, what = ADVICE[comp]
        rec = {"component": comp, "world_size": row["world_size"], "rank": None,
               "share_pct": row["loss"]["shares_pct"].get(comp, 0.0),
               "efficiency_recoverable": base_iter / (row["iter_s"] - growth) - row["efficiency"],
               "why": why, "what": what}
        caused = (straggler.get("by_phase") or {}).get(comp, 0.0)
        if straggler.get("rank") is not None and caused >= STRAGGLER_SHARE * growth:
            rank = straggler["rank"]
            rec.update(rank=rank, why=f"rank {rank} is late from {comp}: the others waited "
                                      f"{caused:.4f} s per iteration for it",
                       what=f"on rank {rank}: {STRAGGLER_ADVICE[comp]}")
        out.append(rec)
    return sorted(out, key=lambda r: r["efficiency_recoverable"], reverse=True)
