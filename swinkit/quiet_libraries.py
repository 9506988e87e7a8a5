"""DeepSpeed only where the DeepSpeed engine runs, and its chatter off stdout where it does.

MMEngine imports DeepSpeed whenever it is installed: MMSegmentation's models import ``mmcv.cnn``,
which imports ``mmengine.runner``, which imports ``mmengine._strategy``, whose ``deepspeed``
module does ``try: import deepspeed``. So every swinkit process that builds the model (every
command, every rank, whatever its engine) would pay DeepSpeed's import (a third of a second
after torch on these machines) and print its "Setting accelerator to CPU" warning, which on
stdout breaks ``swinkit describe --json``. swinkit uses none of MMEngine's strategies:
:func:`install` puts a finder first on ``sys.meta_path`` that loads that one MMEngine module
with ``deepspeed`` held off (its ``except ImportError`` path, as where DeepSpeed is not
installed), unless DeepSpeed was imported already. ``swinkit/__init__.py`` installs it, so it
holds in every process that imports swinkit first.

The DeepSpeed engine imports it through :func:`import_deepspeed`: under
``redirect_stdout(sys.stderr)`` (the import-time warning), with its logger's handlers then
pointed at stderr (everything it says later); the messages are still shown, on the other stream.

Standard library only: imported by ``swinkit/__init__.py``, which torch-free processes import.
"""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import logging
import sys

HELD_OFF = "mmengine._strategy.deepspeed"   # the module whose import of DeepSpeed is held off


class _WithoutDeepSpeed(importlib.abc.Loader):
    """The real loader of :data:`HELD_OFF`, run with ``import deepspeed`` raising ImportError."""

    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):  # get_source, get_code, ...: the real loader's
        return getattr(self.real, name)

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        if "deepspeed" in sys.modules:  # imported already (a DeepSpeed rank): nothing to save
            return self.real.exec_module(module)
        sys.modules["deepspeed"] = None   # the import system's "not importable" marker
        try:
            self.real.exec_module(module)
        finally:
            if sys.modules.get("deepspeed", 0) is None:
                del sys.modules["deepspeed"]


class _HoldOffFinder(importlib.abc.MetaPathFinder):
    """Answers for :data:`HELD_OFF` only: the spec the other finders give, its loader wrapped."""

    HOLDS_OFF_DEEPSPEED = True

    def find_spec(self, fullname, path=None, target=None):
        if fullname != HELD_OFF:
            return None
        for finder in sys.meta_path:
            if finder is self or getattr(finder, "HOLDS_OFF_DEEPSPEED", False):
                continue
            spec = getattr(finder, "find_spec", lambda *a: None)(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _WithoutDeepSpeed(spec.loader)
                return spec
        return None


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (idempotent)."""
    if not any(getattr(f, "HOLDS_OFF_DEEPSPEED", False) for f in sys.meta_path):
        sys.meta_path.insert(0, _HoldOffFinder())


def import_deepspeed():
    """``import deepspeed`` with its chatter on stderr (see the module doc); the module."""
    with contextlib.redirect_stdout(sys.stderr):
        import deepspeed  # warns at import ("Setting accelerator to CPU")
    for handler in logging.getLogger("DeepSpeed").handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream in (
                sys.stdout, sys.__stdout__):
            handler.setStream(sys.stderr)
    return deepspeed
