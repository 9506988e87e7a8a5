"""The cheap GPU remedies as building blocks: channels_last heads and one fused (or foreach)
AdamW over merged parameter groups each train the same model to within float tolerance; the
no-weight-decay parameters keep their decay of 0; each also on a real GPU under -m gpu."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from swinkit.model.remedies import (heads_channels_last, merge_param_groups, merged_optimizer,
                                    use_merged_optimizer)


def _per_parameter_groups(model: nn.Module) -> list[dict]:
    """One group per parameter, as MMEngine's paramwise_cfg builds them: biases and 1-D
    parameters without weight decay (the preset's norm and position-bias rule, in small)."""
    return [{"params": [p], "weight_decay": 0.0 if p.dim() == 1 else 0.01}
            for p in model.parameters()]


def _small_model() -> nn.Module:
    """No bias before the batch norm: its gradient would be rounding noise (BN removes the
    mean), which AdamW normalises to full steps that the kernels round differently."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                         nn.Linear(8 * 6 * 6, 5))


def _train(model, optimizer, steps=3):
    """Three AdamW steps on fixed inputs; the parameters after them."""
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(4, 3, 8, 8, generator=g)
        model(x).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "foreach"])
def test_merged_groups_step_as_the_per_parameter_groups_do(fused):
    """Reference: torch's AdamW over one group per parameter (for-loop kernel). Candidate: the
    groups merged (2 of them) with the fused or foreach kernel. Same parameters after 3 steps
    to float tolerance. Checked to fail by planting a merge that ignores ``weight_decay``
    (``_hyper`` keyed on lr only): one group, and with the count unchecked the 1-D parameters
    decayed and moved by up to 3e-4."""
    reference, candidate = _small_model(), _small_model()
    ref_opt = torch.optim.AdamW(_per_parameter_groups(reference), lr=1e-2, foreach=False)
    opt = merged_optimizer(torch.optim.AdamW(_per_parameter_groups(candidate), lr=1e-2), fused)
    assert len(opt.param_groups) == 2
    assert all(g["fused"] is fused and g["foreach"] is not fused for g in opt.param_groups)
    for a, b in zip(_train(reference, ref_opt), _train(candidate, opt)):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_the_presets_groups_merge_and_keep_no_weight_decay(test_cfg):
    """The test preset's paramwise groups (one per parameter) merge into two; the parameters
    the preset exempts from weight decay keep 0 (as tests/test_model.py holds for the
    unmerged optimizer), and the LR schedulers, built after, step both groups."""
    from swinkit.model.segmentor import build_optimizer, build_segmentor
    cfg = copy.deepcopy(test_cfg)
    cfg.fused_adamw = True
    model = build_segmentor(cfg)
    wrapper, schedulers = build_optimizer(cfg, model)
    groups = wrapper.optimizer.param_groups
    assert len(groups) == 2 and all(g["fused"] for g in groups)
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
    names = {id(p): n for n, p in model.named_parameters()}
    decays = {names[id(p)]: g["weight_decay"] for g in groups for p in g["params"]}
    assert decays["backbone.stages.0.blocks.0.attn.logit_scale"] == 0
    assert decays["backbone.stages.0.blocks.0.norm1.weight"] == 0
    assert decays["backbone.stages.0.blocks.0.attn.qkv.weight"] == pytest.approx(0.01)
    for scheduler in schedulers:
        scheduler.step()
    assert len({g["lr"] for g in groups}) == 1


def test_merge_keeps_order_and_refuses_an_optimizer_that_stepped():
    a, b, c = (nn.Parameter(torch.zeros(2)) for _ in range(3))
    merged = merge_param_groups([{"params": [a], "lr": 1.0}, {"params": [b], "lr": 2.0},
                                 {"params": [c], "lr": 1.0}])
    assert [g["params"] for g in merged] == [[a, c], [b]]
    opt = torch.optim.AdamW([a], lr=0.1)
    a.grad = torch.ones(2)
    opt.step()
    with pytest.raises(ValueError, match="before its first step"):
        merged_optimizer(opt)


def test_use_merged_optimizer_replaces_the_wrappers_optimizer():
    from mmengine.optim import OptimWrapper
    model = _small_model()
    wrapper = use_merged_optimizer(OptimWrapper(torch.optim.AdamW(_per_parameter_groups(model))))
    assert len(wrapper.optimizer.param_groups) == 2
    assert all(g["fused"] for g in wrapper.optimizer.param_groups)


def _heads_and_tensor_output(model, x):
    model.eval()  # dropout off, BN on running statistics: the same function both ways
    with torch.no_grad():
        return model(x, mode="tensor")


def test_channels_last_heads_give_the_same_outputs_in_channels_last(test_cfg):
    """The heads' convolution weights and outputs become channels_last, the segmentor's
    logits stay the same to float tolerance. Checked to fail by planting a
    heads_channels_last that converts nothing: the layout assertions failed."""
    from swinkit.model.segmentor import build_segmentor
    torch.manual_seed(0)
    model = build_segmentor(test_cfg)
    reference = copy.deepcopy(model)
    assert heads_channels_last(model) == sum(
        1 for h in (model.decode_head, model.auxiliary_head) for p in h.parameters() if p.dim() == 4)
    conv = model.decode_head.fpn_bottleneck.conv
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert not model.backbone.patch_embed.proj.weight.is_contiguous(
        memory_format=torch.channels_last)     # the backbone is left alone
    seen = []
    conv.register_forward_hook(lambda m, i, out: seen.append(
        out.is_contiguous(memory_format=torch.channels_last)))
    x = torch.randn(2, 3, 64, 64)
    torch.testing.assert_close(_heads_and_tensor_output(model, x),
                               _heads_and_tensor_output(reference, x), rtol=1e-4, atol=1e-5)
    assert seen == [True]


def test_the_preset_knob_builds_channels_last_heads(data_root):
    from swinkit.config import load_config
    from swinkit.model.segmentor import build_segmentor
    model = build_segmentor(load_config("test", data_root, {"channels_last_heads": True}))
    weight = model.auxiliary_head.convs[0].conv.weight
    assert weight.is_contiguous(memory_format=torch.channels_last)


def test_ddp_trains_channels_last_heads_with_merged_fused_adamw(one_rank_group, data_root):
    """Both remedies under DDP (a gloo world of one): a step runs, every gradient DDP
    reduced is fp32, and the loss is finite."""
    from torch.nn.parallel import DistributedDataParallel

    from swinkit.config import load_config
    from swinkit.data.loader import build_loader
    from swinkit.model.segmentor import build_optimizer, build_segmentor
    cfg = load_config("test", data_root, {"channels_last_heads": True, "fused_adamw": True})
    model = build_segmentor(cfg)
    ddp = DistributedDataParallel(model)
    optim, _ = build_optimizer(cfg, model)
    data = model.data_preprocessor(next(iter(build_loader(cfg, workers=0))), training=True)
    loss, _ = model.parse_losses(ddp(**data, mode="loss"))
    loss.backward()
    optim.step()
    assert torch.isfinite(loss)
    assert {p.grad.dtype for p in model.parameters() if p.grad is not None} == {torch.float32}


# ---- on a real GPU (pytest -m gpu) ----

def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch.device("cuda")


@pytest.mark.gpu
def test_gpu_fused_adamw_over_merged_groups_steps_as_per_parameter_groups():
    device = _cuda()
    reference, candidate = _small_model().to(device), _small_model().to(device)
    ref_opt = torch.optim.AdamW(_per_parameter_groups(reference), lr=1e-2, foreach=False)
    opt = merged_optimizer(torch.optim.AdamW(_per_parameter_groups(candidate), lr=1e-2))

    def train(model, optimizer):
        g = torch.Generator(device=device).manual_seed(1)
        for _ in range(3):
            model(torch.randn(4, 3, 8, 8, generator=g, device=device)).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        return list(model.parameters())
    for a, b in zip(train(reference, ref_opt), train(candidate, opt)):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_gpu_channels_last_heads_give_the_same_outputs(data_root):
    from swinkit.config import load_config
    from swinkit.model.segmentor import build_segmentor
    device = _cuda()
    torch.manual_seed(0)
    model = build_segmentor(load_config("test", data_root, device="cuda")).to(device)
    reference = copy.deepcopy(model)
    heads_channels_last(model)
    x = torch.randn(2, 3, 64, 64, device=device)
    torch.testing.assert_close(_heads_and_tensor_output(model, x),
                               _heads_and_tensor_output(reference, x), rtol=1e-3, atol=1e-4)
