"""The text table: alignment, number formats and folding, checked against the values."""

from __future__ import annotations

import math
import re
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from kvtrace.sql.text_table import SIGNIFICANT, text_table


def _cells(text: str, names: list[str]) -> list[list[str]]:
    """Each body row's cells, cut at the column positions the rule line shows."""
    lines = text.splitlines()
    spans = [m.span() for m in re.finditer(r"-+|…", lines[1])]
    return [[line[a:b].strip() for a, b in spans] for line in lines[2:-1]]


def test_integers_get_separators_and_numbers_align_right():
    text = text_table(["name", "count"], [("a", 1222847), ("bb", 5), ("c", None)])
    lines = text.splitlines()
    assert lines[0] == "name      count"
    assert [line[-9:] for line in lines[2:5]] == ["1,222,847", "        5", "     NULL"]
    assert lines[2].startswith("a ") and lines[-1] == "(3 rows)"


def test_decimal_sums_print_as_integers_and_averages_with_their_decimals():
    text = text_table(["total", "mean"], [(Decimal("49510"), Decimal("33.68"))])
    assert _cells(text, ["total", "mean"]) == [["49,510", "33.68"]]


def test_a_float_column_shares_one_number_of_decimals_and_drops_shared_zeros():
    text = text_table(["x"], [(4.0,), (16.0,)])
    assert _cells(text, ["x"]) == [["4.0"], ["16.0"]]
    text = text_table(["x"], [(0.5,), (0.25,), (0.125,)])
    assert _cells(text, ["x"]) == [["0.500"], ["0.250"], ["0.125"]]


@given(
    st.lists(
        st.floats(min_value=-1e15, max_value=1e15, allow_nan=False).filter(
            lambda v: v == 0 or abs(v) > 1e-12
        ),
        min_size=1,
        max_size=20,
    )
)
def test_floats_never_use_e_notation_and_round_within_their_last_decimal(values):
    cells = [row[0] for row in _cells(text_table(["x"], [(v,) for v in values]), ["x"])]
    assert len({len(c.split(".")[1]) for c in cells}) == 1  # one format per column
    nonzero = sorted(abs(v) for v in values if v)
    median = (nonzero[(len(nonzero) - 1) // 2] + nonzero[len(nonzero) // 2]) / 2 if nonzero else 1.0
    # SIGNIFICANT digits of the column's median magnitude (at least one decimal)
    step = 10.0 ** -min(12, max(1, SIGNIFICANT - 1 - math.floor(math.log10(median))))
    for cell, value in zip(cells, values, strict=True):
        assert "e" not in cell.lower()
        assert abs(float(cell.replace(",", "")) - value) <= step / 2 + abs(value) * 1e-15


def test_nan_infinities_text_and_nested_values():
    text = text_table(
        ["v", "s"],
        [(math.nan, {"count": Decimal("16738"), "mean": 5.5}), (math.inf, "x" * 100)],
    )
    rows = _cells(text, ["v", "s"])
    assert [r[0] for r in rows] == ["NaN", "inf"]
    assert rows[0][1] == '{"count": 16738, "mean": 5.5}'  # a count stays a number
    assert rows[1][1] == "x" * 77 + "..."


def test_a_wide_table_keeps_its_ends_and_says_how_many_columns_it_hides():
    names = [f"column_{i}" for i in range(20)]
    text = text_table(names, [tuple(range(20))], width=80)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines[:-1])
    header = lines[0].split()
    assert header[0] == "column_0" and header[-1] == "column_19" and "…" in header
    shown = len(header) - 1
    assert lines[-1] == (
        f"(1 row; {20 - shown} columns not shown (…): a wider terminal, fewer columns or "
        "--format csv)"
    )
    assert text_table(names, [tuple(range(20))]).count("…") == 0  # no width: every column


def test_the_footer_of_a_cut_result_and_an_empty_one():
    assert text_table(["a"], [(1,)], cut_at=1).splitlines()[-1] == (
        "(the first 1 rows; --format csv|json|parquet writes all)"
    )
    assert text_table(["a", "b"], []).splitlines() == ["a  b", "-  -", "(0 rows)"]
