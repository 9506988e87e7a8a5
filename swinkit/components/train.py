"""A short single-process training run: the smallest end-to-end use of the workload."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from swinkit.data.loader import batches, build_loader, ensure_data
from swinkit.model.precision import training_precision
from swinkit.model.segmentor import build_optimizer, build_segmentor, train_step


@dataclass
class TrainResult:
    iter_s: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    precision: dict = field(default_factory=dict)   # TrainingPrecision.to_dict()

    def summary(self) -> dict:
        half = max(len(self.loss) // 2, 1)
        timed = sorted(self.iter_s[1:] or self.iter_s)
        return {
            "iterations": len(self.loss),
            "precision": self.precision.get("label"),
            "median_iter_s": timed[len(timed) // 2] if timed else float("nan"),
            "first_half_mean_loss": sum(self.loss[:half]) / half,
            "second_half_mean_loss": sum(self.loss[half:]) / max(len(self.loss) - half, 1),
        }


def train_device(cfg, cuda_available: bool | None = None) -> torch.device:
    """The device the run trains on: the preset's ``device`` (``--device`` overrides it).

    A CUDA preset on a machine without a usable GPU is refused rather than trained on the CPU
    instead: a silent fallback would report CPU times (and BN instead of SyncBN) as GPU ones.

    Args:
        cuda_available: whether CUDA can be used (default: ask torch); a seam for tests.
    """
    device = torch.device(cfg.device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {cfg.device!r}")
    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
    if device.type == "cuda" and not cuda_available:
        raise ValueError(f"device {cfg.device!r} asked for, but torch sees no usable CUDA GPU "
                         "(use --device cpu or a CPU preset)")
    return device


def build_model(cfg, cuda_available: bool | None = None) -> torch.nn.Module:
    """The preset's segmentor on :func:`train_device`. mmengine's ``BaseModel.to`` moves the
    data preprocessor with it, so each batch is copied to that device when it is preprocessed.
    """
    return build_segmentor(cfg).to(train_device(cfg, cuda_available))


def train(cfg, iters: int = 20, threads: int | None = 1, seed: int = 0,
          progress: Callable[[str], None] = print) -> TrainResult:
    """Run ``iters`` optimizer steps in one process on ``cfg.device``, printing time and loss
    per iteration (``float(loss)`` waits for the GPU, so each time covers its iteration).

    Args:
        threads: torch compute threads (1 = one CPU 'rank', the project's fair-scaling policy).
    """
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    ensure_data(cfg, progress=progress)
    model = build_model(cfg)
    amp = training_precision(cfg.precision, next(model.parameters()).device,
                             cudnn_benchmark=cfg.cudnn_benchmark)
    progress(f"precision {amp.plan.label}" + (f": {amp.plan.note}" if amp.plan.note else ""))
    optim, schedulers = build_optimizer(cfg, model)
    loader = build_loader(cfg, seed=seed)
    stream = batches(loader)
    result = TrainResult(precision=amp.to_dict())
    for it in range(iters):
        start = time.perf_counter()
        loss, _ = train_step(model, optim, next(stream), amp)
        for scheduler in schedulers:
            scheduler.step()
        value = float(loss)  # on a GPU this waits for the step: the time below covers it
        elapsed = time.perf_counter() - start
        if not math.isfinite(value):
            raise FloatingPointError(f"loss became {value} at iteration {it}")
        result.iter_s.append(elapsed)
        result.loss.append(value)
        progress(f"iter {it + 1:4d}/{iters}  {elapsed:6.3f} s  loss {value:.4f}")
    return result
