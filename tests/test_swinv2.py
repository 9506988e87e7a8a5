"""SwinV2 against the published figures (SwinV2 paper, Table 1 / DESIGN.md) and its contracts."""
import pytest
import torch

from swinkit.model.counts import count_params, forward_macs
from swinkit.model.swinv2 import SwinV2, SwinV2Classifier

# name: (parameters, GMACs) of the ImageNet classifier at 256x256, window 8.
PUBLISHED = {"T": (28.35e6, 5.94), "S": (49.73e6, 11.55), "B": (87.92e6, 20.33)}


@pytest.mark.parametrize("arch", sorted(PUBLISHED))
def test_classifier_matches_published_params_and_macs(arch):
    params, gmacs = PUBLISHED[arch]
    model = SwinV2Classifier(arch, window_size=8).eval()
    assert count_params(model) == pytest.approx(params, rel=0.005)
    macs = forward_macs(model, torch.zeros(1, 3, 256, 256))
    assert macs / 1e9 == pytest.approx(gmacs, rel=0.03)


def test_backbone_b_is_86_9m_whatever_the_window():
    counts = {count_params(SwinV2("B", window_size=w)) for w in (8, 12, 16)}
    assert len(counts) == 1
    assert counts.pop() == pytest.approx(86.90e6, rel=0.005)


def test_stage_outputs_are_nchw_at_strides_4_8_16_32():
    model = SwinV2(dict(embed_dim=16, depths=(2, 2, 2, 2), num_heads=(1, 1, 2, 2)), window_size=4)
    outs = model(torch.randn(2, 3, 128, 96))
    assert [tuple(o.shape) for o in outs] == [
        (2, 16, 32, 24), (2, 32, 16, 12), (2, 64, 8, 6), (2, 128, 4, 3)]


def test_input_off_the_window_grid_is_padded_not_rejected():
    model = SwinV2(dict(embed_dim=16, depths=(2, 2, 2, 2), num_heads=(1, 1, 2, 2)),
                   window_size=(7, 7, 5, 3), out_indices=(1, 3))
    outs = model(torch.randn(1, 3, 101, 67))
    assert [tuple(o.shape) for o in outs] == [(1, 32, 13, 9), (1, 128, 4, 3)]
    assert all(torch.isfinite(o).all() for o in outs)


def test_shifted_windows_do_not_leak_across_image_border():
    """A pixel change in one corner must not reach the opposite corner after one block pair
    in a map of two windows per side (the roll would carry it there without the mask)."""
    torch.manual_seed(0)
    model = SwinV2(dict(embed_dim=8, depths=(2,), num_heads=(1,)), window_size=4,
                   out_indices=(0,), drop_path_rate=0.0).eval()
    x = torch.randn(1, 3, 32, 32)
    y = x.clone()
    y[..., -4:, -4:] += 1.0  # bottom-right patch
    with torch.no_grad():
        a, b = model(x)[0], model(y)[0]
    assert torch.allclose(a[..., :2, :2], b[..., :2, :2])
    assert not torch.allclose(a[..., -1, -1], b[..., -1, -1])


def test_activation_checkpointing_gives_same_gradients():
    arch = dict(embed_dim=16, depths=(2, 2, 2, 2), num_heads=(1, 1, 2, 2))
    torch.manual_seed(0)
    plain = SwinV2(arch, window_size=4, drop_path_rate=0.0)
    ckpt = SwinV2(arch, window_size=4, drop_path_rate=0.0, with_cp=True)
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randn(1, 3, 64, 64)
    for model in (plain, ckpt):
        sum(o.sum() for o in model(x)).backward()
    g1 = plain.patch_embed.proj.weight.grad
    g2 = ckpt.patch_embed.proj.weight.grad
    assert torch.allclose(g1, g2, atol=1e-5)


def test_logit_scale_is_clamped():
    model = SwinV2(dict(embed_dim=8, depths=(2,), num_heads=(1,)), window_size=4, out_indices=(0,))
    attn = model.stages[0].blocks[0].attn
    with torch.no_grad():
        attn.logit_scale.fill_(100.0)  # exp(100) would overflow without the clamp at log(100)
    assert torch.isfinite(model(torch.randn(1, 3, 32, 32))[0]).all()


@pytest.mark.parametrize("kwargs, field", [
    (dict(arch="X"), "arch"), (dict(window_size=(8, 8)), "window_size"),
    (dict(window_size=0), "window_size"), (dict(out_indices=(4,)), "out_indices")])
def test_bad_arguments_name_the_field(kwargs, field):
    kwargs.setdefault("arch", "T")
    with pytest.raises(ValueError, match=field):
        SwinV2(**kwargs)
