"""Checks of single JSON values, for readers that build rows value by value.

A value that is not what its column holds, or that the column cannot hold as given (a
count beyond int64, a time beyond 2**53 microseconds), raises `BadValue` with one
sentence for the quarantine: nothing is wrapped, rounded or stored as infinity.
"""

from __future__ import annotations

import math
from typing import TypeGuard

INT64_LIMIT = 2**63
# units of time by their power of ten in seconds, as benchmark exports name them
_TIME_UNITS = {"s": 0, "sec": 0, "ms": -3, "us": -6, "ns": -9}
SECONDS_PER_UNIT = {unit: 10.0**power for unit, power in _TIME_UNITS.items()}
MILLISECONDS_PER_UNIT = {unit: 10.0 ** (power + 3) for unit, power in _TIME_UNITS.items()}
EXACT_LIMIT = 2.0**53  # magnitudes float64 holds exactly


class BadValue(ValueError):
    """A value its column cannot hold; the message says which and why."""


def is_positive_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is a JSON integer above 0 (``true`` is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def is_number(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is a JSON number (``true`` is not one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def whole_number(name: str, value: object, *, minimum: int | None = 0) -> int:
    """``value`` as an int64: a JSON integer (or a whole float) within range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadValue(f"{name} must be a whole number, got {value!r}"[:200])
    if isinstance(value, float) and not value.is_integer():
        raise BadValue(f"{name} must be a whole number, got {value!r}"[:200])
    if not -INT64_LIMIT <= value < INT64_LIMIT:
        raise BadValue(f"{name} is out of range: {value!r}"[:200])
    if minimum is not None and value < minimum:
        raise BadValue(f"{name} must be at least {minimum}, got {value!r}"[:200])
    return int(value)


def finite_number(
    name: str, value: object, *, minimum: float | None = None, limit: float = EXACT_LIMIT
) -> float:
    """``value`` as a float: a finite JSON number of magnitude at most ``limit``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadValue(f"{name} must be a number, got {value!r}"[:200])
    if abs(value) > limit or not math.isfinite(value):  # an int past a float: no overflow
        raise BadValue(f"{name} is out of range: {value!r}"[:200])
    if minimum is not None and value < minimum:
        raise BadValue(f"{name} must be at least {minimum:g}, got {value!r}"[:200])
    return float(value)
