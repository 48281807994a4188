"""The number checks every reader shares."""

from __future__ import annotations

import pytest

from kvtrace.ingest._values import BadValue, finite_number


@pytest.mark.parametrize("value", [10**400, -(10**400), float("inf"), float("nan")])
def test_a_number_past_a_float_is_out_of_range_not_a_crash(value):
    with pytest.raises(BadValue, match="ts is out of range"):
        finite_number("ts", value)


def test_a_number_in_range_comes_back_as_a_float():
    assert finite_number("ts", 12) == 12.0
    with pytest.raises(BadValue, match="must be at least 0"):
        finite_number("dur", -1, minimum=0)
