# A fraction of a second per iteration: for unit tests and CI only, not for measurements.
_base_ = ['./_base_/upernet_swinv2_ade20k.py']
preset = 'test'
device = 'cpu'
crop_size = (64, 64)
resize_scale = (256, 64)
images_per_rank = 2
loader_workers = 0
warmup_iters = 2
# A 0.1 s iteration on 2 shared cores moves by 5-10 % from one to the next: medians of 10
# iterations per launch differed by up to 6 %, and with 30 a launch's prediction error still
# wandered by 2-3 % from sampling alone; 100 (10 s of DDP steps per launch) held every launch
# of a series within 2.9 %.
measured_iters = 100
model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dim=16, depths=(2, 2, 2, 2), num_heads=(1, 1, 2, 2)),
                  window_size=4, pretrained_window_sizes=0, drop_path_rate=0.0),
    decode_head=dict(in_channels=[16, 32, 64, 128], channels=16, pool_scales=(1, 2)),
    auxiliary_head=dict(in_channels=64, channels=8))
optim_wrapper = dict(optimizer=dict(lr=1e-3))
