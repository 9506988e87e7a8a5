"""Training to a held-out target inside one rank (:func:`converge_rank`): ``swinkit converge``.

One launch per world size runs every (per-rank batch, learning-rate rule, seed) of the grid in
turn, each from a fresh model seeded with its seed, under plain DDP::

    batch -> preprocessor -> DDP forward + loss -> backward (the comm hook adds |g_small|^2,
    then all-reduces the mean) -> |g_big|^2 from .grad -> optimizer step -> LR schedulers
    every ``eval_every`` steps: the held-out score on the validation split (all ranks share
    it out); stop at the first evaluation that meets the target, else at ``max_steps``

The loop is not instrumented (no timeline, no phases): its step times are kept only as a
cross-check of the step time the supervisor measures with ``swinkit ddp --bare``'s loop.
"""
from __future__ import annotations

import gc
import math
import random
import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from swinkit.config import load_config
from swinkit.data.loader import batches, build_dataset, build_loader
from swinkit.model.precision import training_precision
from swinkit.model.segmentor import build_optimizer, build_segmentor
from swinkit.rank.grad_noise import GradNoise
from swinkit.rank.held_out import HeldOut, HeldOutScore

PROGRESS_EVERY_S = 15.0  # a progress line at most this often within one run (rank 0)


@dataclass
class Job:
    """What every run of one launch shares: the workload, the target and the budget, and the
    data sets built once (the training set's index and the decoded held-out images)."""
    preset: str
    data_root: str
    overrides: dict
    device: str
    target: dict
    eval_every: int
    max_steps: int
    reduction: str
    workers: int | None
    train_set: object = None
    held_out: HeldOut | None = None

    def config(self, run: dict):
        """The config of one run: the preset with the run's per-rank batch, learning rate
        and warm-up (``run``: ``batch``, ``lr``, ``warmup``)."""
        return load_config(self.preset, self.data_root,
                           {**self.overrides, "images_per_rank": run["batch"],
                            "optim_wrapper.optimizer.lr": run["lr"],
                            "warmup_iters": run["warmup"]}, device=self.device)


def reached(score: HeldOutScore, target: dict) -> bool:
    """Whether ``score`` meets every target given (``loss``: at most; ``miou_pct``: at least).

    >>> s = HeldOutScore(loss=2.0, miou_pct=10.0, images=4)
    >>> reached(s, {"loss": 2.5}), reached(s, {"loss": 2.5, "miou_pct": 20.0})
    (True, False)
    """
    if target.get("loss") is not None and not score.loss <= target["loss"]:
        return False
    return target.get("miou_pct") is None or score.miou_pct >= target["miou_pct"]


def converge_rank(rank, preset: str, data_root: str, overrides: dict, device: str,
                  runs: list[dict], target: dict, eval_every: int, max_steps: int,
                  reduction: str = "mean", workers: int | None = None) -> dict:
    """Train each of ``runs`` to ``target`` on this rank; rank 0 returns the records.

    Args:
        runs: dicts with ``batch`` (images per rank), ``lr``, ``warmup`` (steps), ``seed``
            and the labels the supervisor reads back (``lr_rule``).
        target: ``loss`` (held-out loss at most) and/or ``miou_pct`` (at least).
        reduction: ``mean`` (DDP's), or ``sum``: the planted defect of the equivalence test
            (:class:`~swinkit.rank.grad_noise.GradNoise`).
        workers: loader workers per rank (default: the preset's).
    """
    job = Job(preset, data_root, overrides, device, target, eval_every, max_steps, reduction,
              workers)
    first = job.config(runs[0])
    job.train_set = build_dataset(first)
    job.held_out = HeldOut(first, rank.rank, rank.world_size)
    records = []
    for n, run in enumerate(runs):
        label = (f"world size {rank.world_size}, batch {run['batch']}/rank, lr {run['lr_rule']}"
                 f" ({run['lr']:.3g}), seed {run['seed']} [{n + 1}/{len(runs)}]")
        records.append(dict(run, **_train_to_target(rank, job, run, label),
                            train_images=len(job.train_set), held_out_images=job.held_out.total))
        gc.collect()  # the last run's model, optimizer and loader before the next is built
    return {"rank": rank.rank, "runs": records} if rank.rank == 0 else {"rank": rank.rank}


def _train_to_target(rank, job: Job, run: dict, label: str) -> dict:
    """One seed of one cell, from a fresh model to the target or the step budget."""
    # Long: set-up, the loop and its evaluations read top to bottom, as the module doc lists.
    cfg = job.config(run)
    cuda = cfg.device == "cuda"
    dev = torch.device("cuda", rank.local_rank) if cuda else torch.device("cpu")
    # MMSeg's crops, flips and colour jitter draw from numpy's and Python's generators
    np.random.seed(run["seed"] + rank.rank)
    random.seed(run["seed"] + rank.rank)
    torch.manual_seed(run["seed"])  # the same initial weights on every rank, at every world size
    model = build_segmentor(cfg).to(dev)
    # the preset's precision (bf16: autocast around forward and loss; fp16 is refused before
    # launch: its loss scaling would reach the gradients the noise scale reads)
    amp = training_precision(cfg.precision, dev, cudnn_benchmark=cfg.cudnn_benchmark)
    ddp = DistributedDataParallel(model, device_ids=[dev.index] if cuda else None)
    noise = GradNoise(rank.world_size, reduction=job.reduction)
    noise.attach(ddp)
    optim, schedulers = build_optimizer(cfg, model)
    workers = cfg.loader_workers if job.workers is None else job.workers
    stream = batches(build_loader(cfg, job.train_set, rank.rank, rank.world_size, workers,
                                  seed=run["seed"], timeout_s=120 if workers else 0))
    curve, step_s, eval_s, train_loss = [], [], 0.0, torch.zeros(2, dtype=torch.float64)
    outcome, last_print, start = "budget", time.monotonic(), time.monotonic()
    _say(rank, f"{label}: training to {_target_text(job.target)}, at most {job.max_steps} steps")
    for step in range(1, job.max_steps + 1):
        t0 = time.perf_counter()
        data = model.data_preprocessor(next(stream), training=True)
        with amp.autocast():
            loss, _ = model.parse_losses(ddp(**data, mode="loss"))
        loss.backward()
        noise.after_backward(model.parameters())
        optim.step()
        optim.zero_grad()
        for scheduler in schedulers:
            scheduler.step()
        train_loss += torch.tensor([float(loss.detach()), 1.0], dtype=torch.float64)
        step_s.append(time.perf_counter() - t0)
        rank.heartbeat(step)
        if step % job.eval_every and step != job.max_steps:
            continue
        t1 = time.perf_counter()
        score, mean_train = job.held_out.evaluate(model), _mean_over_ranks(train_loss, dev)
        eval_s += time.perf_counter() - t1
        train_loss.zero_()
        curve.append({"step": step, "held_out_loss": score.loss, "miou_pct": score.miou_pct,
                      "train_loss": mean_train})
        outcome = _outcome(score, mean_train, job.target)
        if outcome != "budget" or time.monotonic() - last_print > PROGRESS_EVERY_S:
            last_print = time.monotonic()
            _say(rank, f"  step {step}: held-out loss {score.loss:.4f}, mIoU "
                       f"{score.miou_pct:.1f} %, training loss {mean_train:.4f}")
        if outcome != "budget":
            break
    steps = curve[-1]["step"]
    _say(rank, f"  {_outcome_text(outcome, steps)} ({time.monotonic() - start:.0f} s)")
    return {"outcome": outcome, "steps": steps if outcome == "reached" else None,
            "steps_run": steps, "curve": curve,
            "noise": _noise_totals(noise, run["batch"], rank.world_size, dev),
            "in_run_step_s": statistics.median(step_s), "eval_s": eval_s,
            "wall_s": time.monotonic() - start}


def _outcome(score: HeldOutScore, mean_train: float, target: dict) -> str:
    """``diverged`` (a loss not finite: the same all-reduced figures on every rank, so every
    rank stops), ``reached``, or ``budget`` (go on)."""
    if not (math.isfinite(score.loss) and math.isfinite(mean_train)):
        return "diverged"
    return "reached" if reached(score, target) else "budget"


def _mean_over_ranks(loss_and_count: torch.Tensor, device: torch.device) -> float:
    """The training loss per step since the last evaluation, averaged over the ranks (the sum
    crosses ranks on ``device``: NCCL reduces GPU tensors only)."""
    total = loss_and_count.to(device)
    if dist.is_initialized():
        dist.all_reduce(total)
    return float(total[0] / total[1])


def _noise_totals(noise: GradNoise, batch: int, world: int, device: torch.device) -> dict:
    """|g_small|^2 averaged over ranks and steps, |g_big|^2 over steps, and both batch sizes."""
    totals = torch.tensor([noise.small_sq], dtype=torch.float64, device=device)
    if dist.is_initialized():
        dist.all_reduce(totals)
    steps = max(noise.steps, 1)
    return {"steps": noise.steps, "b_small": batch, "b_big": batch * world,
            "small_sq": float(totals[0]) / world / steps, "big_sq": noise.big_sq / steps}


def _target_text(target: dict) -> str:
    parts = [f"held-out loss <= {target['loss']:g}"] if target.get("loss") is not None else []
    if target.get("miou_pct") is not None:
        parts.append(f"mIoU >= {target['miou_pct']:g} %")
    return " and ".join(parts)


def _outcome_text(outcome: str, steps: int) -> str:
    return {"reached": f"reached the target at step {steps}",
            "diverged": f"diverged (loss not finite) by step {steps}: missed",
            "budget": f"missed the target within {steps} steps"}[outcome]


def _say(rank, text: str) -> None:
    if rank.rank == 0:
        print(text, flush=True)
