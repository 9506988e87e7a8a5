"""The validation split a held-out target is measured on: ADE20K's ``validation`` folder (real
or synthetic) through a deterministic pipeline.

Each image and its label map are resized to the training crop (labels by nearest neighbour),
with no random step, so every evaluation sees the same pixels and a batch of any size stacks.
This is not MMSeg's ADE20K test protocol (resize to 2048x512 keeping the aspect ratio, scored
at the label's original size): held-out figures here are comparable with each other, not with
published mIoU.
"""
from __future__ import annotations

import copy
from pathlib import Path

from swinkit.data.errors import DataError


def validation_pipeline(crop_size: tuple[int, int]) -> list[dict]:
    """Load image, load labels, resize both to ``crop_size`` (height, width), pack.

    The labels are loaded before the resize so that MMCV's ``Resize`` resizes them with the
    image (nearest neighbour for label maps). ``Resize`` takes its scale as (width, height).
    """
    height, width = crop_size
    return [dict(type="LoadImageFromFile"), dict(type="LoadAnnotations"),
            dict(type="Resize", scale=(width, height), keep_ratio=False),
            dict(type="PackSegInputs")]


def check_validation_split(root: str | Path) -> Path:
    """Raise DataError unless ``root`` holds validation images and annotations."""
    root = Path(root)
    for folder in (root / "images" / "validation", root / "annotations" / "validation"):
        if not folder.is_dir() or not any(folder.iterdir()):
            raise DataError(f"data root {root} has no files in {folder.relative_to(root)}/: "
                            "a held-out target needs ADE20K's validation split")
    return root


def build_validation_dataset(cfg):
    """The preset's dataset over the validation split, with :func:`validation_pipeline`
    (failures name the sample, as in training: ``CheckedADE20KDataset``)."""
    from mmseg.registry import DATASETS

    import swinkit.data.dataset  # noqa: F401  registers CheckedADE20KDataset
    from swinkit.model.registry import use_mmseg_scope
    use_mmseg_scope()

    check_validation_split(cfg.data_root)
    spec = copy.deepcopy(cfg.train_dataset.to_dict())
    spec.update(type="CheckedADE20KDataset", pipeline=validation_pipeline(tuple(cfg.crop_size)),
                data_prefix=dict(img_path="images/validation",
                                 seg_map_path="annotations/validation"))
    return DATASETS.build(spec)
