"""swinkit: measure why data-parallel training of UperNet + SwinV2 scales the way it does."""
__version__ = "0.1.0"
