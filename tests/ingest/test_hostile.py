"""Hostile input: every bad line is quarantined with a reason and the good ones are kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtrace.ingest import ingest

HOSTILE = Path(__file__).parent.parent / "data" / "hostile"


def _quarantined(warehouse) -> list[tuple[int, str]]:
    return warehouse.connect().execute(
        "SELECT line_no, reason FROM quarantine ORDER BY line_no").fetchall()


@pytest.mark.parametrize(("name", "bad_lines", "reason"), [
    ("binary_tail.jsonl", [3], "not UTF-8 text"),
    ("invalid_utf8_string.jsonl", [3], "not UTF-8 text"),
    ("empty_selection.jsonl", [3], "empty selected_token_pos"),
    ("int32_overflow.jsonl", [3, 4], "too large"),
    ("negative_ids.jsonl", [3, 4], "negative"),
])
def test_bad_dsa_lines_are_quarantined_and_the_good_ones_kept(warehouse, name, bad_lines,
                                                              reason):
    report = ingest(warehouse, [str(HOSTILE / name)])
    assert report.rows == 2
    quarantined = _quarantined(warehouse)
    assert [line for line, _ in quarantined] == bad_lines
    assert all(reason in why for _, why in quarantined), quarantined
    got = warehouse.connect().execute(
        "SELECT request_id FROM dsa_steps ORDER BY 1").fetchall()
    assert got == [(0,), (1,)]


def test_pool_values_out_of_range_are_quarantined_and_the_rest_kept(warehouse):
    report = ingest(warehouse, [str(HOSTILE / "pool_out_of_range.jsonl")])
    assert report.rows == 3
    quarantined = _quarantined(warehouse)
    assert [line for line, _ in quarantined] == [3, 4]
    assert "held_tokens" in quarantined[0][1] and "available_tokens" in quarantined[1][1]
    got = warehouse.connect().execute("SELECT t_s FROM pool_snapshots ORDER BY 1").fetchall()
    assert got == [(0.0,), (1.0,), (4.0,)]
