"""The cheap GPU remedies users reach for beside mixed precision, each applied to a model, an
optimizer or the process, and each numerically the same training (tests hold them to it):

* :func:`heads_channels_last`: UperNet's decode head and the auxiliary FCN head keep their
  convolution weights in channels_last (NHWC), the layout tensor cores' convolutions want;
  their outputs follow the weights' layout. The backbone is left alone: its matmuls work on
  token sequences, not images.
* :func:`merged_optimizer`: one fused (or foreach) AdamW over the parameter groups merged.
  MMEngine's ``paramwise_cfg`` makes one group per parameter (194 in the ``test`` preset's
  model), and torch's multi-tensor kernels work within a group, so each parameter gets its own
  launches; merging groups of identical hyperparameters (the preset's: with and without weight
  decay) leaves two groups and a handful of launches per step.
* cuDNN's autotuner (``torch.backends.cudnn.benchmark``): a process switch, set with the
  precision's by :func:`swinkit.model.precision.set_math_switches`.

The preset knobs ``channels_last_heads``, ``fused_adamw`` and ``cudnn_benchmark`` turn them on
(:func:`swinkit.model.segmentor.build_segmentor` and ``build_optimizer`` apply the first two).
"""
from __future__ import annotations

import inspect

import torch
from torch import nn

HEADS = ("decode_head", "auxiliary_head")


def heads_channels_last(model: nn.Module) -> int:
    """Convert the segmentor's heads to channels_last in place; returns how many 4-D weights
    (convolutions) it converted. A head the model lacks is skipped."""
    converted = 0
    for name in HEADS:
        head = getattr(model, name, None)
        if head is None:
            continue
        converted += sum(1 for p in head.parameters() if p.dim() == 4)
        head.to(memory_format=torch.channels_last)
    return converted


def heads_are_channels_last(model: nn.Module) -> bool:
    """Whether the heads' convolution weights are channels_last, read off the model (False
    when it has no head convolutions): what :func:`heads_channels_last` left, or did not."""
    weights = [p for name in HEADS for p in getattr(getattr(model, name, None), "parameters",
                                                    list)() if p.dim() == 4]
    return bool(weights) and all(p.is_contiguous(memory_format=torch.channels_last)
                                 for p in weights)


def _hyper(group: dict) -> tuple:
    """A group's hyperparameters (everything but its parameters) as a hashable key."""
    return tuple(sorted((k, repr(v)) for k, v in group.items() if k != "params"))


def merge_param_groups(groups: list[dict]) -> list[dict]:
    """Parameter groups with identical hyperparameters merged into one, in the order each
    kind first appears; the parameters keep their order within a merged group.

    >>> a, b, c = (torch.zeros(1) for _ in range(3))
    >>> merged = merge_param_groups([{"params": [a], "weight_decay": 0.01},
    ...                              {"params": [b], "weight_decay": 0.0},
    ...                              {"params": [c], "weight_decay": 0.01}])
    >>> [(len(g["params"]), g["weight_decay"]) for g in merged]
    [(2, 0.01), (1, 0.0)]
    """
    merged: dict[tuple, dict] = {}
    for group in groups:
        key = _hyper(group)
        if key not in merged:
            merged[key] = {**group, "params": []}
        merged[key]["params"].extend(group["params"])
    return list(merged.values())


def merged_optimizer(optimizer: torch.optim.Optimizer, fused: bool = True) -> torch.optim.Optimizer:
    """A new optimizer of ``optimizer``'s class over its groups merged
    (:func:`merge_param_groups`), with torch's fused kernel (``fused=True``; CUDA, and CPU
    since torch 2.4) or the multi-tensor one (``fused=False``: foreach).

    Merge before the first step: a fresh optimizer holds no state to carry over.

    Raises:
        ValueError: ``optimizer`` has stepped already (it holds state).
    """
    if any(optimizer.state.values()):
        raise ValueError("merged_optimizer: the optimizer has state already; merge its "
                         "parameter groups before its first step")
    kernel = {"fused": True, "foreach": False} if fused else {"fused": False, "foreach": True}
    groups = [{**g, **kernel} for g in merge_param_groups(optimizer.param_groups)]
    # the defaults the class's constructor takes (torch adds keys to ``defaults`` over releases
    # that its constructor does not accept), for groups added later
    accepted = inspect.signature(type(optimizer).__init__).parameters
    defaults = {k: v for k, v in {**optimizer.defaults, **kernel}.items() if k in accepted}
    return type(optimizer)(groups, **{k: v for k, v in defaults.items() if k != "params"})


def use_merged_optimizer(optim_wrapper, fused: bool = True):
    """MMEngine's OptimWrapper with its optimizer replaced by :func:`merged_optimizer`'s;
    build the LR schedulers after this (they keep one base value per group)."""
    optim_wrapper.optimizer = merged_optimizer(optim_wrapper.optimizer, fused)
    return optim_wrapper
