"""The held-out loss (and mIoU) of the model on the validation split, shared out over the ranks.

Each rank evaluates every N-th validation image (rank r: images r, r + N, ...), up to
:data:`EVAL_BATCH` per forward, and the ranks add up their sums in one all-reduce, so the figure
is the same mean over the same images at every world size (every image is resized to the crop,
so a batch's mean loss is the mean of its images' losses). The images are decoded once per
launch and kept.

The held-out loss is the decode head's cross-entropy (MMSeg's ``loss_ce`` of ``UPerHead``, the
head whose output is the segmentation); the auxiliary head, which only helps training, is left
out. The mIoU is MMSeg's definition (``IoUMetric``: per class intersection / union summed over
the images, classes that never occur left out of the mean), in percent.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

IGNORE_INDEX = 255  # ADE20K's 'other' after reduce_zero_label, as MMSeg's heads ignore it
EVAL_BATCH = 8      # images per evaluation forward (batch norm uses its running statistics)


@dataclass(frozen=True)
class HeldOutScore:
    loss: float          # mean decode-head cross-entropy per image
    miou_pct: float      # mean IoU over the classes present, percent (NaN: none present)
    images: int          # images evaluated, over all ranks


class HeldOut:
    """This rank's share of the validation split, decoded once.

    Args:
        cfg: the run's config (data root, crop size, classes).
        rank, world: this rank and the number of ranks sharing the split.
    """

    def __init__(self, cfg, rank: int, world: int):
        from mmengine.dataset import pseudo_collate

        from swinkit.data.validation import build_validation_dataset
        dataset = build_validation_dataset(cfg)
        self.total = len(dataset)
        mine = list(range(rank, self.total, world))
        self.batches = [pseudo_collate([dataset[i] for i in mine[k:k + EVAL_BATCH]])
                        for k in range(0, len(mine), EVAL_BATCH)]
        self.num_classes = cfg.num_classes

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, group=None) -> HeldOutScore:
        """Score ``model`` (the segmentor, not its DDP wrapper) in eval mode; every rank of
        ``group`` must call it (one all-reduce). Returns the same score on every rank."""
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        # loss sum, images, then per class: intersection, union
        sums = torch.zeros(2 + 2 * self.num_classes, dtype=torch.float64, device=device)
        try:
            for batch in self.batches:
                sums += self._batch(model, batch)
        finally:
            model.train(was_training)
        if dist.is_initialized():
            dist.all_reduce(sums, group=group)
        sums = sums.cpu()
        c = self.num_classes
        union = sums[2 + c:]
        present = union > 0
        iou = sums[2:2 + c][present] / union[present]
        miou = float(iou.mean()) * 100 if present.any() else float("nan")
        return HeldOutScore(float(sums[0] / sums[1]), miou, int(sums[1]))

    def _batch(self, model, batch) -> torch.Tensor:
        """(loss sum, images, intersection per class, union per class) of one batch of B
        images: (2 + 2C,)."""
        from mmseg.evaluation.metrics import IoUMetric
        data = model.data_preprocessor(batch, training=False)
        samples = data["data_samples"]
        logits = model.decode_head(model.extract_feat(data["inputs"]))  # (B, C, H/4, W/4)
        loss = model.decode_head.loss_by_feat(logits, samples)["loss_ce"]  # mean over B
        labels = torch.stack([s.gt_sem_seg.data.squeeze(0) for s in samples])  # (B, H, W)
        full = F.interpolate(logits, size=labels.shape[1:], mode="bilinear",
                             align_corners=model.decode_head.align_corners)
        # histograms add up over pixels: the batch's at once is the sum of its images'
        inter, union, _, _ = IoUMetric.intersect_and_union(full.argmax(dim=1), labels,
                                                           self.num_classes, IGNORE_INDEX)
        n = torch.tensor([float(len(samples))], dtype=torch.float64)
        row = torch.cat([loss.detach().double().cpu().view(1) * n, n, inter.double(),
                         union.double()])
        return row.to(logits.device)
