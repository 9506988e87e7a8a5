"""SwinV2 backbone for segmentation, and the ImageNet classifier used to check it.

Variants by name (SwinV2 paper, Table 1):

    =====  =========  ============  ==============
    name   embed_dim  depths        num_heads
    =====  =========  ============  ==============
    T      96         2, 2, 6, 2    3, 6, 12, 24
    S      96         2, 2, 18, 2   3, 6, 12, 24
    B      128        2, 2, 18, 2   4, 8, 16, 32
    L      192        2, 2, 18, 2   6, 12, 24, 48
    =====  =========  ============  ==============
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from swinkit.model.swinv2_blocks import PatchEmbed, PatchMerging, SwinV2Block

VARIANTS: dict[str, dict] = {
    "T": dict(embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24)),
    "S": dict(embed_dim=96, depths=(2, 2, 18, 2), num_heads=(3, 6, 12, 24)),
    "B": dict(embed_dim=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32)),
    "L": dict(embed_dim=192, depths=(2, 2, 18, 2), num_heads=(6, 12, 24, 48)),
}


def _per_stage(value: int | Sequence[int], field: str, stages: int) -> tuple[int, ...]:
    values = (value,) * stages if isinstance(value, int) else tuple(value)
    if len(values) != stages:
        raise ValueError(f"{field} needs {stages} entries (one per stage), got {value!r}")
    if any(v < 0 for v in values):
        raise ValueError(f"{field} must be non-negative, got {value!r}")
    return values


class SwinV2Stage(nn.Module):
    """``depth`` blocks alternating plain and shifted windows, then optional patch merging."""

    def __init__(self, dim: int, depth: int, num_heads: int, window: int, pretrained_window: int,
                 drop_paths: Sequence[float], downsample: bool, with_cp: bool):
        super().__init__()
        self.with_cp = with_cp
        self.blocks = nn.ModuleList(
            SwinV2Block(dim, num_heads, window, shift=0 if i % 2 == 0 else window // 2,
                        pretrained_window=pretrained_window, drop_path=drop_paths[i])
            for i in range(depth))
        self.downsample = PatchMerging(dim) if downsample else None

    def forward(self, x: torch.Tensor, H: int, W: int):
        """Returns the stage output before merging (and its size) and the merged input of the
        next stage (and its size)."""
        for block in self.blocks:
            if self.with_cp and x.requires_grad:
                x = checkpoint(block, x, H, W, use_reentrant=False)
            else:
                x = block(x, H, W)
        if self.downsample is None:
            return x, H, W, x, H, W
        merged, Ho, Wo = self.downsample(x, H, W)
        return x, H, W, merged, Ho, Wo


class SwinV2Encoder(nn.Module):
    """Patch embedding + four stages. Returns every stage's tokens; subclasses decide what to
    do with them."""

    def __init__(self, arch: str | dict = "B", in_channels: int = 3, patch_size: int = 4,
                 window_size: int | Sequence[int] = 16,
                 pretrained_window_sizes: int | Sequence[int] = 0,
                 drop_path_rate: float = 0.2, with_cp: bool = False):
        super().__init__()
        if isinstance(arch, str):
            if arch.upper() not in VARIANTS:
                raise ValueError(f"arch must be one of {sorted(VARIANTS)} or a dict, got {arch!r}")
            arch = VARIANTS[arch.upper()]
        embed_dim, depths, heads = arch["embed_dim"], tuple(arch["depths"]), tuple(arch["num_heads"])
        stages = len(depths)
        windows = _per_stage(window_size, "window_size", stages)
        if min(windows) < 1:
            raise ValueError(f"window_size must be >= 1, got {window_size!r}")
        pretrained = _per_stage(pretrained_window_sizes, "pretrained_window_sizes", stages)
        self.patch_embed = PatchEmbed(in_channels, embed_dim, patch_size)
        rates = torch.linspace(0, drop_path_rate, sum(depths)).tolist()
        self.stages = nn.ModuleList()
        self.channels = []
        for i, depth in enumerate(depths):
            dim = embed_dim * 2 ** i
            first = sum(depths[:i])
            self.stages.append(SwinV2Stage(dim, depth, heads[i], windows[i], pretrained[i],
                                           rates[first:first + depth], i < stages - 1, with_cp))
            self.channels.append(dim)
        self.window_sizes = windows

    def stage_outputs(self, x: torch.Tensor) -> list[tuple[torch.Tensor, int, int]]:
        """x: (B, C_in, H, W) -> per stage (tokens (B, h*w, C_i), h, w), strides 4/8/16/32."""
        tokens, H, W = self.patch_embed(x)
        outs = []
        for stage in self.stages:
            out, h, w, tokens, H, W = stage(tokens, H, W)
            outs.append((out, h, w))
        return outs


def _register(cls):
    """Register in MMSeg's MODELS registry so configs can say ``type='SwinV2'``."""
    from mmseg.registry import MODELS
    return MODELS.register_module(force=True)(cls)


@_register
class SwinV2(SwinV2Encoder):
    """SwinV2 backbone for dense prediction.

    Args:
        arch: variant name ("T", "S", "B", "L") or a dict with embed_dim, depths, num_heads.
        window_size: one window size or one per stage.
        pretrained_window_sizes: window sizes the weights were pre-trained with (0 = same as
            window_size); sets the coordinate scale of the position bias MLP.
        out_indices: stages whose outputs are returned.
        with_cp: activation checkpointing per block (trades compute for memory).

    Forward: (B, 3, H, W) -> tuple of (B, C_i, ceil(H/s_i), ceil(W/s_i)) for s_i = 4, 8, 16, 32
    and each i in ``out_indices``; any H, W is accepted. A stage whose map is no larger than
    its window along the shorter side attends with a window of that side and no shift; larger
    maps are padded to the window grid inside.
    """

    def __init__(self, arch: str | dict = "B", out_indices: Sequence[int] = (0, 1, 2, 3),
                 init_cfg=None, **kwargs):
        super().__init__(arch, **kwargs)
        bad = [i for i in out_indices if not 0 <= i < len(self.stages)]
        if bad:
            raise ValueError(f"out_indices {bad} outside 0..{len(self.stages) - 1}")
        self.out_indices = tuple(out_indices)
        # One LayerNorm per returned stage, as MMSeg's Swin does for its decode heads.
        self.out_norms = nn.ModuleDict({str(i): nn.LayerNorm(self.channels[i]) for i in out_indices})
        _initialise(self)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs = []
        for i, (tokens, h, w) in enumerate(self.stage_outputs(x)):
            if i in self.out_indices:
                feat = self.out_norms[str(i)](tokens)
                outs.append(feat.view(x.shape[0], h, w, -1).permute(0, 3, 1, 2).contiguous())
        return tuple(outs)

    def init_weights(self):  # MMEngine calls this; our weights are initialised in __init__.
        pass


class SwinV2Classifier(SwinV2Encoder):
    """ImageNet classifier (final norm + mean pool + linear): the model the paper's parameter
    and FLOP figures describe. (B, 3, H, W) -> (B, num_classes)."""

    def __init__(self, arch: str | dict = "B", num_classes: int = 1000, **kwargs):
        super().__init__(arch, **kwargs)
        self.norm = nn.LayerNorm(self.channels[-1])
        self.head = nn.Linear(self.channels[-1], num_classes)
        _initialise(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens, _, _ = self.stage_outputs(x)[-1]
        return self.head(self.norm(tokens).mean(dim=1))


def _initialise(model: nn.Module) -> None:
    """The reference's initialisation: truncated-normal linears, unit LayerNorms, then every
    block's res-post-norms zeroed (see :meth:`SwinV2Block.zero_res_post_norm`)."""
    model.apply(_init_weights)
    for module in model.modules():
        if isinstance(module, SwinV2Block):
            module.zero_res_post_norm()


def _init_weights(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.trunc_normal_(m.weight, std=0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.LayerNorm):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)
