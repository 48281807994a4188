"""Query results as a text table a person reads: numbers right-aligned, integers with
thousands separators, floats rounded per column, never in e-notation, and as wide as the
terminal allows.

Each float column gets one number of decimals: enough for `SIGNIFICANT` digits of the
column's median magnitude (at most `MAX_DECIMALS`), with trailing zeros the whole column
shares dropped (down to one decimal, so a float still reads as one).  A table wider than
the terminal keeps its first and last columns and shows ``…`` for those between, as the
duckdb shell does; the footer says how many are not shown.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from decimal import Decimal

from kvtrace.sql._json_text import json_text

SIGNIFICANT = 4
MAX_DECIMALS = 12
MAX_CELL = 80  # characters of a text cell; longer ones end in "..."
GAP = "  "
ELIDED = "…"


def text_table(
    names: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    cut_at: int | None = None,
    width: int | None = None,
) -> str:
    """``rows`` under ``names`` as aligned text with a footer.

    ``cut_at``: the rows shown are the first ``cut_at`` of more (the footer says so);
    ``width``: the terminal's width in characters (None: as wide as the table is).
    """
    columns = [format_column([row[i] for row in rows]) for i in range(len(names))]
    numeric = [is_numeric for _, is_numeric in columns]
    lines = [list(names), *([cells[r] for cells, _ in columns] for r in range(len(rows)))]
    widths = [max(len(line[i]) for line in lines) for i in range(len(names))]
    lines.insert(1, ["-" * w for w in widths])
    shown = _fitting(widths, width)
    text = [
        GAP.join(
            ELIDED
            if i is None
            else line[i].rjust(widths[i])
            if numeric[i]
            else line[i].ljust(widths[i])
            for i in shown
        ).rstrip()
        for line in lines
    ]
    hidden = len(names) - sum(i is not None for i in shown)
    return "\n".join([*text, _footer(len(rows), cut_at, hidden)]) + "\n"


def _footer(count: int, cut_at: int | None, hidden: int) -> str:
    if cut_at is not None:
        text = f"the first {cut_at:,} rows; --format csv|json|parquet writes all"
    else:
        text = f"{count:,} row{'' if count == 1 else 's'}"
    if hidden:
        text += (
            f"; {hidden} column{'' if hidden == 1 else 's'} not shown (…): "
            "a wider terminal, fewer columns or --format csv"
        )
    return f"({text})"


def _fitting(widths: list[int], width: int | None) -> list[int | None]:
    """The columns to show, in order, None standing for the elided ones between: the
    first and last, then one more from each end in turn while the table fits."""
    every: list[int | None] = list(range(len(widths)))
    if width is None or len(widths) < 2 or _width(widths, every) <= width:
        return every
    left: list[int | None] = [0]
    right: list[int | None] = [len(widths) - 1]
    low, high, from_left = 1, len(widths) - 2, True
    while low <= high:
        trial = [*left, low, None, *right] if from_left else [*left, None, high, *right]
        if _width(widths, trial) > width:
            break
        if from_left:
            left.append(low)
            low += 1
        else:
            right.insert(0, high)
            high -= 1
        from_left = not from_left
    return [*left, None, *right]


def _width(widths: list[int], shown: list[int | None]) -> int:
    return sum(len(ELIDED) if i is None else widths[i] for i in shown) + len(GAP) * (len(shown) - 1)


def format_column(values: Sequence[object], null: str = "NULL") -> tuple[list[str], bool]:
    """A column's cells as text (``null`` for a missing value), and whether it is numeric
    (to be right-aligned): one number format for the whole column."""
    present = [v for v in values if v is not None]
    if present and all(_is_number(v) for v in present):
        if all(isinstance(v, int) or _integral_decimal(v) for v in present):
            return [null if v is None else f"{int(v):,}" for v in values], True  # type: ignore[call-overload]
        decimals = _decimals([float(v) for v in present])  # type: ignore[arg-type]
        return [null if v is None else _fixed(float(v), decimals) for v in values], True  # type: ignore[arg-type]
    return [null if v is None else _text(v) for v in values], False


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)


def _integral_decimal(value: object) -> bool:
    return isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value()


def _decimals(values: list[float]) -> int:
    """One number of decimals for a float column (see the module's docstring)."""
    magnitudes = [abs(v) for v in values if math.isfinite(v) and v != 0]
    if not magnitudes:
        return 1
    typical = statistics.median(magnitudes)
    decimals = min(MAX_DECIMALS, max(1, SIGNIFICANT - 1 - math.floor(math.log10(typical))))
    while decimals > 1 and all(
        _fixed(v, decimals).endswith("0") for v in values if math.isfinite(v)
    ):
        decimals -= 1
    return decimals


def _fixed(value: float, decimals: int) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:,.{decimals}f}"


def cell_text(value: object) -> str:
    """A value that is not a number, as a cell shows it: true or false, strict JSON for
    a list or struct, else its text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json_text(value) if isinstance(value, (dict, list)) else str(value)


def _text(value: object) -> str:
    text = cell_text(value)
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 3] + "..."
