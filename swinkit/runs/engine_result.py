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


INSTRUMENTATION = {
    "ddp": {"phases": "swinkit timeline (DDP comm hook marks the last bucket ready)",
            "collectives": "DDP comm hook: every gradient bucket's all-reduce, its bytes",
            "engine_timers": "DDP reducer timers (ddp_cross_check; CPU by default)",
            "comms_log": None},
    "deepspeed": {"phases": "swinkit timeline marks around engine(), engine.backward(), "
                            "engine.step()",
                  "collectives": "wrappers on DeepSpeed's comm backend (deepspeed.comm cdb): "
                                 "every ZeRO collective, arrival/done, message bytes",
                  "engine_timers": "DeepSpeed wall_clock_breakdown timers (fwd, bwd, bwd_inner, "
                                   "bwd_allreduce, step; optimizer_gradients/step/allgather), "
                                   "per step (CPU by default; they synchronise on GPU)",
                  "comms_log": "DeepSpeed comms_logger (prof_all) in a separate pass after the "
                               "measured steps (it synchronises after every collective)"},
    "dp": {"phases": "swinkit timeline around the DataParallel call (copies inside forward)",
           "collectives": "bytes of scatter / replicate / gather counted in DataParallel's "
                          "methods; gradient reduce-add bytes from the parameter list",
           "engine_timers": None, "comms_log": None},
    "dp-vanilla": {"phases": "swinkit timeline; scatter, replicate and gather each a span "
                             "(exposed_comm), parallel_apply forward",
                   "collectives": "scatter / replicate / gather as blocking records with bytes; "
                                  "gradient reduce-add inside backward (bytes only)",
                   "engine_timers": None, "comms_log": None},
}


def _micro_starts(iteration: dict) -> list[float]:
    """Start of each micro-step: the iteration start, then every mark that closes an optimizer
    or backward phase and is followed by a data_wait (the next micro-batch's loading)."""
    marks = iteration["marks"]
    starts = [marks[0][1]]
    for (name, t), (nxt, _) in zip(marks[1:], marks[2:]):
        if nxt == "data_wait" and name != "data_wait":
            starts.append(t)
    return starts


def comm_rounds(iteration: dict) -> int:
    """Micro-steps of this iteration in which gradients were communicated during backward:
    1 for DDP with no_sync accumulation and ZeRO-0/1 (at the boundary only), K for ZeRO-2."""
    starts = _micro_starts(iteration)
    rounds = set()
    for c in iteration["collectives"]:
        op = traffic.collective_op(c["name"])
        in_backward = c["name"].startswith("bucket") or c["name"].endswith("@backward")
        if op is None or not in_backward or c.get("arrive") is None:
            continue
        rounds.add(sum(1 for s in starts if s <= c["arrive"]))
    return len(rounds)


def gradient_collectives(iteration: dict) -> int:
    """Gradient-reduction collectives of one iteration (DDP buckets; DeepSpeed's reductions in
    backward)."""
    return sum(1 for c in iteration["collectives"]
               if c["name"].startswith("bucket")
               or (c["name"].endswith("@backward") and traffic.collective_op(c["name"])))


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
    # Long: one column of the engine comparison after another, in the table's order.
    world = result["world_size"]
    ranks = result["ranks"]
    r0 = ranks[0]
    k = spec.grad_accum
    group = k if spec.engine == "ddp" else 1   # timeline iterations per optimizer step
    images_per_device_step = result["images_per_rank"] * k
    steps = step_summary(result, group)
    block = {"name": spec.engine, "key": spec.key, "zero": spec.zero_stage, "grad_accum": k,
             "instrumentation": INSTRUMENTATION[spec.engine],
             "images_per_step": images_per_device_step * world,
             "step_s": steps["step_s"], "step_phases_s": {p: steps[p] for p in PHASES}}
    if group == 1 and result.get("blame_s"):
        block["step_blame_s"] = dict(result["blame_s"])
    elif result.get("blame_mean_s"):  # per micro-batch: means add up to the step, medians do not
        block["step_blame_s"] = {key: v * group for key, v in result["blame_mean_s"].items()}
    if spec.engine in ("dp", "dp-vanilla"):
        rows = r0.get("copies_bytes") or []
        med = {kind: statistics.median(r[kind] for r in rows) for kind in rows[0]} if rows else {}
        wire = sum(med.values()) if med else None
        block["traffic"] = {"message_bytes": wire, "wire_bytes_per_rank": wire,
                            "by_copy": med, "collectives_per_step": 4 if med else None,
                            "gradient_collectives_per_step": k if world > 1 else 0,
                            "comm_rounds_per_step": k if world > 1 else 0,
                            "note": "one process: bytes copied between devices per iteration"}
    else:
        per_step = []
        for step in _steps(r0["timeline"], result["warmup"], group):
            rows = traffic.traffic_from_timeline(step, world)["per_iteration"]
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
        ops = {op for s in per_step for op in s["by_op"]}
        block["traffic"] = {
            "message_bytes": _median([s["message_bytes"] for s in per_step]),
            "wire_bytes_per_rank": _median([s["wire_bytes_per_rank"] for s in per_step]),
            "collectives_per_step": _median([s["collectives"] for s in per_step]),
            "by_op": {op: {"count": _median([s["by_op"].get(op, {}).get("count", 0) for s in per_step]),
                           "bytes": _median([s["by_op"].get(op, {}).get("bytes", 0) for s in per_step])}
                      for op in sorted(ops)},
            "gradient_collectives_per_step": _median([s["gradient_collectives"] for s in per_step]),
            "comm_rounds_per_step": _median([s["comm_rounds"] for s in per_step]),
            "model": "ring: all-reduce 2(N-1)/N, all-gather and reduce-scatter (N-1)/N, "
                     "broadcast and reduce 1 x message bytes per rank",
        }
        if spec.engine == "deepspeed":
            block["comms_logger"] = r0.get("comms_logger")
            block["ds_config"] = r0.get("ds_config")
            block["deepspeed"] = r0.get("deepspeed")
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
