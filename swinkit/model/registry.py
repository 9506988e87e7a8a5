"""One place that makes MMSeg's registries the default scope, so config ``type`` names resolve
to MMSeg's classes (MMCV and MMEngine register transforms and preprocessors of the same names)."""


def use_mmseg_scope() -> None:
    from mmseg.utils import register_all_modules

    import swinkit.model.swinv2  # noqa: F401  registers SwinV2
    from swinkit.model.cpu_syncbn import register
    register()  # CpuSyncBN: SyncBN's CPU stand-in (config.py, cpu_sync_bn)
    register_all_modules(init_default_scope=True)
