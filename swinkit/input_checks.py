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


def int_list(name: str, text: str, minimum: int = 1) -> list[int]:
    """A comma-separated list of integers >= ``minimum``, sorted, each once (the one parser of
    ``--world-sizes`` and ``--grad-accum`` style options).

    >>> int_list("--world-sizes", "2,1, 2")
    [1, 2]
    >>> int_list("--world-sizes", "1,x")
    Traceback (most recent call last):
    ...
    ValueError: --world-sizes must be integers >= 1 joined by commas, got '1,x'
    """
    try:
        values = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        values = []
    if not values or values[0] < minimum:
        raise ValueError(f"{name} must be integers >= {minimum} joined by commas, got {text!r}")
    return values
