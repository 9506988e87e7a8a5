"""swinkit: measure why data-parallel training of UperNet + SwinV2 scales the way it does."""
__version__ = "0.1.0"

from swinkit import mmcv_stand_in, quiet_libraries

# before anything imports MMSegmentation, which imports mmcv.ops, which loads mmcv._ext: with
# mmcv-lite (no compiled ops) the stand-in answers; a compiled mmcv that loads is used as is
mmcv_stand_in.install()
# and MMEngine, which MMSegmentation imports, imports DeepSpeed only where its engine runs
quiet_libraries.install()
