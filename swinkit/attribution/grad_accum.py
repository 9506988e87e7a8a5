"""Does gradient accumulation pay? Communication per image by K, against the ideal 1/K.

With K micro-batches per optimizer step and one gradient communication per step (DDP's
``no_sync``, ZeRO-0/1), the communication is shared by K times the images, so communication
per image should fall as 1/K. It falls less where the one communication grows (a larger
exposed tail) and not at all where gradients still move every micro-step (ZeRO-2). This module
judges measured rows (from a fresh engine run or from asv's stored ``GradAccum`` tracks) against
that ideal; numbers only, no rendering.
"""
from __future__ import annotations

# A change of communication per image smaller than this, relative to the previous K's, is not
# called a fall: exposed communication is noisy, and a flat line must not read as a saving.
FALL_TOLERANCE = 0.05


def summarize(rows: list[dict]) -> list[dict]:
    """One entry per (engine, world size) that ran at several K, in row order.

    ``rows`` hold ``engine`` (optional), ``world_size``, ``grad_accum``, ``comm_per_image_s``
    and, where measured, ``comm_rounds_per_step``, ``step_s`` and ``wire_bytes_per_image``.
    Each entry has ``by_k`` (those fields per K, plus ``ratio`` to K=1, the ``ideal_ratio``
    1/K and ``share_of_ideal_saving`` = (1 - ratio) / (1 - 1/K): 1.0 is the ideal saving,
    0 none, negative a growth), ``falls`` (True, False, or None where nothing can be judged),
    ``verdict`` (the judgement in words) and ``one_round_per_step``."""
    groups: dict = {}
    for row in rows:
        groups.setdefault((row.get("engine"), row["world_size"]), []).append(row)
    return [_judge(engine, ws, sorted(these, key=lambda r: r["grad_accum"]))
            for (engine, ws), these in groups.items()
            if len({r["grad_accum"] for r in these}) > 1]


def _judge(engine, world_size: int, rows: list[dict]) -> dict:
    base = next((r["comm_per_image_s"] for r in rows if r["grad_accum"] == 1), None)
    by_k = [_k_row(r, base) for r in rows]
    rounds = [r["comm_rounds_per_step"] for r in by_k if r["comm_rounds_per_step"] is not None]
    out = {"engine": engine, "world_size": world_size, "by_k": by_k,
           "one_round_per_step": all(x == 1 for x in rounds) if rounds else None}
    if base is None:
        return dict(out, falls=None, verdict="no K=1 measurement to compare with")
    if base <= 0:
        return dict(out, falls=None, verdict="no exposed communication at K=1: nothing to fall")
    measured = [r for r in by_k if r["comm_per_image_s"] is not None]
    if len(measured) < 2:
        return dict(out, falls=None, verdict="no measurement at K > 1 to compare with K=1")
    rise = next(((a, b) for a, b in zip(measured, measured[1:])
                 if not b["comm_per_image_s"] < (1 - FALL_TOLERANCE) * a["comm_per_image_s"]),
                None)
    last = measured[-1]
    ideal = (f"{last['ratio']:.2f} of K=1 at K={last['grad_accum']} (ideal 1/{last['grad_accum']}"
             f" = {last['ideal_ratio']:.2f})")
    if rise is None:
        share = last["share_of_ideal_saving"]
        return dict(out, falls=True, verdict=f"falls with K: {ideal}, {100 * share:.0f} % of the "
                                             f"saving ideal accumulation gives{_why(by_k)}")
    a, b = rise
    change = b["comm_per_image_s"] / a["comm_per_image_s"] - 1
    return dict(out, falls=False, verdict=(
        f"does not fall with K: from K={a['grad_accum']} to K={b['grad_accum']} it changes by "
        f"{100 * change:+.0f} % (a fall needs more than {100 * FALL_TOLERANCE:.0f} %); {ideal}"
        f"{_why(by_k)}"))


def _why(by_k: list[dict]) -> str:
    """Why it falls or not, where the rounds and bytes say: accumulation saves only if
    gradients move once per optimizer step, and only what crosses a wire."""
    wires = [r["wire_bytes_per_image"] for r in by_k]
    local = ("; no bytes cross a wire (one rank): what is exposed is the collectives' local cost"
             if all(w == 0 for w in wires) else "")
    return _rounds(by_k) + local


def _rounds(by_k: list[dict]) -> str:
    many = [r for r in by_k if (r["comm_rounds_per_step"] or 0) > 1]
    if many:
        r = many[-1]
        return (f"; gradients move in {r['comm_rounds_per_step']:g} micro-steps per optimizer "
                f"step at K={r['grad_accum']}, not once")
    if all(r["comm_rounds_per_step"] == 1 for r in by_k):
        return "; one gradient communication per optimizer step at every K"
    return ""


def _k_row(row: dict, base: float | None) -> dict:
    k = row["grad_accum"]
    value = row.get("comm_per_image_s")
    ratio = value / base if value is not None and base else None
    share = (1 - ratio) / (1 - 1 / k) if ratio is not None and k > 1 else None
    return {"grad_accum": k, "comm_per_image_s": value, "ratio": ratio, "ideal_ratio": 1 / k,
            "share_of_ideal_saving": share,
            "comm_rounds_per_step": row.get("comm_rounds_per_step"),
            # the engine comparison's rows call the optimizer step ``iter_s``
            "step_s": row.get("step_s", row.get("iter_s")),
            "wire_bytes_per_image": row.get("wire_bytes_per_image")}
