"""Input checks shared by every configuration boundary (presets, launches, run specs, CLIs).

Explicit ``if``/``raise``, never ``assert``, so they hold under ``python -O``; each error names
the field and the bad value, and says what was expected.
"""
from __future__ import annotations

from typing import Any


def check_int(name: str, value: Any, minimum: int = 1) -> int:
    """``value`` if it is an int >= ``minimum`` (bools are not ints here), else ValueError.

    Example:
        >>> check_int("world_size", 0)
        Traceback (most recent call last):
        ...
        ValueError: world_size must be an integer >= 1, got 0
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def check_positive_number(name: str, value: Any) -> float:
    """``value`` as a float if it is a number > 0, else ValueError naming the field."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")
    return float(value)
