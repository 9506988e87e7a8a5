"""The synthetic ADE20K, MMSeg's pipeline over it, and bad data named by file and index."""
import cv2
import numpy as np
import pytest

from swinkit.data.errors import CorruptSampleError, DataError
from swinkit.data.loader import build_dataset, build_loader, check_data_root
from swinkit.data.synthetic import NUM_CLASSES, _class_palette, make_sample
from swinkit.data.verify import verify_data


def test_synthetic_layout_and_label_range(data_root):
    images = sorted((data_root / "images" / "training").glob("*.jpg"))
    labels = sorted((data_root / "annotations" / "training").glob("*.png"))
    assert [p.stem for p in images] == [p.stem for p in labels] == [
        f"ADE_train_{i:08d}" for i in range(1, 9)]
    assert len(list((data_root / "images" / "validation").glob("ADE_val_*.jpg"))) == 2
    for img_path, seg_path in zip(images, labels):
        img = cv2.imread(str(img_path))
        seg = cv2.imread(str(seg_path), cv2.IMREAD_UNCHANGED)
        assert img.shape[:2] == seg.shape and seg.dtype == np.uint8
        assert seg.max() <= NUM_CLASSES
        # compresses like a photo, not like a flat colour field (>= 0.5 bit per pixel)
        assert img_path.stat().st_size * 8 / seg.size > 0.5


def test_synthetic_samples_are_deterministic():
    palette = _class_palette()
    a, b = make_sample(3, 0, palette), make_sample(3, 0, palette)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(a[1], make_sample(4, 0, palette)[1])


def test_pipeline_yields_crops_of_the_preset_size(test_cfg):
    """RandomCrop gives at most the crop (an image resized below it stays smaller, as in MMSeg);
    the data preprocessor pads every sample to exactly the crop."""
    from mmseg.registry import MODELS
    crop = tuple(test_cfg.crop_size)
    loader = build_loader(test_cfg, workers=0)
    for _, batch in zip(range(3), loader):
        assert len(batch["inputs"]) == test_cfg.images_per_rank
        for image, sample in zip(batch["inputs"], batch["data_samples"]):
            assert image.shape[0] == 3 and image.shape[1] <= crop[0] and image.shape[2] <= crop[1]
            seg = sample.gt_sem_seg.data
            assert seg.shape[-2:] == image.shape[-2:]
            values = set(seg.unique().tolist())
            assert values <= set(range(NUM_CLASSES)) | {255}  # reduce_zero_label: 0 -> 255
        data = MODELS.build(test_cfg.model.data_preprocessor)(batch, training=True)
        assert tuple(data["inputs"].shape) == (test_cfg.images_per_rank, 3, *crop)
        assert all(tuple(s.gt_sem_seg.data.shape[-2:]) == crop for s in data["data_samples"])


def _cfg(root):
    from swinkit.config import load_config
    return load_config("test", root)


def _corrupt(root, index, kind):
    img = sorted((root / "images" / "training").glob("*.jpg"))[index]
    seg = root / "annotations" / "training" / (img.stem + ".png")
    if kind == "truncated":
        img.write_bytes(img.read_bytes()[:200])
    elif kind == "garbage":
        img.write_bytes(b"not a jpeg at all" * 10)
    elif kind == "empty":
        img.write_bytes(b"")
    elif kind == "missing_mask":
        seg.unlink()
    elif kind == "size_mismatch":
        cv2.imwrite(str(seg), np.ones((10, 12), np.uint8))
    return img, seg


@pytest.mark.parametrize("kind, reason", [
    ("truncated", "image could not be decoded"), ("garbage", "image could not be decoded"),
    ("empty", "file is empty"), ("missing_mask", "file is missing"),
    ("size_mismatch", "label map is 12x10 but image")])
def test_bad_sample_names_file_and_index(data_copy, kind, reason):
    img, seg = _corrupt(data_copy, 5, kind)
    dataset = build_dataset(_cfg(data_copy))
    index = next(i for i in range(len(dataset))
                 if dataset.get_data_info(i)["img_path"] == str(img))
    with pytest.raises(CorruptSampleError, match=reason) as info:
        dataset[index]
    assert info.value.index == index
    assert info.value.path in (str(img), str(seg))


def test_verify_data_names_every_bad_file(data_copy):
    bad_img, _ = _corrupt(data_copy, 1, "truncated")
    _, bad_seg = _corrupt(data_copy, 6, "size_mismatch")
    report = verify_data(data_copy, progress=None)
    assert report.checked == 10 and not report.ok
    assert {p.path for p in report.problems} == {str(bad_img), str(bad_seg)}
    assert {p.index for p in report.problems} == {1, 6}


def test_verify_data_passes_a_clean_root(data_root):
    report = verify_data(data_root, progress=None)
    assert report.ok and report.checked == 10


def test_missing_or_empty_root_says_how_to_make_data(tmp_path):
    with pytest.raises(DataError, match="does not exist: make the synthetic set"):
        check_data_root(tmp_path / "nope")
    (tmp_path / "images" / "training").mkdir(parents=True)
    with pytest.raises(DataError, match="no files in images/training"):
        check_data_root(tmp_path)


def test_too_few_images_for_the_world_size(test_cfg):
    with pytest.raises(DataError, match="cannot fill one batch"):
        build_loader(test_cfg, world_size=8, workers=0)


class _TimedItems:
    """A stand-in dataset: item i says when it was loaded (perf_counter is CLOCK_MONOTONIC,
    one clock for every process of the host, loader workers included)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import time
        return {"index": i, "loaded_at": time.perf_counter()}


def test_endless_sampler_covers_each_shard_once_per_pass_and_reshuffles():
    """8 items, 2 ranks, batches of 2: every pass gives each rank 4 items, the ranks' items are
    disjoint and together all 8, pass 0 is DistributedSampler's epoch 0, passes differ."""
    from itertools import islice

    from torch.utils.data import DistributedSampler

    from swinkit.data.loader import EndlessShardSampler
    data = _TimedItems(8)
    streams = {r: list(islice(iter(EndlessShardSampler(data, 2, r, seed=0, batch_size=2)), 12))
               for r in (0, 1)}
    for k in range(3):
        passes = {r: streams[r][4 * k:4 * (k + 1)] for r in (0, 1)}
        assert sorted(passes[0] + passes[1]) == list(range(8)), passes
    reference = DistributedSampler(data, num_replicas=2, rank=0, shuffle=True, seed=0, drop_last=True)
    reference.set_epoch(0)
    assert streams[0][:4] == list(reference)
    assert streams[0][:4] != streams[0][4:8] or streams[0][4:8] != streams[0][8:12]


def test_epoch_boundary_does_not_restart_the_loader(test_cfg):
    """A consumer slower than its loader worker (0.2 s per batch): every batch, the first of
    each new pass over the 8 items included, was loaded before the consumer asked for it.
    A loader restarted at each epoch loses its prefetch and loads that batch only on request."""
    import time

    from swinkit.data.loader import batches
    loader = build_loader(test_cfg, dataset=_TimedItems(8), workers=1, timeout_s=60)
    stream = batches(loader)
    next(stream)                                    # the worker starts up
    late = []
    for step in range(1, 12):                       # passes of 4 batches: boundaries at 4 and 8
        time.sleep(0.2)
        asked = time.perf_counter()
        batch = next(stream)
        if max(batch["loaded_at"]) > asked:          # pseudo_collate: a dict of lists
            late.append(step)
    assert late == [], f"batches {late} were loaded only when asked for (epoch restart)"


def test_loader_workers_beyond_the_cores_are_skipped_with_the_reason(monkeypatch):
    """Loaders x max(workers, 1) processes decoding at once, against the cores: on 2 cores
    1 x 2 fits, 2 x 1 fits, 2 x 2 and 1 x 4 do not; 2 x 0 (the ranks decode) fits."""
    from swinkit.components import loader_throughput as lt
    monkeypatch.delenv("SWINKIT_OVERSUBSCRIBE", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    fits = {(ws, w): lt.workers_oversubscribe(ws, w) is None
            for ws in (1, 2) for w in (0, 1, 2, 4)}
    assert fits == {(1, 0): True, (1, 1): True, (1, 2): True, (1, 4): False,
                    (2, 0): True, (2, 1): True, (2, 2): False, (2, 4): False}
    assert "2 loaders x 2 workers need 4 CPU cores; this machine has 2" in lt.workers_oversubscribe(2, 2)
    monkeypatch.setenv("SWINKIT_OVERSUBSCRIBE", "1")
    assert lt.workers_oversubscribe(2, 4) is None
