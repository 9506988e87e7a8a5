"""``verify-data``: decode every image and label map of a data root and name the bad ones.

Two decoders, because each misses what the other catches: OpenCV is what the training loader
uses (it returns None for garbage), and PIL's ``load()`` rejects truncated JPEGs that OpenCV may
decode partially with only a warning.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import cv2
import numpy as np
from PIL import Image

from swinkit.data.synthetic import SPLITS


@dataclass
class Problem:
    split: str
    index: int
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.split} sample {self.index}: {self.path}: {self.reason}"


@dataclass
class VerifyReport:
    root: str
    checked: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.checked > 0


def _decode(path: Path, flags: int) -> tuple[np.ndarray | None, str | None]:
    if not path.is_file():
        return None, "file is missing"
    if path.stat().st_size == 0:
        return None, "file is empty"
    array = cv2.imdecode(np.fromfile(str(path), dtype=np.uint8), flags)
    if array is None:
        return None, "OpenCV cannot decode it (corrupt or not an image)"
    try:
        with Image.open(path) as im:
            im.load()
    except (OSError, SyntaxError, ValueError) as exc:
        return None, f"PIL cannot decode it fully ({exc})"
    return array, None


def verify_data(root: str | Path, progress: Callable[[str], None] | None = print) -> VerifyReport:
    root = Path(root)
    report = VerifyReport(str(root))
    for split in SPLITS:
        images = sorted((root / "images" / split).glob("*.jpg"))
        for index, img_path in enumerate(images):
            seg_path = root / "annotations" / split / (img_path.stem + ".png")
            img, why = _decode(img_path, cv2.IMREAD_COLOR)
            if why:
                report.problems.append(Problem(split, index, str(img_path), why))
            seg, why = _decode(seg_path, cv2.IMREAD_UNCHANGED)
            if why:
                report.problems.append(Problem(split, index, str(seg_path), why))
            if img is not None and seg is not None and img.shape[:2] != seg.shape[:2]:
                report.problems.append(Problem(
                    split, index, str(seg_path),
                    f"label map {seg.shape[1]}x{seg.shape[0]} != image {img.shape[1]}x{img.shape[0]}"))
            report.checked += 1
            if progress and report.checked % 100 == 0:
                progress(f"  verified {report.checked} samples, {len(report.problems)} problems")
    return report
