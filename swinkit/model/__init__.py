"""The workload's model: the SwinV2 backbone (registered in MMSeg) and the UperNet segmentor.

    swinv2_blocks.py  SwinV2's blocks: scaled cosine attention, log-spaced position bias, ...
    swinv2.py         the backbone (and the ImageNet classifier used to check its counts)
    segmentor.py      UperNet + SwinV2 (MMSeg EncoderDecoder) and its optimizer, from a preset
    registry.py       MMSeg's registries as the default scope; swinkit's types registered
    cpu_syncbn.py     SyncBN's CPU stand-in (cpu_sync_bn): the GPU presets' SyncBN on gloo
    counts.py         parameter and FLOP counts
    precision.py      a training precision applied: TF32 switches, autocast, loss scaling
    remedies.py       the cheap GPU remedies: channels_last heads, merged fused AdamW
"""
