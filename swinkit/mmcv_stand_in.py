"""A stand-in for mmcv's compiled extension, ``mmcv._ext``, where none is importable.

swinkit calls no compiled mmcv op. It needs ``mmcv.ops`` to import only because
MMSegmentation 1.2.2 imports it at module level (``mmseg.models`` -> ``mmseg.utils`` ->
``mask_classification``: ``from mmcv.ops import point_sample``), and ``mmcv.ops`` loads
``mmcv._ext`` for every op it wraps. OpenMMLab's ``mmcv-lite`` is the same ``mmcv`` package
without that extension: with this stand-in, mmcv-lite imports like the full build, with no
compiler and for any torch, and every op called through it raises, naming the op.

The finder goes first on ``sys.meta_path`` and answers for ``mmcv._ext`` alone: it asks the
other finders, so a compiled ``mmcv._ext`` found anywhere on the path is used as it is; one
that is found but fails to load (built against another torch: "undefined symbol") is replaced
by the stand-in with a warning that says why; none found, the stand-in. swinkit's package
``__init__`` installs it, so every process that imports swinkit first (the CLI, spawned ranks,
loader workers started by spawn, asv's benchmark processes) has it before MMSegmentation loads.

Example:
    >>> import sys
    >>> install()  # idempotent, also beside the copy a .pth line installed
    >>> sum(_is_stand_in(f) for f in sys.meta_path)
    1

Standard library only: tools/setup_plan.py and asv's set-up read this package without torch.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings

NAME = "mmcv._ext"
FULL_MMCV = ("pip uninstall -y mmcv-lite && pip install --no-build-isolation mmcv==2.1.0 "
             "(a C++ build against your torch; see docs/gpu-and-slurm.md, 'Full mmcv')")


class StandInOpError(RuntimeError):
    """An mmcv op was called through the stand-in: no compiled mmcv is installed here."""


class _StandInModule(types.ModuleType):
    """``mmcv._ext`` whose every attribute is an op that raises when called.

    ``mmcv.utils.ext_loader.load_ext`` only asserts that each op name exists (``hasattr``);
    ops are looked up by attribute when called, so an attribute for any name is enough.
    """

    STAND_IN = True

    def __init__(self, name: str):
        super().__init__(name)
        self.CALLED: list[str] = []   # every op called through it, in order

    def __getattr__(self, op: str):
        if op.startswith("__"):  # dunders (pickle, inspect, copy) are not ops
            raise AttributeError(op)

        def call(*args, **kwargs):
            self.CALLED.append(op)
            raise StandInOpError(
                f"mmcv op '{op}' was called, but this environment has no compiled mmcv "
                f"(mmcv-lite with swinkit's stand-in for mmcv._ext). To run configs that need "
                f"mmcv's ops: {FULL_MMCV}")

        call.__name__ = op
        return call


class _StandInLoader(importlib.abc.Loader):
    """Loads the real extension when one was found and loads; the stand-in otherwise."""

    def __init__(self, real: importlib.machinery.ModuleSpec | None):
        self.real = real
        self.used_real = False

    def create_module(self, spec):
        if self.real is not None:
            try:
                module = importlib.util.module_from_spec(self.real)
                self.real.loader.exec_module(module)
                self.used_real = True
                return module
            except ImportError as exc:  # an ABI mismatch with this torch, a missing library
                warnings.warn(f"mmcv's compiled extension {self.real.origin} does not load "
                              f"({exc}); using swinkit's stand-in, whose ops raise when called",
                              RuntimeWarning, stacklevel=2)
        return _StandInModule(spec.name)

    def exec_module(self, module):
        if self.used_real:
            module.__spec__ = self.real  # its origin, not the stand-in's
        else:
            module.__file__ = __file__


class StandInFinder(importlib.abc.MetaPathFinder):
    """Answers for ``mmcv._ext`` only, with what the other finders find, or the stand-in."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != NAME:
            return None
        real = None
        for finder in sys.meta_path:
            if _is_stand_in(finder) or not hasattr(finder, "find_spec"):
                continue
            real = finder.find_spec(fullname, path, target)
            if real is not None:
                break
        return importlib.util.spec_from_loader(fullname, _StandInLoader(real))


def _is_stand_in(finder) -> bool:
    """By name: the copy that tools/env_spec.py puts in site-packages (a ``.pth`` line installs
    it at start-up) is another module, so its finder is not an instance of this one's class."""
    return type(finder).__name__ == StandInFinder.__name__


def install() -> None:
    """Put the finder on ``sys.meta_path`` once, first (it defers to a compiled build that loads)."""
    if not any(_is_stand_in(f) for f in sys.meta_path):
        sys.meta_path.insert(0, StandInFinder())


def in_use() -> bool:
    """Whether the ``mmcv._ext`` loaded in this process is the stand-in (False if none loaded)."""
    return bool(getattr(sys.modules.get(NAME), "STAND_IN", False))


def called() -> list[str]:
    """The ops called through the stand-in in this process, in order (none loaded: [])."""
    return list(getattr(sys.modules.get(NAME), "CALLED", []) if in_use() else [])
