# The same family scaled to about a second per iteration on 2 CPU cores (1 thread per rank):
# a narrow, shallow SwinV2 at 256x256 crops, 2 images per rank.
_base_ = ['./_base_/upernet_swinv2_ade20k.py']
preset = 'cpu'
device = 'cpu'
crop_size = (256, 256)
resize_scale = (1024, 256)
images_per_rank = 2
loader_workers = 1
warmup_iters = 5
model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dim=32, depths=(2, 2, 2, 2), num_heads=(1, 2, 4, 8)),
                  window_size=8, pretrained_window_sizes=0, drop_path_rate=0.1),
    decode_head=dict(in_channels=[32, 64, 128, 256], channels=64),
    auxiliary_head=dict(in_channels=128, channels=32))
optim_wrapper = dict(optimizer=dict(lr=5e-4))
