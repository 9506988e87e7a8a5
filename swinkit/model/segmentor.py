"""UperNet + SwinV2 segmentor (MMSeg ``EncoderDecoder``) and its optimizer, from a preset."""
from __future__ import annotations

import logging
from contextlib import contextmanager

import torch
from torch import nn

from swinkit.model.precision import TrainingPrecision
from swinkit.model.remedies import heads_channels_last, use_merged_optimizer


def build_segmentor(cfg) -> nn.Module:
    """MMSeg EncoderDecoder with SwinV2 + UPerHead + auxiliary FCNHead, in training mode, CPU."""
    from mmseg.registry import MODELS

    from swinkit.model.registry import use_mmseg_scope
    use_mmseg_scope()

    model = MODELS.build(cfg.model.to_dict() if hasattr(cfg.model, "to_dict") else cfg.model)
    # mmseg 1.2.2's SegDataPreProcessor takes no non_blocking argument (mmengine's base does):
    # set mmengine's switch here, so that pinned batches are copied to the GPU asynchronously
    model.data_preprocessor._non_blocking = bool(cfg.get("non_blocking_copy", False))
    with _quiet_mmengine():  # init_weights logs every parameter at INFO
        model.init_weights()
    if cfg.get("channels_last_heads", False):
        heads_channels_last(model)
    return model.train()


@contextmanager
def _quiet_mmengine():
    from mmengine.logging import MMLogger
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def build_optimizer(cfg, model: nn.Module):
    """MMEngine OptimWrapper (AdamW + the preset's paramwise decay rules) and its LR schedulers;
    with the preset's ``fused_adamw``, one fused AdamW over the parameter groups merged."""
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import PARAM_SCHEDULERS

    with _quiet_mmengine():  # paramwise options are logged per parameter at INFO
        wrapper = build_optim_wrapper(model, cfg.optim_wrapper.to_dict())
    if cfg.get("fused_adamw", False):  # before the schedulers: they keep a value per group
        use_merged_optimizer(wrapper)
    schedulers = [PARAM_SCHEDULERS.build(dict(s, optimizer=wrapper)) for s in cfg.param_scheduler]
    return wrapper, schedulers


def train_step(model: nn.Module, optim_wrapper, batch,
               amp: TrainingPrecision | None = None) -> tuple[torch.Tensor, dict]:
    """One plain (single-process) training step: preprocess, forward + loss, backward, step.

    Args:
        amp: the training precision (autocast around forward and loss, fp16's loss scaling);
            None: fp32, through MMEngine's ``update_params`` as before precisions existed.
    """
    data = model.data_preprocessor(batch, training=True)
    if amp is None:
        loss, log_vars = model.parse_losses(model(**data, mode="loss"))
        optim_wrapper.update_params(loss)
        return loss.detach(), log_vars
    with amp.autocast():
        loss, log_vars = model.parse_losses(model(**data, mode="loss"))
    amp.scaling.backward(loss)
    amp.scaling.step(optim_wrapper)
    amp.scaling.update()
    optim_wrapper.zero_grad()
    return loss.detach(), log_vars
