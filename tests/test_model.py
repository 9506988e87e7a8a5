"""The UperNet + SwinV2 segmentor built from presets: counts and a real training step."""
import math

import pytest
import torch

from swinkit.config import load_config
from swinkit.data.loader import build_loader
from swinkit.model.counts import count_params
from swinkit.model.segmentor import build_optimizer, build_segmentor, train_step


def test_thesis_segmentor_counts(tmp_path):
    model = build_segmentor(load_config("thesis", tmp_path, device="cpu"))
    assert type(model).__name__ == "EncoderDecoder"
    assert type(model.decode_head).__name__ == "UPerHead"
    assert type(model.auxiliary_head).__name__ == "FCNHead"
    assert count_params(model.backbone) == pytest.approx(86.90e6, rel=0.005)
    # UperNet head + FCN head add tens of millions on top of the backbone.
    assert count_params(model) > count_params(model.backbone) + 30e6


def test_training_step_changes_weights_and_loss_is_finite(test_cfg):
    torch.manual_seed(0)
    model = build_segmentor(test_cfg)
    optim, _ = build_optimizer(test_cfg, model)
    batch = next(iter(build_loader(test_cfg, workers=0)))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    loss, log_vars = train_step(model, optim, batch)
    assert math.isfinite(float(loss))
    assert {"decode.loss_ce", "aux.loss_ce"} <= set(log_vars)
    changed = [n for n, p in model.named_parameters() if not torch.equal(before[n], p)]
    assert any(n.startswith("backbone.stages.") for n in changed)
    assert any(n.startswith("decode_head.") for n in changed)


def test_norm_and_position_bias_parameters_get_no_weight_decay(test_cfg):
    model = build_segmentor(test_cfg)
    optim, _ = build_optimizer(test_cfg, model)
    names = {id(p): n for n, p in model.named_parameters()}
    decays = {names[id(p)]: g["weight_decay"] for g in optim.optimizer.param_groups
              for p in g["params"]}
    assert decays["backbone.stages.0.blocks.0.attn.logit_scale"] == 0
    assert decays["backbone.stages.0.blocks.0.norm1.weight"] == 0
    assert decays["backbone.stages.0.blocks.0.attn.qkv.weight"] == pytest.approx(0.01)


def test_non_blocking_copy_reaches_mmengines_preprocessor(data_root):
    """The pinned-memory remedy asks for asynchronous host-to-device copies; MMSeg's
    preprocessor takes no such argument, so the segmentor sets mmengine's switch itself."""
    from swinkit.config import load_config
    from swinkit.model.segmentor import build_segmentor
    assert build_segmentor(load_config("test", data_root)).data_preprocessor._non_blocking is False
    on = load_config("test", data_root, {"non_blocking_copy": True})
    assert build_segmentor(on).data_preprocessor._non_blocking is True
