"""What a DDP rank returns (:func:`read_out`): its plan's main steps as the result, each kind the
plan reads apart under its own key, what each injection actually took, and the plan's tail.

Read once, after the loop: resolving the timeline waits for a GPU's events, and reading a CUDA
delay's measurements waits for its events too.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from swinkit.measure import ddp_hooks
from swinkit.measure.timeline import phase_durations
from swinkit.model.remedies import heads_are_channels_last
from swinkit.rank.ddp_setup import RankRun
from swinkit.rank.delays import per_iteration
from swinkit.rank.plan import StepPlan
from swinkit.rank.skeleton import identity, timeline_fields
from swinkit.rank.step_switch import sync_batch_norms


@dataclass(frozen=True)
class Usage:
    """The measured window's CPU and GPU utilisation and the device's peak memory."""
    cpu: dict
    gpu: dict | None
    memory: dict


def read_out(run: RankRun, rank, plan: StepPlan, starts: list[float], clocks: dict,
             usage: Usage) -> dict:
    """This rank's result: ``plan.main``'s steps (the first ``plan.warmup`` of them the
    warm-up) with their timeline and loop clock (``starts``: the loop's clock reads), the
    seconds injected per measured step and per injected call, each of ``plan.apart`` as
    ``result[kind]``, and what the plan's tail read."""
    main = plan.positions(plan.main)
    # resolved once for every kind (each resolve finishes the clock: on a GPU, waits for and
    # maps every event again)
    resolved = run.timeline.resolve(clocks["applied"]) if run.timeline.enabled else None
    result = _result(run, rank, main, plan.warmup, starts, clocks, usage, resolved)
    measured = {name: delay.take_measured() for name, delay in run.delays.items()}
    # seconds actually injected per measured iteration (the ground truth recovery is held to)
    result["injected_s"] = {name: per_iteration(m, main[plan.warmup:])
                            for name, m in measured.items()}
    # and per injected call (a forward; a bucket's launch): what one requested delay became
    result["injected_call_s"] = {name: statistics.median(s for _, s in m) if m else None
                                 for name, m in measured.items()}
    for kind in plan.apart:
        its = plan.positions(kind)
        result[kind] = {"timeline": [resolved[n] for n in its],
                        "iteration": [sum(phase_durations(resolved[n]).values()) for n in its],
                        "loss": [float(run.losses[n]) for n in its],
                        "injected_s": {name: per_iteration(m, its)
                                       for name, m in measured.items()}}
    if plan.tail:
        result.update(plan.tail.read((resolved or [])[len(plan):]))
    return result


def applied_remedies(run: RankRun) -> dict:
    """What the cheap GPU remedies left on this rank's model and optimizer (the preset knobs
    ``fused_adamw`` and ``channels_last_heads``), read off the objects, not the config: the
    optimizer's parameter groups and kernel, and whether the heads' convolutions are NHWC."""
    # the torch optimizer's groups: MMEngine's wrapper lists one more (its base settings)
    groups = getattr(run.optim, "optimizer", run.optim).param_groups
    return {"optimizer_param_groups": len(groups),
            "optimizer_fused": bool(groups and groups[0].get("fused")),
            "heads_channels_last": heads_are_channels_last(run.model)}


def _result(run: RankRun, rank, positions: list[int], warmup: int, starts: list[float],
            clocks: dict, usage: Usage, resolved: list[dict] | None) -> dict:
    """The results of the steps at ``positions`` (the first ``warmup`` of them are the
    warm-up); the others (local ones of a paired run, the tail's) are left out. ``resolved``:
    every step's resolved timeline (None: the timeline is off, the bare loop)."""
    kept = positions[warmup:]
    result = {
        **identity(rank, str(next(run.model.parameters()).device), run.losses, kept, warmup,
                   run.loader.num_workers),
        "cpu": usage.cpu, "gpu": usage.gpu,
        "memory": usage.memory,
        "bucket_sizes_bytes": ddp_hooks.bucket_sizes_bytes(run.ddp),
        "buffer_bytes": sum(b.numel() * b.element_size() for b in run.model.buffers()),
        "buffer_shapes": [[list(b.shape), str(b.dtype).replace("torch.", "")]
                          for b in run.model.buffers()],
        "bucket_shapes": getattr(run.buckets and run.buckets.launcher, "shapes", None),
        "skipped_samples": run.skipped,
        "clock": {k: v for k, v in clocks.items() if k != "applied"},
        "sync_bn_channels": [m.num_features for m in sync_batch_norms(run.model)],
        "injected": [run.injected[n] for n in kept],
        # what the loop applied: name, label (a CPU's no-op tf32 says so), TF32/cuDNN switches
        "precision": run.amp.to_dict() if run.amp else None,
        "remedies": applied_remedies(run),
    }
    # One clock read per iteration at the top of the loop: the bare loop's only measurement, and
    # an independent check of the timeline's iteration times (a step cut short at a line-up
    # of the plan ends at the cut, not at the next start)
    result["loop_iteration"] = [run.cut.get(n, starts[n + 1]) - starts[n] for n in kept]
    if resolved is None:
        result["iteration"] = result["loop_iteration"]
        return result
    timeline = [resolved[n] for n in positions]
    result["clock"]["kind"] = run.timeline.clock.name
    # what the GPU event-to-host mapping may be off by (0 on the host clock), beside the
    # cross-host offsets' error: together blame's resolution
    result["clock"]["alignment_error_s"] = run.timeline.clock.error_s()
    result.update(timeline_fields(timeline, warmup))
    result["ddp_timers"] = ([run.stats.per_iteration.get(n) for n in kept]
                            if run.stats else None)
    return result
