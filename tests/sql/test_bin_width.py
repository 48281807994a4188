"""_bin_width: the smallest 1, 2 or 5 times a power of ten that covers a range in the bins."""

from __future__ import annotations

import math

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtrace.sql.catalog import library


@pytest.fixture(scope="module")
def con():
    con = duckdb.connect()
    con.execute(next(f.text for f in library() if f.name == "stats.sql"))
    return con


def _nice_widths(around: float) -> list[float]:
    """Every 1, 2 or 5 times a power of ten near ``around``, ascending."""
    exponent = math.floor(math.log10(around))
    return sorted(m * 10.0**e for e in range(exponent - 2, exponent + 3) for m in (1, 2, 5))


@given(
    lo=st.floats(min_value=-1e6, max_value=1e6),
    span=st.floats(min_value=1e-6, max_value=1e7),
    bins=st.integers(min_value=1, max_value=100),
)
def test_the_width_is_the_smallest_nice_one_that_covers_the_range(con, lo, span, bins):
    hi = lo + span
    if hi <= lo:
        return
    (width,) = con.execute("SELECT _bin_width(?, ?, ?)", [lo, hi, bins]).fetchone()
    needed = (hi - lo) / bins
    # a width within a rounding error (1e-9) of the one needed covers it, as the macro says
    smallest = next(w for w in _nice_widths(needed) if w * (1 + 1e-9) >= needed)
    assert width == pytest.approx(smallest, rel=1e-9)


def test_an_empty_range_has_width_one_and_nothing_has_none(con):
    assert con.execute("SELECT _bin_width(5, 5, 20), _bin_width(NULL, 1, 20)").fetchone() == (
        1.0,
        None,
    )
    exact = "SELECT _bin_width(0, 4, 20), _bin_width(0, 1, 10), _bin_width(0, 0.3, 3)"
    assert con.execute(exact).fetchone() == pytest.approx((0.2, 0.1, 0.1))
    # the worked example of the macro's header
    assert con.execute("SELECT _bin_width(0.057, 0.113, 20)").fetchone()[0] == pytest.approx(0.005)
