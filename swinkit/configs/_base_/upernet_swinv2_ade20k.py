# UperNet + SwinV2 on ADE20K: the thesis's workload, laid out as MMSeg's UperNet-Swin configs.
#
# Knobs a preset overrides: backbone (arch, window_size), head widths, crop_size, resize_scale,
# images_per_rank, loader_workers, device. The crop-dependent parts of the pipeline
# (RandomResize scale, RandomCrop size, data_preprocessor.size) and data_root are filled in by
# swinkit.config.load_config from crop_size, resize_scale and the chosen data root, so a preset
# states each number once.
crop_size = (512, 512)
resize_scale = (2048, 512)
images_per_rank = 8
loader_workers = 4
num_classes = 150
device = 'cuda'
base_iters = 160000          # thesis Table 3: 160K iterations at 1 GPU, 160K/N at N GPUs
warmup_iters = 1500
# Measured iterations per launch for tools/attribute.py --run (its --iters default): enough
# that each launch's median iteration holds still (see the presets that override it).
measured_iters = 10
data_root = ''
skip_bad_samples = 0         # >0: replace up to this many bad samples in a row, and record them

norm_cfg = dict(type='SyncBN', requires_grad=True)   # CPU runs get BN (SyncBN needs CUDA)
# True: CPU runs get SyncBN's CPU stand-in instead of BN (same module type, hooks and
# collectives over gloo), to exercise the GPU presets' SyncBN paths without a GPU
cpu_sync_bn = False
# The training precision: fp32, tf32, bf16 or fp16 (swinkit/precision.py; docs/precision.md).
# fp32 by default, the thesis's own, so that the tracked history stays comparable over commits;
# GPU users train bf16: --precision bf16, or --cfg-options precision=bf16.
precision = 'fp32'
# The cheap GPU remedies users reach for beside it, off by default (swinkit/model/remedies.py):
# the heads' convolutions in channels_last, one fused (GPU) or foreach (CPU) AdamW over the
# parameter groups merged, cuDNN's autotuner.
channels_last_heads = False
fused_adamw = False
cudnn_benchmark = False
# True: host-to-device batch copies are asynchronous (with pinned loader memory they overlap)
non_blocking_copy = False
data_preprocessor = dict(
    type='SegDataPreProcessor',
    mean=[123.675, 116.28, 103.53],
    std=[58.395, 57.12, 57.375],
    bgr_to_rgb=True,
    pad_val=0,
    seg_pad_val=255,
    size=crop_size)
model = dict(
    type='EncoderDecoder',
    data_preprocessor=data_preprocessor,
    backbone=dict(
        type='SwinV2',
        arch='B',
        window_size=16,
        pretrained_window_sizes=(12, 12, 12, 6),
        drop_path_rate=0.3,
        out_indices=(0, 1, 2, 3),
        with_cp=False),
    decode_head=dict(
        type='UPerHead',
        in_channels=[128, 256, 512, 1024],
        in_index=[0, 1, 2, 3],
        pool_scales=(1, 2, 3, 6),
        channels=512,
        dropout_ratio=0.1,
        num_classes=num_classes,
        norm_cfg=norm_cfg,
        align_corners=False,
        loss_decode=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0)),
    auxiliary_head=dict(
        type='FCNHead',
        in_channels=512,
        in_index=2,
        channels=256,
        num_convs=1,
        concat_input=False,
        dropout_ratio=0.1,
        num_classes=num_classes,
        norm_cfg=norm_cfg,
        align_corners=False,
        loss_decode=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=0.4)),
    train_cfg=dict(),
    test_cfg=dict(mode='whole'))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),   # reduce_zero_label comes from ADE20KDataset (True)
    dict(type='RandomResize', scale=resize_scale, ratio_range=(0.5, 2.0), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
train_dataset = dict(
    type='ADE20KDataset',
    data_root=data_root,
    data_prefix=dict(img_path='images/training', seg_map_path='annotations/training'),
    pipeline=train_pipeline)

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(custom_keys={
        'logit_scale': dict(decay_mult=0.),
        'cpb_mlp': dict(decay_mult=0.),
        'norm': dict(decay_mult=0.)}))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=warmup_iters),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=warmup_iters, end=base_iters,
         by_epoch=False),
]
