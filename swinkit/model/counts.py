"""Parameter and FLOP counts of the workload (what ``describe`` reports)."""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def count_params(module: nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def forward_macs(fn, *args) -> int:
    """Multiply-accumulates of one call of ``fn(*args)`` without autograd.

    ``torch.utils.flop_counter`` counts 2 FLOPs per multiply-accumulate; papers (SwinV2's
    included) quote MACs as "FLOPs", so this halves the count.
    """
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        fn(*args)
    return counter.get_total_flops() // 2


def segmentor_forward_macs(model: nn.Module, crop: tuple[int, int]) -> int:
    """MACs of the segmentor's training-resolution forward (backbone + both heads) per image,
    up to the logits (the final upsampling and the loss are not multiply-accumulates)."""
    def forward(x):
        feats = model.extract_feat(x)
        model.decode_head(feats)
        if getattr(model, "auxiliary_head", None) is not None:
            model.auxiliary_head(feats)

    was_training = model.training
    model.eval()
    try:
        return forward_macs(forward, torch.zeros(1, 3, *crop))
    finally:
        model.train(was_training)
