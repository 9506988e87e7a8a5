"""What engines differ in, read from one engine run's result (numbers only, no launching):
gradient-communication rounds per optimizer step, bytes moved, per-step summaries, the
``engine`` block every engine result carries (:func:`engine_block`), and DeepSpeed's own timers
held against the timeline (:func:`ds_cross_check`).
"""
from __future__ import annotations

import statistics

from swinkit.attribution import traffic
from swinkit.runs.engine_spec import EngineSpec
from swinkit.measure.phases import PHASES
from swinkit.measure.timeline import phase_durations


def _micro_starts(iteration: dict) -> list[float]:
    """Start of each micro-step: the iteration start, then every mark that closes an optimizer
    or backward phase and is followed by a data_wait (the next micro-batch's loading)."""
    marks = iteration["marks"]
    starts = [marks[0][1]]
    for (name, t), (nxt, _) in zip(marks[1:], marks[2:]):
        if nxt == "data_wait" and name != "data_wait":
            starts.append(t)
    return starts


def _reduces_gradients(name: str) -> bool:
    """A gradient reduction: a DDP bucket, or a reducing collective an engine ran in backward
    (FSDP2's all-gathers in backward bring parameters back: not gradient communication)."""
    return name.startswith("bucket") or (name.endswith("@backward")
                                         and traffic.reduces(traffic.collective_op(name)))


def comm_rounds(iteration: dict) -> int:
    """Micro-steps of this iteration in which gradients were communicated during backward:
    1 for DDP with no_sync accumulation and ZeRO-0/1 (at the boundary only), K for ZeRO-2."""
    starts = _micro_starts(iteration)
    rounds = set()
    for c in iteration["collectives"]:
        if not _reduces_gradients(c["name"]) or c.get("arrive") is None:
            continue
        rounds.add(sum(1 for s in starts if s <= c["arrive"]))
    return len(rounds)


def gradient_collectives(iteration: dict) -> int:
    """Gradient-reduction collectives of one iteration (DDP buckets; the other engines'
    reductions in backward)."""
    return sum(1 for c in iteration["collectives"] if _reduces_gradients(c["name"]))


def _steps(timeline: list[dict], warmup: int, group: int) -> list[list[dict]]:
    """Measured optimizer steps as lists of timeline iterations (DDP with ``no_sync``
    accumulation records each micro-batch as an iteration; the other engines one per step)."""
    measured = timeline[warmup:]
    return [measured[i:i + group] for i in range(0, len(measured) - group + 1, group)]


def _step_rows(result: dict, group: int) -> dict:
    """Per rank, per optimizer step: seconds of the step and of each phase."""
    out = {}
    for r in result["ranks"]:
        rows = []
        for step in _steps(r["timeline"], result["warmup"], group):
            phases = dict.fromkeys(PHASES, 0.0)
            for it in step:
                for p, v in phase_durations(it).items():
                    phases[p] += v
            rows.append({"step_s": sum(phases.values()), "phases": phases})
        out[r["rank"]] = rows
    return out


def step_summary(result: dict, group: int) -> dict:
    """Median of per-rank medians of the optimizer step and its phases (seconds)."""
    rows = _step_rows(result, group)

    def med(values):
        return statistics.median(values) if values else None
    per_rank = {r: {"step_s": med([x["step_s"] for x in v]),
                    **{p: med([x["phases"][p] for x in v]) for p in PHASES}}
                for r, v in rows.items()}
    keys = ["step_s", *PHASES]
    return {k: med([v[k] for v in per_rank.values() if v[k] is not None]) for k in keys}


def engine_block(spec: EngineSpec, result: dict) -> dict:
    """Bytes, rounds, communication per image, memory and state: the engine comparison's
    columns for one run, per optimizer step (rank 0's timeline for counts and bytes; medians
    over measured steps)."""
    rec = spec.record
    world, ranks, k = result["world_size"], result["ranks"], spec.grad_accum
    group = k if rec.micro_batch_iterations else 1   # timeline iterations per optimizer step
    images_per_device_step = result["images_per_rank"] * k
    steps = step_summary(result, group)
    block = {"name": spec.engine, "key": spec.key, "zero": spec.zero_stage, "grad_accum": k,
             "instrumentation": rec.instrumentation,
             "images_per_step": images_per_device_step * world,
             "step_s": steps["step_s"], "step_phases_s": {p: steps[p] for p in PHASES}}
    if group == 1 and result.get("blame_s"):
        block["step_blame_s"] = dict(result["blame_s"])
    elif result.get("blame_mean_s"):  # per micro-batch: means add up to the step, medians do not
        block["step_blame_s"] = {key: v * group for key, v in result["blame_mean_s"].items()}
    read = _copy_traffic if rec.traffic_source == "copies" else _collective_traffic
    block["traffic"] = read(result, group, k)
    block["traffic"]["expected"] = expected_traffic(spec, result)
    block.update({name: ranks[0].get(name) for name in rec.block_fields})
    wire = block["traffic"]["wire_bytes_per_rank"]
    block["comm_per_image_s"] = steps["exposed_comm"] / images_per_device_step
    block["wire_bytes_per_image"] = None if wire is None else wire / images_per_device_step
    # the workers feeding one step, all ranks together: the budget engines are compared at
    # (DataParallel's one loader gets N x the workers DDP gives each of its N ranks)
    block["loader_workers_total"] = sum(r.get("loader_workers") or 0 for r in ranks)
    block["memory"] = {str(r["rank"]): r.get("memory") for r in ranks}
    block["model_state"] = {str(r["rank"]): r.get("model_state") for r in ranks}
    peaks = [m["peak_bytes"] for m in block["memory"].values() if m]
    block["peak_memory_bytes"] = max(peaks) if peaks else None
    if not peaks:
        block["memory_note"] = ("this engine's rank loop records no peak memory "
                                "(swinkit.rank.ddp._result has no 'memory' field)")
    return block


def _copy_traffic(result: dict, group: int, k: int) -> dict:
    """One process driving N devices: the bytes its rank counted copying between them."""
    rows = result["ranks"][0].get("copies_bytes") or []
    med = {kind: statistics.median(r[kind] for r in rows) for kind in rows[0]} if rows else {}
    wire = sum(med.values()) if med else None
    moved = k if result["world_size"] > 1 else 0
    return {"message_bytes": wire, "wire_bytes_per_rank": wire, "by_copy": med,
            "collectives_per_step": 4 if med else None,
            "gradient_collectives_per_step": moved, "comm_rounds_per_step": moved,
            "note": "one process: bytes copied between devices per iteration"}


def _collective_traffic(result: dict, group: int, k: int) -> dict:
    """Collectives on rank 0's timeline, per optimizer step (medians over measured steps)."""
    per_step = []
    for step in _steps(result["ranks"][0]["timeline"], result["warmup"], group):
        rows = traffic.traffic_from_timeline(step, result["world_size"])["per_iteration"]
        by_op: dict = {}
        for row in rows:
            for op, v in row["by_op"].items():
                e = by_op.setdefault(op, {"count": 0, "bytes": 0})
                e["count"] += v["count"]
                e["bytes"] += v["bytes"]
        per_step.append({
            "message_bytes": sum(r["message_bytes"] for r in rows),
            "wire_bytes_per_rank": sum(r["wire_bytes_per_rank"] for r in rows),
            "collectives": sum(r["collectives"] for r in rows), "by_op": by_op,
            "gradient_collectives": sum(gradient_collectives(i) for i in step),
            "comm_rounds": sum(comm_rounds(i) for i in step)})

    def med(read):
        return _median([read(s) for s in per_step])
    ops = sorted({op for s in per_step for op in s["by_op"]})
    return {
        "message_bytes": med(lambda s: s["message_bytes"]),
        "wire_bytes_per_rank": med(lambda s: s["wire_bytes_per_rank"]),
        "collectives_per_step": med(lambda s: s["collectives"]),
        "by_op": {op: {"count": med(lambda s: s["by_op"].get(op, {}).get("count", 0)),
                       "bytes": med(lambda s: s["by_op"].get(op, {}).get("bytes", 0))}
                  for op in ops},
        "gradient_collectives_per_step": med(lambda s: s["gradient_collectives"]),
        "comm_rounds_per_step": med(lambda s: s["comm_rounds"]),
        "model": "ring: all-reduce 2(N-1)/N, all-gather and reduce-scatter (N-1)/N, "
                 "broadcast and reduce 1 x message bytes per rank",
    }


def expected_traffic(spec: EngineSpec, result: dict) -> dict | None:
    """The engine record's analytic bytes per optimizer step for this run's sizes (the model's
    gradient, parameter and buffer bytes the ranks measured; DDP's buckets), to hold the
    measured bytes against; None where the engine has no model or the run lacks a size."""
    model = spec.record.traffic_model
    if model is None:
        return None
    r0 = result["ranks"][0]
    module = r0.get("module_bytes") or {}
    crop = result.get("crop_size") or [0, 0]
    sizes = {"world_size": result["world_size"], "grad_accum": spec.grad_accum,
             "zero": spec.zero_stage, "bucket_bytes": result.get("bucket_sizes_bytes"),
             "param_bytes": module.get("params"), "grad_bytes": module.get("grads"),
             "buffer_bytes": module.get("buffers"),
             # one optimizer step's images, float32 RGB at the crop, scattered from device 0
             "input_bytes": (r0.get("images_per_step") or 0) * 3 * crop[0] * crop[1] * 4
                            // spec.grad_accum or None}
    found = model(sizes)
    formula = " ".join(model.__doc__.split())
    return None if found is None else dict(found.to_dict(), formula=formula)


CALLS = ("forward", "backward", "step")   # engine(), engine.backward(), engine.step()


def engine_call_spans(iteration: dict, call_marks: list[list[int]]) -> dict[str, float]:
    """Seconds of ``engine()``, ``engine.backward()`` and ``engine.step()`` in one optimizer
    step, summed over its micro-steps, read on the timeline's own clock.

    Args:
        iteration: a resolved timeline iteration.
        call_marks: per micro-step, the positions in ``iteration["marks"]`` of the loop's own
            marks closing data_wait, forward, backward and optimizer (the recorder's marks for
            collectives sit between them and are skipped).

    >>> it = {"marks": [["start", 0.0], ["data_wait", 1.0], ["forward", 3.0], ["backward", 3.5],
    ...                 ["exposed_comm", 4.0], ["backward", 6.0], ["optimizer", 6.5]]}
    >>> engine_call_spans(it, [[1, 2, 5, 6]])
    {'forward': 2.0, 'backward': 3.0, 'step': 0.5}
    """
    t = [m[1] for m in iteration["marks"]]
    spans = dict.fromkeys(CALLS, 0.0)
    for edges in call_marks:
        if len(edges) != 4 or sorted(edges) != list(edges) or edges[-1] >= len(t):
            raise ValueError(f"call_marks entry must be 4 ascending positions among "
                             f"{len(t)} marks, got {edges!r}")
        for call, (a, b) in zip(CALLS, zip(edges, edges[1:])):
            spans[call] += t[b] - t[a]
    return spans


def ds_cross_check(ranks: list[dict]) -> dict | None:
    """DeepSpeed's own timers against the same engine calls on swinkit's timeline (per
    optimizer step, medians over steps and ranks): fwd, bwd (bwd_inner + bwd_allreduce) and
    step. Ours are the timeline's spans (:func:`engine_call_spans`), not host clocks around
    the calls: on GPU the calls return once their kernels are queued, while DeepSpeed's timers
    are CUDA events, so both sides must be device time; the timeline's clock is (CUDA events
    on GPU, perf_counter on CPU, where the calls block), and ``clock`` names it."""
    out = {}
    for key, timer in zip(CALLS, ("fwd", "bwd", "step")):
        ours, theirs, clocks = [], [], set()
        for r in ranks:
            measured = r["timeline"][r["warmup"]:]
            for t, it, edges in zip(r.get("ds_timers") or [], measured,
                                    r.get("engine_call_marks") or []):
                if t and timer in t:
                    ours.append(engine_call_spans(it, edges)[key])
                    theirs.append(t[timer])
                    clocks.add(r["clock"]["kind"])
        if not ours:
            out[key] = None
            continue
        mine, other = statistics.median(ours), statistics.median(theirs)
        out[key] = {"ours_s": mine, "deepspeed_s": other, "timer": timer, "n": len(ours),
                    "clock": ", ".join(sorted(clocks)),
                    "disagreement": abs(mine - other) / mine if mine else None}
    return out if any(out.values()) else None


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
