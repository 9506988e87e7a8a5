"""A deterministic synthetic ADE20K in the real ``ADEChallengeData2016`` layout.

No machine of this project can download ADE20K, so the default workload reads this instead. It is
written to look like ADE20K to the loader, which is what the benchmarks measure: JPEGs of ADE-like
sizes whose noise and texture make them compress (and decode) like photos, and PNG label maps with
classes 0..150 in Voronoi regions, where each class has its own colour and texture so a model can
actually learn from them (the training loss falls).

The set is written into a temporary folder beside the target and renamed into place at the end,
so a crash or a concurrent writer never leaves a half-written dataset behind.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

import cv2
import numpy as np

NUM_CLASSES = 150
# (height, width) pairs common in ADEChallengeData2016 (short side mostly 512, a few smaller).
ADE_SIZES = ((512, 683), (683, 512), (512, 512), (384, 512), (512, 768), (480, 640), (341, 512))
SPLITS = {"training": "ADE_train", "validation": "ADE_val"}
CLASS_FREQUENCY = 1.0 / np.arange(1, NUM_CLASSES + 1) ** 1.1
CLASS_FREQUENCY /= CLASS_FREQUENCY.sum()


def _class_palette(seed: int = 2016) -> np.ndarray:
    """(151, 3) uint8 colours, one per label value (0 = 'other')."""
    return np.random.default_rng(seed).integers(30, 226, size=(NUM_CLASSES + 1, 3), dtype=np.uint8)


def make_sample(index: int, split_seed: int, palette: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One (image BGR uint8 (H, W, 3), label uint8 (H, W)) pair, a pure function of its index."""
    rng = np.random.default_rng([split_seed, index])
    h, w = ADE_SIZES[rng.integers(len(ADE_SIZES))]
    n_regions = int(rng.integers(4, 16))
    seeds = rng.uniform((0, 0), (h, w), size=(n_regions, 2))
    # ADE20K's class ids are ordered by pixel frequency (wall, building, sky, floor, tree, ...):
    # draw them Zipf-like, with some unlabelled ('other', 0) regions, as in the real set.
    classes = rng.choice(NUM_CLASSES, size=n_regions, p=CLASS_FREQUENCY) + 1
    classes[1:][rng.random(n_regions - 1) < 0.05] = 0
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    dist = (yy[..., None] - seeds[:, 0]) ** 2 + (xx[..., None] - seeds[:, 1]) ** 2
    region = dist.argmin(axis=-1)
    label = classes[region].astype(np.uint8)
    image = palette[label].astype(np.float32)
    # Illumination gradient, per-class stripe texture and sensor noise: what makes JPEG work.
    image *= (0.75 + 0.5 * (yy / h))[..., None]
    freq = (label.astype(np.float32) % 7 + 1) * 0.15
    image += 18 * np.sin(freq * xx + 0.3 * yy)[..., None]
    image += rng.normal(0, 9, size=image.shape)
    image = cv2.GaussianBlur(np.clip(image, 0, 255).astype(np.uint8), (3, 3), 0)
    return image, label


def write_synthetic_ade20k(root: str | os.PathLike, n_train: int = 256, n_val: int = 32,
                           quality: int = 90, progress: Callable[[str], None] | None = print) -> Path:
    """Write the set to ``root`` (the ``ADEChallengeData2016`` folder) unless it is there.

    Returns:
        The root. An existing root is left untouched.
    """
    root = Path(root)
    if (root / "images" / "training").is_dir():
        return root
    if n_train < 1 or n_val < 0:
        raise ValueError(f"n_train must be >= 1 and n_val >= 0, got {n_train}, {n_val}")
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".partial-", dir=root.parent))
    palette = _class_palette()
    start = time.perf_counter()
    try:
        for split_seed, (split, prefix) in enumerate(SPLITS.items()):
            count = n_train if split == "training" else n_val
            (tmp / "images" / split).mkdir(parents=True)
            (tmp / "annotations" / split).mkdir(parents=True)
            for i in range(count):
                image, label = make_sample(i, split_seed, palette)
                name = f"{prefix}_{i + 1:08d}"
                cv2.imwrite(str(tmp / "images" / split / f"{name}.jpg"), image,
                            [cv2.IMWRITE_JPEG_QUALITY, quality])
                cv2.imwrite(str(tmp / "annotations" / split / f"{name}.png"), label)
                if progress and (i + 1) % 64 == 0:
                    progress(f"  synthetic ADE20K: {split} {i + 1}/{count}")
        try:
            tmp.rename(root)
        except OSError:  # another writer finished first: keep theirs
            if not (root / "images" / "training").is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if progress:
        progress(f"  synthetic ADE20K: {n_train} training + {n_val} validation images in "
                 f"{time.perf_counter() - start:.1f} s at {root}")
    return root
