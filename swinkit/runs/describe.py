"""The workload as data: what a preset trains and what one step of it costs."""
from __future__ import annotations

from dataclasses import asdict

from swinkit.config import workload
from swinkit.model.counts import count_params, segmentor_forward_macs
from swinkit.model.segmentor import build_segmentor


def describe(cfg) -> dict:
    """Parameter counts, forward GMACs per image, crop, batch and gradient bytes of a preset."""
    model = build_segmentor(cfg)
    total = count_params(model)
    trainable = count_params(model, trainable_only=True)
    macs = segmentor_forward_macs(model, tuple(cfg.crop_size))
    info = asdict(workload(cfg))
    info.update(
        backbone_params=count_params(model.backbone),
        decode_head_params=count_params(model.decode_head),
        auxiliary_head_params=count_params(model.auxiliary_head),
        total_params=total,
        trainable_params=trainable,
        forward_gmacs_per_image=macs / 1e9,
        forward_gmacs_per_rank_step=macs * cfg.images_per_rank / 1e9,
        gradient_bytes_fp32=4 * trainable,
    )
    return info
