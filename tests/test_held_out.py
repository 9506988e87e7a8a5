"""The held-out score ``swinkit converge`` stops on: the validation split through a
deterministic pipeline, its loss and mIoU recomputed here by hand, the same whatever the
evaluation batch."""
import math

import pytest
import torch
import torch.nn.functional as F

from swinkit.data.errors import DataError
from swinkit.data.validation import build_validation_dataset, check_validation_split


def test_validation_split_is_resized_to_the_crop_with_its_labels(test_cfg):
    """The session's set has 2 validation images of ADE-like sizes (e.g. 512x683); each comes
    out at the test preset's 64x64 crop, labels too, the same on a second read."""
    dataset = build_validation_dataset(test_cfg)
    assert len(dataset) == 2
    first, again = dataset[0], dataset[0]
    assert tuple(first["inputs"].shape) == (3, 64, 64)
    assert tuple(first["data_samples"].gt_sem_seg.data.shape) == (1, 64, 64)
    assert torch.equal(first["inputs"], again["inputs"])  # no random step


def test_a_root_without_a_validation_split_is_named(data_copy):
    import shutil
    shutil.rmtree(data_copy / "images" / "validation")
    with pytest.raises(DataError, match="no files in images/validation"):
        check_validation_split(data_copy)


def _by_hand(model, dataset, num_classes):
    """Mean per-image cross-entropy (ignored pixels count as 0 over all pixels, as MMSeg's
    loss with avg_non_ignore False) and mIoU from per-class pixel counts, image by image."""
    losses, inter, union = [], torch.zeros(num_classes), torch.zeros(num_classes)
    model.eval()
    with torch.no_grad():
        for i in range(len(dataset)):
            data = model.data_preprocessor({"inputs": [dataset[i]["inputs"]],
                                            "data_samples": [dataset[i]["data_samples"]]}, False)
            logits = model.decode_head(model.extract_feat(data["inputs"]))
            label = data["data_samples"][0].gt_sem_seg.data[0].long()  # (H, W)
            up = F.interpolate(logits, size=label.shape, mode="bilinear", align_corners=False)
            per_pixel = F.cross_entropy(up, label[None], ignore_index=255, reduction="none")
            losses.append(float(per_pixel.sum() / per_pixel.numel()))
            pred, keep = up.argmax(1)[0], label != 255
            for c in range(num_classes):
                p, t = (pred == c) & keep, (label == c) & keep
                inter[c] += (p & t).sum()
                union[c] += (p | t).sum()
    present = union > 0
    return sum(losses) / len(losses), float((inter[present] / union[present]).mean()) * 100


@pytest.mark.parametrize("eval_batch", [1, 8])
def test_held_out_score_matches_a_computation_by_hand(test_cfg, one_rank_group, monkeypatch,
                                                      eval_batch):
    """A freshly built segmentor on the 2 validation images: the loss and mIoU the evaluation
    reports equal the ones computed image by image above, with 1 or 8 images per forward."""
    from swinkit.model.segmentor import build_segmentor
    from swinkit.rank import held_out
    monkeypatch.setattr(held_out, "EVAL_BATCH", eval_batch)
    torch.manual_seed(0)
    model = build_segmentor(test_cfg)
    score = held_out.HeldOut(test_cfg, 0, 1).evaluate(model)
    assert model.training  # put back as it was
    loss, miou = _by_hand(model, build_validation_dataset(test_cfg), test_cfg.num_classes)
    assert score.images == 2
    assert score.loss == pytest.approx(loss, rel=1e-5)
    assert score.miou_pct == pytest.approx(miou, rel=1e-5) and not math.isnan(miou)
