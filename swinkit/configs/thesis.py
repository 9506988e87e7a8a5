# The thesis's run: UperNet + SwinV2-B, 512x512 crops, 8 images per rank, SyncBN heads, GPU.
_base_ = ['./_base_/upernet_swinv2_ade20k.py']
preset = 'thesis'
