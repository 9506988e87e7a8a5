"""What ``swinkit converge`` runs, checked before any process starts (:class:`ConvergeSpec`).

The grid is world sizes x per-rank batches x learning-rate rules, each cell trained from
``seeds`` seeds to a held-out target fixed before the run. A learning-rate rule scales the
preset's learning rate (the base, lr0, tuned for the base global batch m0 = the preset's
images per rank at world size 1) to the cell's global batch M = N x b::

    none    lr = lr0                   (the thesis's weak-scaling runs)
    linear  lr = lr0 x M / m0          (Goyal et al., "Accurate, Large Minibatch SGD", 2017)
    sqrt    lr = lr0 x sqrt(M / m0)    (the rule often used with Adam-type optimizers)

every rule after the preset's linear warm-up (``warmup_iters`` steps, ``--warmup`` to change).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from swinkit.config import load_config
from swinkit.input_checks import check_int

LR_RULES = ("none", "linear", "sqrt")
REDUCTIONS = ("mean", "sum")  # sum: the planted defect of the DDP-vs-one-process test
# A documented default per preset: the held-out target, the step budget and how often the
# target is checked. Fixed before any run (docs/converge.md says how the test preset's was
# chosen); a preset without one needs --target-loss or --target-miou and --max-steps.
PRESET_DEFAULTS = {
    "test": {"target_loss": 3.6, "max_steps": 300, "eval_every": 10},
}


def lr_factor(rule: str, global_batch: int, base_batch: int) -> float:
    """The factor a rule applies to the base learning rate.

    >>> lr_factor("none", 8, 2), lr_factor("linear", 8, 2), lr_factor("sqrt", 8, 2)
    (1.0, 4.0, 2.0)
    """
    ratio = global_batch / base_batch
    return {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[rule]


def _number(name: str, value, low: float | None = None, high: float | None = None) -> float:
    """``value`` as a finite float within [low, high], else ValueError naming the field."""
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or (low is not None and number < low) or (
            high is not None and number > high):
        bounds = "" if low is None else f" in [{low:g}, {high:g}]" if high is not None else \
            f" >= {low:g}"
        raise ValueError(f"{name} must be a number{bounds}, got {value!r}")
    return number


@dataclass(frozen=True)
class ConvergeSpec:
    """The grid, the target and the budget. None means the preset's default
    (:data:`PRESET_DEFAULTS`, the preset's ``images_per_rank`` and ``warmup_iters``)."""
    preset: str = "test"
    world_sizes: tuple[int, ...] = (1, 2)
    batches: tuple[int, ...] | None = None
    lr_rules: tuple[str, ...] = ("linear",)
    seeds: int = 3
    target_loss: float | None = None
    target_miou: float | None = None
    eval_every: int | None = None
    max_steps: int | None = None
    warmup: int | None = None
    step_iters: int = 30          # measured iterations of the step-time launch
    data_root: str | None = None
    overrides: dict = field(default_factory=dict)
    workers: int | None = None
    oversubscribe: bool = False
    wall_timeout_s: float = 3600.0
    backend: str = "auto"         # gloo: CPU ranks; nccl: one GPU per rank; auto: nccl with CUDA
    reduction: str = "mean"

    def validate(self) -> "ConvergeSpec":
        """The spec with defaults filled in; ValueError naming the field before any process
        starts."""
        check_int("seeds", self.seeds, 1)
        if not self.lr_rules or any(r not in LR_RULES for r in self.lr_rules):
            raise ValueError(f"lr_rule must be among {', '.join(LR_RULES)}, got "
                             f"{', '.join(map(str, self.lr_rules)) or 'none given'}")
        if not self.world_sizes:
            raise ValueError("world_sizes: give at least one world size")
        for ws in self.world_sizes:
            check_int("world_sizes", ws, 1)
        if self.backend not in ("auto", "gloo", "nccl"):
            raise ValueError(f"backend must be auto, gloo or nccl, got {self.backend!r}")
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {self.reduction!r}")
        check_int("step_iters", self.step_iters, 1)
        if self.workers is not None:
            check_int("workers", self.workers, 0)
        target_loss, target_miou = self._targets()
        defaults = PRESET_DEFAULTS.get(self.preset, {})
        max_steps = self.max_steps if self.max_steps is not None else defaults.get("max_steps")
        if max_steps is None:
            raise ValueError(f"max_steps: preset {self.preset} has no default step budget; "
                             "give --max-steps")
        check_int("max_steps", max_steps, 1)
        eval_every = self.eval_every if self.eval_every is not None else min(
            defaults.get("eval_every", 10), max_steps)
        check_int("eval_every", eval_every, 1)
        if eval_every > max_steps:
            raise ValueError(f"eval_every ({eval_every}) must not exceed max_steps ({max_steps})")
        cfg = self.base_config()
        batches = self.batches if self.batches is not None else (cfg.images_per_rank,)
        if not batches:
            raise ValueError("batches: give at least one per-rank batch")
        for b in batches:
            # UPerHead's pooling branch normalises one value per channel and image: one image
            # (on one rank) is refused by batch norm in training
            check_int("batches", b, 2)
        warmup = self.warmup if self.warmup is not None else cfg.warmup_iters
        check_int("warmup", warmup, 0)
        if cfg.precision == "fp16":
            # its loss scaling multiplies the gradients the noise scale reads; bf16 needs none
            raise ValueError("precision: fp16 is not supported by converge (GradScaler's "
                             "scaled gradients would be read as the gradient noise): use bf16")
        return _replace(self, target_loss=target_loss, target_miou=target_miou,
                        max_steps=max_steps, eval_every=eval_every, warmup=warmup,
                        batches=tuple(sorted(set(batches))),
                        world_sizes=tuple(sorted(set(self.world_sizes))),
                        lr_rules=tuple(dict.fromkeys(self.lr_rules)))

    def _targets(self) -> tuple[float | None, float | None]:
        miou = None if self.target_miou is None else _number("target_miou", self.target_miou,
                                                             0.0, 100.0)
        if self.target_loss is not None:
            return _number("target_loss", self.target_loss, 0.0), miou
        if miou is not None:
            return None, miou
        default = PRESET_DEFAULTS.get(self.preset, {}).get("target_loss")
        if default is None:
            raise ValueError(f"target_loss: preset {self.preset} has no default target; give "
                             "--target-loss (held-out loss) or --target-miou")
        return default, None

    def base_config(self):
        """The preset with the user's overrides (its errors name the preset or the field)."""
        return load_config(self.preset, self.data_root, self.overrides)

    def plan(self) -> dict[int, list[dict]]:
        """Per world size, the runs of its launch (the spec validated first): each cell's
        per-rank batch, rule, learning rate and warm-up, once per seed."""
        spec = self.validate()
        cfg = spec.base_config()
        base_lr, base_batch = float(cfg.optim_wrapper.optimizer.lr), cfg.images_per_rank
        return {ws: [{"world_size": ws, "batch": b, "lr_rule": rule, "seed": seed,
                      "lr": base_lr * lr_factor(rule, ws * b, base_batch),
                      "warmup": spec.warmup}
                     for b in spec.batches for rule in spec.lr_rules
                     for seed in range(spec.seeds)]
                for ws in spec.world_sizes}

    def to_dict(self) -> dict:
        return asdict(self)


def _replace(spec: ConvergeSpec, **changes) -> ConvergeSpec:
    import dataclasses
    return dataclasses.replace(spec, **changes)
