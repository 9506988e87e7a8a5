"""SwinV2 against the published figures (SwinV2 paper, Table 1 / DESIGN.md) and its contracts,
and against the behaviour of the authors' reference implementation of "Swin Transformer V2:
Scaling Up Capacity and Resolution" where a map is no larger than the window."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from swinkit.model.counts import count_params, forward_macs
from swinkit.model.swinv2 import SwinV2, SwinV2Classifier
from swinkit.model.swinv2_blocks import SwinV2Block


def _live_post_norms(model: nn.Module) -> nn.Module:
    """Unit res-post-norms instead of the reference's zeros, so that blocks are not the identity
    and a test of what attention mixes has something to see."""
    for module in model.modules():
        if isinstance(module, SwinV2Block):
            for norm in (module.norm1, module.norm2):
                nn.init.ones_(norm.weight)
    return model

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
    model = _live_post_norms(SwinV2(dict(embed_dim=8, depths=(2,), num_heads=(1,)), window_size=4,
                                    out_indices=(0,), drop_path_rate=0.0)).eval()
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
    plain = _live_post_norms(SwinV2(arch, window_size=4, drop_path_rate=0.0))
    ckpt = SwinV2(arch, window_size=4, drop_path_rate=0.0, with_cp=True)
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randn(1, 3, 64, 64)
    for model in (plain, ckpt):
        sum(o.sum() for o in model(x)).backward()
    g1 = plain.patch_embed.proj.weight.grad
    g2 = ckpt.patch_embed.proj.weight.grad
    assert torch.allclose(g1, g2, atol=1e-5)


def test_logit_scale_is_clamped():
    model = _live_post_norms(
        SwinV2(dict(embed_dim=8, depths=(2,), num_heads=(1,)), window_size=4, out_indices=(0,)))
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


# --- Maps no larger than the window, written out by hand -------------------------------------
# The reference (built for a fixed input resolution) shrinks the window to the shorter side of
# the map and turns the shift off when that side fits in the window; maps larger than the window
# keep the configured window and shift, and here are zero-padded to the window grid.


def _random_block(dim=8, heads=2, window=8, pretrained_window=0, seed=0) -> SwinV2Block:
    """A block with every parameter random (post-norms included), in float64. The coordinate
    tables are computed in float32 (as the reference does) and only then widened, hence the
    1e-6 tolerances below; the errors they catch are of order 1."""
    torch.manual_seed(seed)
    block = SwinV2Block(dim, heads, window, shift=window // 2, pretrained_window=pretrained_window)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, 0.5)
    return block.double().eval()


def _log_coord(offset: int, scale: int) -> float:
    """The paper's log-spaced coordinate of one relative offset: offset / scale mapped to
    [-8, 8], then sign * log2(1 + |.|) / log2(8). The zero offset is 0 at any scale."""
    if offset == 0:
        return 0.0
    t = offset / scale * 8
    return math.copysign(math.log2(1 + abs(t)) / 3, t)


def _attention_by_hand(attn, tokens, positions, scale):
    """Full cosine attention among ``tokens`` (n, C) at (row, col) ``positions``: every token
    attends to every other one, with the continuous position bias of each pair's offset."""
    n, C = tokens.shape
    heads = attn.num_heads
    wq, wk, wv = attn.qkv.weight.split(C)
    q = (tokens @ wq.T + attn.q_bias).view(n, heads, -1).transpose(0, 1)
    k = (tokens @ wk.T).view(n, heads, -1).transpose(0, 1)
    v = (tokens @ wv.T + attn.v_bias).view(n, heads, -1).transpose(0, 1)
    offsets = torch.tensor([[[_log_coord(pi[0] - pj[0], scale), _log_coord(pi[1] - pj[1], scale)]
                             for pj in positions] for pi in positions], dtype=tokens.dtype)
    bias = 16 * torch.sigmoid(attn.cpb_mlp(offsets)).permute(2, 0, 1)  # (heads, n, n)
    temperature = torch.clamp(attn.logit_scale, max=math.log(100)).exp()
    logits = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1) * temperature
    out = (logits + bias).softmax(-1) @ v
    return attn.proj(out.transpose(0, 1).reshape(n, C))


def _unshifted_block_by_hand(block, grid, tile, scale):
    """The block on an (H, W, C) map cut into ``tile`` x ``tile`` windows without a shift; a map
    that does not divide is zero-padded at the bottom/right and the padding is attended."""
    H, W, C = grid.shape
    Hp, Wp = -(-H // tile) * tile, -(-W // tile) * tile
    padded = torch.zeros(Hp, Wp, C, dtype=grid.dtype)
    padded[:H, :W] = grid
    attended = torch.empty_like(padded)
    for r in range(0, Hp, tile):
        for c in range(0, Wp, tile):
            positions = [(i, j) for i in range(r, r + tile) for j in range(c, c + tile)]
            tokens = torch.stack([padded[i, j] for i, j in positions])
            out = _attention_by_hand(block.attn, tokens, positions, scale)
            for (i, j), o in zip(positions, out):
                attended[i, j] = o
    x = grid + block.norm1(attended[:H, :W])
    return x + block.norm2(block.mlp(x))


def _run_block(block, grid):
    H, W, C = grid.shape
    with torch.no_grad():
        return block(grid.reshape(1, H * W, C), H, W).view(H, W, C)


@pytest.mark.parametrize("H, W, window, pretrained", [
    (5, 5, 8, 0), (8, 8, 8, 0), (4, 12, 8, 0), (12, 4, 8, 0), (4, 12, 4, 0), (2, 6, 8, 0),
    (5, 5, 8, 6), (4, 12, 8, 12), (1, 1, 4, 0), (1, 3, 4, 0)])
def test_map_whose_shorter_side_fits_is_tiled_by_that_side_without_shift_or_padding(
        H, W, window, pretrained):
    """Shorter side s <= window: the reference attends in s x s windows with no shift, and
    normalises position offsets by (pretrained window - 1), or (s - 1) without one. Padding
    the map to the configured window (padding tokens in the softmax), keeping the shift on a
    non-square map, or scaling offsets by the configured window would each change the output."""
    block = _random_block(window=window, pretrained_window=pretrained)
    grid = torch.randn(H, W, block.norm1.normalized_shape[0], dtype=torch.float64)
    s = min(H, W)
    # A 1x1 window has only the zero offset; the reference divides it by 0 (NaN), swinkit
    # takes its coordinate as 0, which _log_coord does for any scale.
    scale = (pretrained or s) - 1
    expected = _unshifted_block_by_hand(block, grid, s, scale)
    actual = _run_block(block, grid)
    assert torch.isfinite(actual).all()
    assert torch.allclose(actual, expected, atol=1e-6)


def test_map_larger_than_window_keeps_window_and_zero_padding():
    """Shorter side > window: the configured window stays, and a map that does not divide into
    it is zero-padded with the padding attended (MMSeg's way for inputs of any size)."""
    block = _random_block(window=4)
    block.shift = 0  # the unshifted block of the pair; the shifted one is checked below
    grid = torch.randn(10, 6, 8, dtype=torch.float64)
    expected = _unshifted_block_by_hand(block, grid, tile=4, scale=3)
    assert torch.allclose(_run_block(block, grid), expected, atol=1e-6)


@pytest.mark.parametrize("H, W, shifted", [
    (8, 12, True), (12, 8, True), (6, 6, True), (5, 9, True),
    (4, 12, False), (12, 4, False), (4, 4, False), (3, 9, False)])
def test_shift_is_on_exactly_when_the_shorter_side_exceeds_the_window(H, W, shifted):
    """Window 4, shift 2. Shifted, token (0, 0) lands in the bottom-right window of the rolled
    map with only rows/cols 0-1 of its own region, so a change at (2, 2) cannot reach it;
    unshifted, (0, 0) and (2, 2) share the first 4x4 (or, shrunk, 3x3) window."""
    block = _random_block(window=4)
    grid = torch.randn(H, W, 8, dtype=torch.float64)
    moved = grid.clone()
    moved[2, 2] += 1.0
    a, b = _run_block(block, grid), _run_block(block, moved)
    reaches = not torch.allclose(a[0, 0], b[0, 0], atol=1e-12)
    assert reaches != shifted
    assert not torch.allclose(a[2, 2], b[2, 2])  # the change itself is visible


def test_res_post_norms_start_at_zero_so_blocks_start_as_identity():
    """The reference zeroes each block's norm1/norm2 weight and bias; the other LayerNorms
    (patch embedding, patch merging, output / final norms) start at weight 1, bias 0."""
    arch = dict(embed_dim=8, depths=(2, 2), num_heads=(1, 2))
    for model in (SwinV2(arch, window_size=4, out_indices=(0, 1)),
                  SwinV2Classifier(arch, window_size=4)):
        post, other = [], []
        for name, module in model.named_modules():
            if isinstance(module, nn.LayerNorm):
                (post if name.rsplit(".", 1)[-1] in ("norm1", "norm2") else other).append(module)
        assert len(post) == 2 * 4
        assert all(not m.weight.any() and not m.bias.any() for m in post)
        assert other and all(m.weight.eq(1).all() and not m.bias.any() for m in other)
        block = model.stages[0].blocks[1]
        x = torch.randn(2, 8 * 8, 8)
        with torch.no_grad():
            assert torch.equal(block(x, 8, 8), x)


def test_shrunk_window_geometry_stays_off_the_state_dict():
    """Forwarding maps that shrink the window must not add parameters or checkpoint entries."""
    arch = dict(embed_dim=8, depths=(2, 2, 2, 2), num_heads=(1, 1, 2, 2))
    model = SwinV2(arch, window_size=8).eval()
    keys, params = set(model.state_dict()), count_params(model)
    with torch.no_grad():
        for size in (64, 96, 32):  # stage maps down to 2x2, 3x3 and 1x1
            outs = model(torch.randn(1, 3, size, size))
            assert all(torch.isfinite(o).all() for o in outs)
    assert set(model.state_dict()) == keys
    assert count_params(model) == params


@pytest.mark.parametrize("window, crop, accepted", [
    (32, (64, 64), True),     # maps 16, 8, 4, 2: one shrunk window each, as the reference takes
    (16, (32, 128), True),    # maps 8x32 ... 1x4: tiled by windows of the shorter side
    (32, (64, 96), False),    # map 16x24 would pad its longer side to 32
    (32, (48, 48), False),    # map 12 -> 6 -> 3 -> 2: patch merging would pad an odd side
    (4, (64, 64), True)])     # the test preset: a multiple of patch x window, as before
def test_crop_validation_takes_crops_that_tile_into_shrunk_windows(window, crop, accepted,
                                                                    tmp_path):
    from swinkit.config import load_config
    overrides = {"model.backbone.window_size": window, "crop_size": crop}
    if accepted:
        assert tuple(load_config("test", tmp_path, overrides).crop_size) == crop
    else:
        with pytest.raises(ValueError, match="cannot be taken by the model"):
            load_config("test", tmp_path, overrides)
