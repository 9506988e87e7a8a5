"""Presets and their validation: the root of swinkit's imports.

A preset is an MMEngine config file in ``swinkit/configs/`` that users can read and override.
:func:`load_config` reads one, fills in the parts derived from its knobs (data root, crop-sized
pipeline steps, BN on CPU), and validates it, raising ``ValueError`` that names the bad field and
value before any expensive work starts. Checks are explicit ``if``/``raise``, never ``assert``,
so they hold under ``python -O``.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from swinkit.input_checks import check_int
from swinkit.precision import DEFAULT as DEFAULT_PRECISION, check_precision

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
PRESETS = ("thesis", "cpu", "test")
DATA_ROOT_ENV = "SWINKIT_DATA_ROOT"
PATCH_SIZE = 4
TOTAL_STRIDE = 32  # patch embedding (4) x three patch mergings (2**3)
SYNTHETIC_VERSION = 2  # bump when swinkit.data.synthetic writes different content
# on/off knobs of the cheap GPU remedies (swinkit.model.remedies applies them)
REMEDY_SWITCHES = ("channels_last_heads", "fused_adamw", "cudnn_benchmark")


def config_path(preset: str) -> Path:
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}; got {preset!r}")
    return CONFIG_DIR / f"{preset}.py"


def default_data_root() -> Path:
    """Where the synthetic ADE20K is written on first use (``$XDG_CACHE_HOME/swinkit``)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "swinkit" / f"synthetic-ade20k-v{SYNTHETIC_VERSION}" / "ADEChallengeData2016"


def resolve_data_root(data_root: str | os.PathLike | None = None) -> tuple[Path, bool]:
    """The data root to use, and whether it is the embedded synthetic default.

    Order: the explicit argument, then ``$SWINKIT_DATA_ROOT``, then the synthetic default.
    """
    chosen = data_root or os.environ.get(DATA_ROOT_ENV)
    if chosen:
        return Path(chosen).expanduser().resolve(), False
    return default_data_root(), True


@dataclass(frozen=True)
class Workload:
    """The workload a preset describes, as plain values (what ``describe`` prints)."""
    preset: str
    config_file: str
    arch: Any
    window_size: Any
    crop_size: tuple[int, int]
    images_per_rank: int
    loader_workers: int
    num_classes: int
    device: str
    base_iters: int
    data_root: str


def _min_window(window: Any) -> int:
    return window if isinstance(window, int) else min(window)


def _shrunk_windows_tile(crop: tuple[int, int], window: Any, stages: int = 4) -> bool:
    """Whether a crop tiles without padding once small maps shrink the window.

    A stage whose token map has its shorter side within the window attends in windows of that
    side (swinkit.model.swinv2_blocks.effective_window, after the SwinV2 authors' reference
    implementation), so a crop smaller than patch_size x window_size can still tile exactly:
    64x64 with window 32 gives maps 16, 8, 4, 2, each one window. Such crops are the ones the
    reference takes; sides must still halve exactly at every patch merging.
    """
    if any(side % TOTAL_STRIDE for side in crop):
        return False
    windows = (window,) * stages if isinstance(window, int) else tuple(window)
    h, w = crop[0] // PATCH_SIZE, crop[1] // PATCH_SIZE
    for win in windows:
        tile = min(h, w) if min(h, w) <= win else win
        if h % tile or w % tile:
            return False
        h, w = h // 2, w // 2
    return True


def validate(cfg) -> None:
    """Check the knobs a user is likely to get wrong; raise ValueError naming field and value."""
    crop = cfg.get("crop_size")
    if not (isinstance(crop, (tuple, list)) and len(crop) == 2):
        raise ValueError(f"crop_size must be (height, width), got {crop!r}")
    for side in crop:
        check_int("crop_size", side)
    check_int("images_per_rank", cfg.get("images_per_rank"))
    check_int("loader_workers", cfg.get("loader_workers"), 0)
    check_int("skip_bad_samples", cfg.get("skip_bad_samples", 0), 0)
    for switch in ("cpu_sync_bn",) + REMEDY_SWITCHES:
        if not isinstance(cfg.get(switch, False), bool):
            raise ValueError(f"{switch} must be True or False, got {cfg.get(switch)!r}")
    if cfg.get("device") not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {cfg.get('device')!r}")
    # an unknown name, or fp16 on CPU, refused here; tf32 and slow bf16 on CPU are labelled
    # where they are measured
    check_precision(cfg.get("precision", DEFAULT_PRECISION), cfg.device)
    window = cfg.model.backbone.window_size
    # The stage-1 token grid must tile into whole windows (the configured ones, or the shrunk
    # ones of a map no larger than the window), and the deepest stage must exist: the model
    # would pad anything else, but a training crop that needs padding wastes compute on every
    # step and is almost always a typo.
    grid = PATCH_SIZE * _min_window(window)
    for side in crop:
        off_grid = side % grid and not _shrunk_windows_tile(tuple(crop), window)
        if off_grid or side < TOTAL_STRIDE:
            raise ValueError(
                f"crop_size {tuple(crop)} cannot be taken by the model: each side must be a "
                f"multiple of patch_size x window_size = {PATCH_SIZE} x {_min_window(window)} "
                f"= {grid} and at least {TOTAL_STRIDE} (or, for a crop smaller than that, "
                f"tile into windows of its shorter side at every stage)")


def _replace_type(node: Any, old: str, new: str) -> Any:
    if isinstance(node, Mapping):
        out = {k: _replace_type(v, old, new) for k, v in node.items()}
        if out.get("type") == old:
            out["type"] = new
        return out
    if isinstance(node, list):
        return [_replace_type(v, old, new) for v in node]
    return node


def _derive(cfg, data_root: Path) -> None:
    """Fill the parts that follow from the knobs, so each number is stated once."""
    crop = tuple(cfg.crop_size)
    cfg.data_root = str(data_root)
    cfg.train_dataset.data_root = str(data_root)
    cfg.train_dataset.skip_bad_samples = cfg.get("skip_bad_samples", 0)
    cfg.model.data_preprocessor.size = crop
    cfg.data_preprocessor = cfg.model.data_preprocessor
    for step in cfg.train_pipeline:
        if step["type"] == "RandomResize":
            step["scale"] = tuple(cfg.resize_scale)
        elif step["type"] == "RandomCrop":
            step["crop_size"] = crop
    cfg.train_dataset.pipeline = cfg.train_pipeline
    for head in ("decode_head", "auxiliary_head"):
        cfg.model[head].num_classes = cfg.num_classes
    last = cfg.param_scheduler[-1]
    cfg.param_scheduler[0]["end"] = cfg.warmup_iters
    last["begin"], last["end"] = cfg.warmup_iters, max(cfg.base_iters, cfg.warmup_iters + 1)
    if cfg.device == "cpu":
        # torch's SyncBatchNorm refuses CPU tensors: on CPU the heads use plain BN, or with
        # cpu_sync_bn SyncBN's CPU stand-in (swinkit.model.cpu_syncbn), which keeps SyncBN's
        # module type, hooks and collectives so that the GPU presets' paths run here too.
        norm = "CpuSyncBN" if cfg.get("cpu_sync_bn", False) else "BN"
        cfg.model = _replace_type(cfg.model.to_dict(), "SyncBN", norm)


def load_config(preset: str = "cpu", data_root: str | os.PathLike | None = None,
                overrides: Mapping[str, Any] | None = None, device: str | None = None):
    """Read a preset's MMEngine config, apply ``--cfg-options``-style overrides, validate.

    Args:
        preset: one of :data:`PRESETS`.
        data_root: ADE20K root (the ``ADEChallengeData2016`` folder); see :func:`resolve_data_root`.
        overrides: dotted keys to values, e.g. ``{"images_per_rank": 4}``.
        device: force "cpu" or "cuda" (default: the preset's).
    """
    from mmengine.config import Config

    cfg = Config.fromfile(str(config_path(preset)))
    if overrides:
        cfg.merge_from_dict(dict(copy.deepcopy(overrides)))
    if device is not None:
        cfg.device = device
    validate(cfg)
    root, _ = resolve_data_root(data_root)
    _derive(cfg, root)
    return cfg


def workload(cfg) -> Workload:
    backbone = cfg.model["backbone"]
    arch = backbone["arch"]
    return Workload(
        preset=cfg.preset, config_file=str(config_path(cfg.preset)),
        arch=arch if isinstance(arch, str) else dict(arch),
        window_size=backbone["window_size"], crop_size=tuple(cfg.crop_size),
        images_per_rank=cfg.images_per_rank, loader_workers=cfg.loader_workers,
        num_classes=cfg.num_classes, device=cfg.device, base_iters=cfg.base_iters,
        data_root=cfg.data_root)
