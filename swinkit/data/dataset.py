"""ADE20K through MMSeg, with failures that name the sample.

MMCV's loader decodes with ``cv2.imdecode``, which returns None for a truncated or garbage JPEG;
the pipeline then fails with an AttributeError that names no file, and MMEngine's dataset would
silently re-draw another index. :class:`CheckedADE20KDataset` checks each decoded sample and turns
any failure into :class:`CorruptSampleError` with the file and index.
"""
from __future__ import annotations

import os
import signal
import time

import numpy as np
from mmseg.datasets import ADE20KDataset
from mmseg.registry import DATASETS

from swinkit.input_checks import check_int
from swinkit.data.errors import CorruptSampleError
from swinkit.faults import LOADER_KINDS, current_fault


def check_decoded(index: int, img_path: str, seg_path: str, img, seg) -> None:
    """Raise CorruptSampleError unless img and seg decoded and have the same height and width."""
    if not isinstance(img, np.ndarray) or img.size == 0:
        raise CorruptSampleError(index, img_path, "image could not be decoded (corrupt or truncated)")
    if not isinstance(seg, np.ndarray) or seg.size == 0:
        raise CorruptSampleError(index, seg_path, "label map could not be decoded")
    if img.shape[:2] != seg.shape[:2]:
        raise CorruptSampleError(
            index, seg_path, f"label map is {seg.shape[1]}x{seg.shape[0]} but image {img_path} "
                             f"is {img.shape[1]}x{img.shape[0]} (width x height)")


@DATASETS.register_module(force=True)
class CheckedADE20KDataset(ADE20KDataset):
    """``ADE20KDataset`` whose samples fail loudly, naming file and index.

    The first two pipeline steps (image and annotation loading) run here so the decoded arrays
    can be checked before augmentation hides a size mismatch.

    Args:
        skip_bad_samples: 0 (default) raises on the first bad sample. N > 0 replaces a bad
            sample by the next good one, records what was skipped in the sample's metainfo
            (``skipped_samples``: list of "sample i: path: reason"), and raises once more than N
            bad samples in a row are met.
    """

    def __init__(self, *args, skip_bad_samples: int = 0, **kwargs):
        self.skip_bad_samples = check_int("skip_bad_samples", skip_bad_samples, 0)
        super().__init__(*args, **kwargs)

    def __getitem__(self, idx: int):
        if not self._fully_initialized:
            self.full_init()
        skipped = []
        for attempt in range(self.skip_bad_samples + 1):
            index = (idx + attempt) % len(self)
            try:
                data = self.prepare_data(index)
            except CorruptSampleError as exc:
                if attempt >= self.skip_bad_samples:
                    if skipped:
                        raise CorruptSampleError(exc.index, exc.path, f"{exc.reason} (and "
                                                 f"{len(skipped)} bad samples before it: more "
                                                 f"than skip_bad_samples={self.skip_bad_samples})")
                    raise
                skipped.append(str(exc))
                continue
            if skipped:
                data["data_samples"].set_metainfo({"skipped_samples": skipped})
            return data
        raise AssertionError("unreachable")

    def prepare_data(self, idx: int):
        _maybe_fault(idx)
        info = self.get_data_info(idx)
        img_path, seg_path = info["img_path"], info["seg_map_path"]
        for path in (img_path, seg_path):
            if not os.path.isfile(path):
                raise CorruptSampleError(idx, path, "file is missing")
            if os.path.getsize(path) == 0:
                raise CorruptSampleError(idx, path, "file is empty")
        load_img, load_seg, *rest = self.pipeline.transforms
        results = self._load(load_img, info, idx, img_path, "image could not be decoded")
        results = self._load(load_seg, results, idx, seg_path, "label map could not be decoded")
        check_decoded(idx, img_path, seg_path, results.get("img"), results.get("gt_seg_map"))
        for transform in rest:
            results = transform(results)
        return results

    @staticmethod
    def _load(step, results, idx: int, path: str, what: str):
        try:
            out = step(results)
        except Exception as exc:  # MMCV raises assorted types (AssertionError, cv2.error, ...)
            raise CorruptSampleError(idx, path, f"{what} ({type(exc).__name__}: {exc})") from exc
        if out is None:
            raise CorruptSampleError(idx, path, what)
        return out


def _maybe_fault(idx: int) -> None:
    """Loader faults for tests (:mod:`swinkit.faults`): ``loader_kill:K`` / ``loader_stall:K``
    make the worker that loads sample K die / hang."""
    fault = current_fault()
    if fault is None or fault.kind not in LOADER_KINDS or fault.sample != idx:
        return
    from torch.utils.data import get_worker_info
    if get_worker_info() is None:
        return
    if fault.kind == "loader_kill":
        os.kill(os.getpid(), signal.SIGKILL)
    else:
        time.sleep(3600)
