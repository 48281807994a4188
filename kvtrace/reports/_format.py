"""How the reports write numbers, in tables and on chart axes alike.

One rule for counts, ratios, times and bytes:

- A column of whole numbers (counts, blocks, tokens, bytes, or floats with nothing after
  the point) is written whole, with thousands separators: ``100``, ``60,000``, ``2,871``.
- In any other column each number keeps three significant digits, and every digit before
  the point: ``0.0570``, ``0.110``, ``2.00``, ``31.4``, ``1,548``; never in e-notation.
- A share (0 to 1) on an axis is a percentage with no trailing zeros (``40%``,
  ``0.5%``, never ``0.000000%``); in a table it is a number by the rule above, its
  column name saying it is a share.
- Times and bytes are numbers in the unit their column or axis title names (``_ms``,
  ``µs``, ``GB/s``), by the same rule.

Significant digits are counted number by number, so a row of statistics (min, p50,
max) reads with the same precision in every column.  The axis formats below are d3-format
strings that follow the rule; an axis of plain numbers keeps Vega's own ticks, which are
round numbers, except where all its values may be one (then Vega's ticks read
``0.900990``): such an axis starts at zero or takes `NUMBER_AXIS`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from decimal import Decimal

SIGNIFICANT = 3

COUNT_AXIS = ",d"  # whole numbers with thousands separators: 60,000
SHARE_AXIS = "~%"  # a share of 0 to 1 as a percentage, no trailing zeros: 40%, 0.5%
NUMBER_AXIS = ",.3~r"  # three significant digits, no e-notation: 0.901, 1,550


def is_number(value: object) -> bool:
    """Whether ``value`` is a number a table right-aligns (booleans are not)."""
    return isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)


def number_text(value: int | float | Decimal) -> str:
    """``value`` by the rule for a column that is not all whole numbers (module
    docstring): an int whole, any other number to three significant digits; NaN and
    infinities as ``NaN``, ``inf`` and ``-inf``."""
    if isinstance(value, int):
        return f"{value:,}"
    number = float(value)
    if not math.isfinite(number):
        return "NaN" if math.isnan(number) else ("inf" if number > 0 else "-inf")
    if number == 0:
        return "0"
    digits_before_point = math.floor(math.log10(abs(number))) + 1
    if abs(round(number, SIGNIFICANT - digits_before_point)) >= 10.0**digits_before_point:
        digits_before_point += 1  # 0.0009999 rounds up to 0.00100, 99.96 to 100
    decimals = max(SIGNIFICANT - digits_before_point, 0)
    return f"{number:,.{decimals}f}"


def count_text(value: int | float | Decimal) -> str:
    """A whole number with thousands separators: ``60,000``."""
    return f"{int(value):,}"


def number_column(values: Sequence[object], null: str = "") -> tuple[list[str], bool]:
    """A table column's cells when every present value is a number (``null`` for a
    missing one), and True; otherwise no cells and False."""
    present = [v for v in values if v is not None]
    if not present or not all(is_number(v) for v in present):
        return [], False
    whole = all(_is_whole(v) for v in present)
    write = count_text if whole else number_text
    return [null if v is None else write(v) for v in values], True  # type: ignore[arg-type]


def _is_whole(value: object) -> bool:
    if isinstance(value, int):
        return True
    number = float(value)  # type: ignore[arg-type]
    return math.isfinite(number) and number == int(number)


_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple:
    """A sort key that orders the numbers inside ``text`` by value: ``stream 7`` before
    ``stream 23`` before ``stream 203``."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part)
        for part in _DIGITS.split(text)
        if part
    )


def natural_order(values: Sequence[object]) -> list[str]:
    """The distinct ``values`` as text, in `natural_key` order: an explicit sort for a
    chart's nominal axis or facet whose labels hold numbers."""
    return sorted({str(v) for v in values if v is not None}, key=natural_key)
