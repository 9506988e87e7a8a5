"""The full DDP iteration across world sizes: one launch per world size, every metric."""
from __future__ import annotations

from swinkit.config import load_config
from swinkit.runs.ddp_run import DDPRunSpec, environment, run_ddp
from swinkit.injection import Injection
from swinkit.runs.sweep import WORLD_SIZES, Sweep, plan_world_sizes, sweep_launch

SCALING = ("weak", "strong")


def images_per_rank(preset: str, world_sizes, scaling: str) -> dict[int, int]:
    """Images per rank at each world size. Weak scaling: the preset's, at every size (the
    thesis's runs). Strong scaling: a global batch of the preset's images per rank times the
    largest world size, divided evenly among the ranks."""
    if scaling not in SCALING:
        raise ValueError(f"scaling must be one of {SCALING}, got {scaling!r}")
    per_rank = load_config(preset).images_per_rank
    if scaling == "weak":
        return {ws: per_rank for ws in world_sizes}
    total = per_rank * max(world_sizes)
    uneven = [ws for ws in world_sizes if total % ws]
    if uneven:
        raise ValueError(f"strong scaling: the global batch of {total} images does not divide "
                         f"among world sizes {uneven}")
    return {ws: total // ws for ws in world_sizes}


def ddp_sweep(preset: str, world_sizes=WORLD_SIZES, iters: int = 10, warmup: int = 3,
              workers: int | None = None, injection: Injection = Injection(),
              wall_timeout_s: float = 900.0, scaling: str = "weak", progress=print,
              images: dict[int, int] | None = None, paired: bool = False) -> Sweep:
    """Sweep keyed by world size; each result is :func:`run_ddp`'s dict. A one-rank injection
    applies only where its rank exists (the world-size-1 baseline runs clean). ``scaling``:
    ``weak`` keeps the preset's images per rank; ``strong`` divides a global batch of the
    preset's images per rank times the largest runnable world size among the ranks.
    ``images``: images per rank by world size, in place of what ``scaling`` gives (a world
    size's share of a larger sweep's global batch). ``paired``: each launch also measures the
    components of its own DDP run, local optimizer steps alternating with the DDP ones, and
    its result holds the oracle's prediction of the run (``"prediction"``): predicted where
    it is measured, under the same co-location."""

    sweep = Sweep(meta={"preset": preset, "iters": iters, "warmup": warmup, "scaling": scaling,
                        "injection": injection.to_dict(), "environment": environment()})
    runnable = sweep.runnable(world_sizes)
    images = images or images_per_rank(preset, runnable or [1], scaling)
    for ws in runnable:
        progress(f"  DDP iteration, preset {preset}, world size {ws}: {warmup} + {iters} iterations")
        spec = DDPRunSpec(preset=preset, nproc_per_node=ws, iters=iters, warmup=warmup,
                          workers=workers, injection=injection.for_world_size(ws),
                          launch=sweep_launch(ws, wall_timeout_s),
                          overrides={"images_per_rank": images[ws]}, paired=paired)
        sweep.run(ws, lambda: _run(spec, progress), progress)
    return sweep


def _run(spec: DDPRunSpec, progress) -> dict:
    """One launch's result; a paired one's components give way to the prediction made from
    them (the local steps' timelines stay in the ranks' results)."""
    result = run_ddp(spec, progress=progress)
    if spec.paired:
        from swinkit.runs.component_costs import basis_of, predict_from
        try:  # kept for predicting other world sizes from this one (held out)
            result["basis"] = basis_of(result)
        except Exception as exc:  # the DDP run's own measurements still stand without it
            result["basis_failed"] = f"{type(exc).__name__}: {exc}"
            progress(f"  world size {spec.world_size}: no basis kept: {result['basis_failed']}")
        local_run = result.pop("local_run")
        for rank in result["ranks"]:  # the local steps, in local_run too: not in the cache
            rank.pop("local", None)
        try:
            result["prediction"] = predict_from(local_run, spec)
        except Exception as exc:  # the DDP run's own measurements still stand without it
            result["prediction_failed"] = f"{type(exc).__name__}: {exc}"
            progress(f"  world size {spec.world_size}: no prediction: "
                     f"{result['prediction_failed']}")
    return result


def with_strong_scaling(weak: Sweep, preset: str, world_sizes=WORLD_SIZES, progress=print,
                        **kwargs) -> Sweep:
    """``weak`` plus the strong-scaling runs under keys ``("strong", ws)``: the global batch of
    the largest runnable world size's, divided among the ranks. A world size whose share equals
    the preset's images per rank (the largest runnable one) is the weak run itself, not run
    twice; the others launch once each (world size 1 with N times the images), 6 iterations
    unless ``iters`` says otherwise: each is N times the work of a weak one."""
    runnable = [ws for ws, reason in plan_world_sizes(world_sizes).items() if not reason] or [1]
    strong_images = images_per_rank(preset, runnable, "strong")
    weak_images = images_per_rank(preset, runnable, "weak")
    for ws in world_sizes:
        if ws in weak.skipped or ws in weak.failed:
            target = weak.skipped if ws in weak.skipped else weak.failed
            target[("strong", ws)] = target[ws]
        elif strong_images[ws] == weak_images[ws]:
            weak.results[("strong", ws)] = weak.results[ws]
        else:
            progress(f"  strong scaling at world size {ws}: {strong_images[ws]} images per rank")
            run = ddp_sweep(preset, [ws], scaling="strong", progress=progress,
                            images={ws: strong_images[ws]}, **{"iters": 6, **kwargs})
            for key, store in (("results", weak.results), ("failed", weak.failed),
                               ("skipped", weak.skipped)):
                if ws in getattr(run, key):
                    store[("strong", ws)] = getattr(run, key)[ws]
            why = weak.failed.get(("strong", ws), "")
            if "OutOfMemory" in why:  # N x the images on fewer devices: a limit, not a fault
                del weak.failed[("strong", ws)]
                weak.skipped[("strong", ws)] = (
                    f"the strong-scaling global batch does not fit at world size {ws} "
                    f"({strong_images[ws]} images per rank): {why}")
    weak.meta["strong_images_per_rank"] = strong_images
    return weak
