"""Building blocks of Swin Transformer V2 (Liu et al., CVPR 2022).

Written here rather than imported: every public SwinV2 implementation (timm, torchvision,
mmpretrain) imports torchvision, which does not load beside the CPU build of torch that this
project's machines use (see DESIGN.md). The maths follows the reference implementation
(microsoft/Swin-Transformer, ``swin_transformer_v2.py``), adapted to segmentation the way MMSeg
adapts Swin V1: the input resolution is not fixed at construction time, so each block decides its
window from the map it is given (:func:`effective_window`), pads a map larger than the window to
the window grid and builds the shifted-window mask for the padded size.

Token tensors are ``(B, H*W, C)``; window tensors are ``(B*nW, Wh*Ww, C)``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def window_partition(x: torch.Tensor, window: int) -> torch.Tensor:
    """(B, H, W, C) with H, W multiples of ``window`` -> (B*nW, window*window, C)."""
    B, H, W, C = x.shape
    x = x.view(B, H // window, window, W // window, window, C)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, window * window, C)


def window_reverse(windows: torch.Tensor, window: int, H: int, W: int) -> torch.Tensor:
    """(B*nW, window*window, C) -> (B, H, W, C); the inverse of :func:`window_partition`."""
    C = windows.shape[-1]
    B = windows.shape[0] // ((H // window) * (W // window))
    x = windows.view(B, H // window, W // window, window, window, C)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(B, H, W, C)


def relative_coords_table(window: int, pretrained_window: int = 0) -> torch.Tensor:
    """Log-spaced relative coordinates fed to the continuous position bias MLP.

    Returns:
        (1, 2*window-1, 2*window-1, 2) table, values in [-1, 1] scaled by log2 as in the paper.
    """
    span = torch.arange(-(window - 1), window, dtype=torch.float32)
    table = torch.stack(torch.meshgrid(span, span, indexing="ij"), dim=-1).unsqueeze(0)
    # Normalise by the pre-training window so a model fine-tuned at a larger window keeps the
    # same coordinate scale it was trained with (paper section 3.3).
    norm = (pretrained_window if pretrained_window > 0 else window) - 1
    # A window of 1 (a 1x1 map) would divide by zero: the reference gives 0/0 = NaN there,
    # which poisons the softmax. Its only offset is zero, whose coordinate is 0 at any scale,
    # so dividing by 1 instead gives exactly that. (A pre-training window of 1 is divided by 1
    # too, giving finite coordinates where the reference would give infinities.)
    table = table / max(norm, 1) * 8
    return torch.sign(table) * torch.log2(table.abs() + 1.0) / math.log2(8)


def relative_position_index(window: int) -> torch.Tensor:
    """(window*window, window*window) index into the (2*window-1)**2 bias table."""
    coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij"))
    flat = coords.flatten(1)
    rel = (flat[:, :, None] - flat[:, None, :]).permute(1, 2, 0) + (window - 1)
    return rel[..., 0] * (2 * window - 1) + rel[..., 1]


def effective_window(H: int, W: int, window: int, shift: int) -> tuple[int, int]:
    """(window, shift) a block uses on an H x W map.

    As in the reference implementation of "Swin Transformer V2: Scaling Up Capacity and
    Resolution": when the shorter side fits in the window, the window shrinks to that side and
    the shift is dropped, so no padding token enters the softmax of a small map and there is
    nothing to shift across. The longer side of such a map is tiled by square windows of the
    shorter side (padded if it does not divide, where the reference would fail). A map whose
    shorter side exceeds the window keeps the configured window, shift and padding.
    """
    short = min(H, W)
    if short <= window:
        return short, 0
    return window, shift


def pad_to_windows(grid: torch.Tensor, window: int) -> torch.Tensor:
    """Zero-pad (B, H, W, C) at the bottom and right to multiples of ``window``, as MMSeg's Swin
    does for segmentation inputs of any size."""
    H, W = grid.shape[1:3]
    pad_b, pad_r = (window - H % window) % window, (window - W % window) % window
    if pad_b or pad_r:
        grid = F.pad(grid, (0, 0, 0, pad_r, 0, pad_b))
    return grid


class WindowAttention(nn.Module):
    """Scaled cosine window attention with a continuous (MLP) relative position bias."""

    def __init__(self, dim: int, window: int, num_heads: int, pretrained_window: int = 0,
                 attn_drop: float = 0.0, proj_drop: float = 0.0):
        super().__init__()
        self.num_heads = num_heads
        self.window = window
        self.pretrained_window = pretrained_window
        # Learnable per-head temperature, clamped at log(100) in forward as in the paper.
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones(num_heads, 1, 1)))
        self.cpb_mlp = nn.Sequential(nn.Linear(2, 512, bias=True), nn.ReLU(inplace=True),
                                     nn.Linear(512, num_heads, bias=False))
        # Geometry of the configured window; smaller (shrunk) windows are built on first use and
        # cached in a plain dict. Neither is in the state_dict, so checkpoints and parameter
        # counts do not depend on the map sizes a model has seen.
        self.register_buffer("coords_table", relative_coords_table(window, pretrained_window),
                             persistent=False)
        self.register_buffer("position_index", relative_position_index(window), persistent=False)
        self._geometry_cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        # Separate q and v biases (no k bias): the reference's choice, kept for parameter parity.
        self.q_bias = nn.Parameter(torch.zeros(dim))
        self.v_bias = nn.Parameter(torch.zeros(dim))
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def geometry(self, window: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Coordinates table and position index of a ``window`` x ``window`` window, on the
        device and in the dtype of the module's own buffers (cached, so a shrunk window costs
        no host-to-device copy after its first forward)."""
        if window == self.window:
            return self.coords_table, self.position_index
        like = self.coords_table
        key = (window, like.device, like.dtype)
        if key not in self._geometry_cache:
            # Normalised as the reference normalises a shrunk window: by the pre-training
            # window if one is set, else by the shrunk window itself.
            table = relative_coords_table(window, self.pretrained_window)
            self._geometry_cache[key] = (table.to(device=like.device, dtype=like.dtype),
                                         relative_position_index(window).to(like.device))
        return self._geometry_cache[key]

    def position_bias(self, window: int | None = None) -> torch.Tensor:
        """(num_heads, N, N) bias, N = window*window, bounded to (0, 16) by 16*sigmoid."""
        window = self.window if window is None else window
        coords_table, position_index = self.geometry(window)
        table = self.cpb_mlp(coords_table).view(-1, self.num_heads)
        n = window * window
        bias = table[position_index.view(-1)].view(n, n, -1).permute(2, 0, 1)
        return 16 * torch.sigmoid(bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                window: int | None = None) -> torch.Tensor:
        """x: (B*nW, N, C) with N = window*window (window defaults to the configured one);
        mask: (nW, N, N) with 0 / -100 entries, or None."""
        Bw, N, C = x.shape
        bias = torch.cat((self.q_bias, torch.zeros_like(self.v_bias), self.v_bias))
        qkv = F.linear(x, self.qkv.weight, bias).reshape(Bw, N, 3, self.num_heads, -1)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        attn = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        scale = torch.clamp(self.logit_scale, max=math.log(100.0)).exp()
        attn = attn * scale + self.position_bias(window).unsqueeze(0)
        if mask is not None:
            nW = mask.shape[0]
            attn = attn.view(Bw // nW, nW, self.num_heads, N, N) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.num_heads, N, N)
        attn = self.attn_drop(attn.softmax(dim=-1))
        out = (attn @ v).transpose(1, 2).reshape(Bw, N, C)
        return self.proj_drop(self.proj(out))


class Mlp(nn.Sequential):
    def __init__(self, dim: int, ratio: float = 4.0, drop: float = 0.0):
        hidden = int(dim * ratio)
        super().__init__(nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(drop),
                         nn.Linear(hidden, dim), nn.Dropout(drop))


class DropPath(nn.Module):
    """Stochastic depth per sample (identity at eval time or with p=0)."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.p == 0.0 or not self.training:
            return x
        keep = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(1 - self.p)
        return x * keep / (1 - self.p)


class SwinV2Block(nn.Module):
    """One (shifted) window attention block with res-post-norm:
    ``x = x + drop(norm1(attn(x))); x = x + drop(norm2(mlp(x)))``.

    ``window`` and ``shift`` are the configured ones; a map whose shorter side fits in the
    window is attended with a smaller window and no shift (:func:`effective_window`)."""

    def __init__(self, dim: int, num_heads: int, window: int, shift: int,
                 pretrained_window: int = 0, mlp_ratio: float = 4.0, drop_path: float = 0.0):
        super().__init__()
        self.window, self.shift = window, shift
        self.attn = WindowAttention(dim, window, num_heads, pretrained_window)
        self.norm1 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, mlp_ratio)
        self.norm2 = nn.LayerNorm(dim)
        self.drop_path = DropPath(drop_path)
        self._mask_cache: dict[tuple, torch.Tensor] = {}

    def zero_res_post_norm(self) -> None:
        """Zero the res-post-norm scales and shifts, as the authors' reference implementation
        of "Swin Transformer V2: Scaling Up Capacity and Resolution" initialises them: every
        block starts as the identity map and its residual branch grows from zero during
        training. Followed so that a model trained from scratch here starts where the
        authors' does; the compute per step is unchanged."""
        for norm in (self.norm1, self.norm2):
            nn.init.zeros_(norm.weight)
            nn.init.zeros_(norm.bias)

    def shift_mask(self, Hp: int, Wp: int, device: torch.device) -> torch.Tensor:
        """(nW, N, N) mask keeping attention inside each region of the rolled image. Only the
        configured window and shift are ever shifted (a shrunk window has no shift)."""
        key = (Hp, Wp, device)
        if key not in self._mask_cache:
            w, s = self.window, self.shift
            img = torch.zeros(1, Hp, Wp, 1, device=device)
            bands = (slice(0, -w), slice(-w, -s), slice(-s, None))
            for region, (hs, ws) in enumerate((h, v) for h in bands for v in bands):
                img[:, hs, ws, :] = region
            ids = window_partition(img, w).squeeze(-1)
            diff = ids.unsqueeze(1) - ids.unsqueeze(2)
            self._mask_cache[key] = diff.masked_fill(diff != 0, -100.0).masked_fill(diff == 0, 0.0)
        return self._mask_cache[key]

    def forward(self, x: torch.Tensor, H: int, W: int) -> torch.Tensor:
        B, L, C = x.shape
        w, shift = effective_window(H, W, self.window, self.shift)
        grid = pad_to_windows(x.view(B, H, W, C), w)
        Hp, Wp = grid.shape[1:3]
        mask = None
        if shift:
            grid = torch.roll(grid, shifts=(-shift, -shift), dims=(1, 2))
            mask = self.shift_mask(Hp, Wp, x.device)
        windows = self.attn(window_partition(grid, w), mask, w)
        grid = window_reverse(windows, w, Hp, Wp)
        if shift:
            grid = torch.roll(grid, shifts=(shift, shift), dims=(1, 2))
        attn_out = grid[:, :H, :W, :].reshape(B, L, C)
        x = x + self.drop_path(self.norm1(attn_out))
        return x + self.drop_path(self.norm2(self.mlp(x)))


class PatchMerging(nn.Module):
    """2x2 neighbourhood -> one token: (B, H*W, C) -> (B, ceil(H/2)*ceil(W/2), 2C).
    SwinV2 normalises after the reduction (post-norm)."""

    def __init__(self, dim: int):
        super().__init__()
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(2 * dim)

    def forward(self, x: torch.Tensor, H: int, W: int) -> tuple[torch.Tensor, int, int]:
        B, _, C = x.shape
        grid = x.view(B, H, W, C)
        if H % 2 or W % 2:
            grid = F.pad(grid, (0, 0, 0, W % 2, 0, H % 2))
        parts = [grid[:, i::2, j::2, :] for j in (0, 1) for i in (0, 1)]
        merged = torch.cat(parts, dim=-1)
        Ho, Wo = merged.shape[1], merged.shape[2]
        return self.norm(self.reduction(merged.view(B, -1, 4 * C))), Ho, Wo


class PatchEmbed(nn.Module):
    """Non-overlapping ``patch`` x ``patch`` convolution: (B, 3, H, W) -> (B, H/p*W/p, C)."""

    def __init__(self, in_chans: int, dim: int, patch: int = 4):
        super().__init__()
        self.patch = patch
        self.proj = nn.Conv2d(in_chans, dim, kernel_size=patch, stride=patch)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        p = self.patch
        H, W = x.shape[-2:]
        if H % p or W % p:
            x = F.pad(x, (0, (p - W % p) % p, 0, (p - H % p) % p))
        x = self.proj(x)
        Ho, Wo = x.shape[-2:]
        return self.norm(x.flatten(2).transpose(1, 2)), Ho, Wo
