"""Which Python and torch releases swinkit supports and which it is tested with: the one place.

swinkit runs on the torch it finds (its users arrive with their own CUDA build), from
``TORCH_MIN`` up. Below that it refuses; above the newest tested release it warns and runs.
``TORCH_REFERENCE`` is what CI and asv's history environments install, so results tracked
over commits stay comparable.

Example:
    >>> check_python((3, 12, 3))
    >>> check_torch("2.11.0+cu130") is None, check_torch("2.13.0") is None
    (True, True)
    >>> print(check_torch("2.15.0"))
    torch 2.15.0 is newer than the newest release swinkit is tested with (2.14.1): it should work; report what does not
    >>> check_torch("2.4.1+cu121")
    Traceback (most recent call last):
    ...
    ValueError: torch 2.4.1+cu121 is older than swinkit supports (2.5 or newer): upgrade torch in that interpreter, or give swinkit's environment its own (SWINKIT_REUSE_TORCH=0 bash tools/setup.sh installs torch 2.13.0)

Standard library only: tools/setup_plan.py reads it before anything is installed.
"""
from __future__ import annotations

import re

PYTHONS = ((3, 11), (3, 12), (3, 13))
TORCH_MIN = (2, 5)
TORCH_REFERENCE = "2.13.0"
# release -> where it runs; docs/gpu-and-slurm.md and README quote this table
TORCH_TESTED = {
    "2.5.1": "CI's compatibility leg (Python 3.12, CPU): set-up, smoke tests, one DDP launch",
    "2.11.0": "the GPU check on one H100 and one H200 (Python 3.12.3, CUDA 13.0)",
    "2.13.0": "CI (Python 3.11, CPU), asv's history environments, the reference",
    "2.14.1": "`.ci/compat` with Python 3.13 (SWINKIT_COMPAT_VERSION=3.13), run by hand",
}


def release(version: str) -> tuple[int, ...]:
    """``2.11.0+cu130`` -> (2, 11, 0); pre-releases keep their numeric part (``2.14.0a0``).

    >>> release("2.11.0+cu130"), release("2.14.0a0+git1234"), release("2.5")
    ((2, 11, 0), (2, 14, 0), (2, 5))
    """
    match = re.match(r"(\d+(?:\.\d+)*)", version)
    if not match:
        raise ValueError(f"not a torch version: {version!r}")
    return tuple(int(p) for p in match.group(1).split("."))


def check_python(version_info: tuple[int, ...]) -> None:
    """ValueError naming the version found and what to do, outside 3.11-3.13."""
    found = tuple(version_info[:2])
    if found not in PYTHONS:
        names = ", ".join(".".join(map(str, p)) for p in PYTHONS)
        raise ValueError(
            f"Python {'.'.join(map(str, version_info[:3]))} is not supported (swinkit runs on "
            f"Python {names}): run the set-up with one of those, e.g. PYTHON=python3.12 bash "
            "tools/setup.sh")


def check_torch(version: str) -> str | None:
    """None for a supported, tested-range torch; a warning above the newest tested; a
    ValueError below ``TORCH_MIN``."""
    found = release(version)
    if found[:2] < TORCH_MIN:
        raise ValueError(
            f"torch {version} is older than swinkit supports ({'.'.join(map(str, TORCH_MIN))} "
            "or newer): upgrade torch in that interpreter, or give swinkit's environment its "
            f"own (SWINKIT_REUSE_TORCH=0 bash tools/setup.sh installs torch {TORCH_REFERENCE})")
    newest = max(TORCH_TESTED, key=release)
    if found[:2] > release(newest)[:2]:
        return (f"torch {version} is newer than the newest release swinkit is tested with "
                f"({newest}): it should work; report what does not")
    return None
