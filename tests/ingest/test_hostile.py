"""Hostile input: every bad line is quarantined with a reason and the good ones are kept."""

from __future__ import annotations

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import DATA

HOSTILE = DATA / "hostile"


def _quarantined(warehouse) -> list[tuple[int, str]]:
    return (
        connect(warehouse)
        .execute("SELECT line_no, reason FROM quarantine ORDER BY line_no")
        .fetchall()
    )


@pytest.mark.parametrize(
    ("name", "bad_lines", "reason"),
    [
        ("binary_tail.jsonl", [3], "not UTF-8 text"),
        ("invalid_utf8_string.jsonl", [3], "not UTF-8 text"),
        ("empty_selection.jsonl", [3], "empty selected_token_pos"),
        ("int32_overflow.jsonl", [3, 4], "too large"),
        ("negative_ids.jsonl", [3, 4], "negative"),
    ],
)
def test_bad_dsa_lines_are_quarantined_and_the_good_ones_kept(warehouse, name, bad_lines, reason):
    report = ingest(warehouse, [str(HOSTILE / name)])
    assert report.rows == 2
    quarantined = _quarantined(warehouse)
    assert [line for line, _ in quarantined] == bad_lines
    assert all(reason in why for _, why in quarantined), quarantined
    got = connect(warehouse).execute("SELECT request_id FROM dsa_steps ORDER BY 1").fetchall()
    assert got == [(0,), (1,)]


def test_pool_values_out_of_range_are_quarantined_and_the_rest_kept(warehouse):
    report = ingest(warehouse, [str(HOSTILE / "pool_out_of_range.jsonl")])
    assert report.rows == 3
    quarantined = _quarantined(warehouse)
    assert [line for line, _ in quarantined] == [3, 4]
    assert "held_tokens" in quarantined[0][1] and "available_tokens" in quarantined[1][1]
    got = connect(warehouse).execute("SELECT t_s FROM pool_snapshots ORDER BY 1").fetchall()
    assert got == [(0.0,), (1.0,), (4.0,)]


def test_a_record_of_several_megabytes_is_ingested_not_rejected(warehouse, tmp_path):
    from tests.conftest import seed_record, write_jsonl

    huge = seed_record(
        0, 0, 600_000, list(range(0, 600_000, 2)), scores_topk=[0.5] * 300_000
    )  # about 3 MB of JSON
    records = [seed_record(1, 0, 99, [1, 2]), huge, seed_record(2, 0, 99, [3])]
    path = write_jsonl(tmp_path / "big.jsonl", records)
    assert path.stat().st_size > 2_500_000
    report = ingest(warehouse, [str(path)])
    assert (report.rows, _quarantined(warehouse)) == (3, [])
    got = (
        connect(warehouse)
        .execute("SELECT len(selected_pos) FROM dsa_steps WHERE request_id = 0")
        .fetchone()
    )
    assert got == (300_000,)


def test_a_truncated_gzip_keeps_its_complete_lines_and_says_so(warehouse):
    report = ingest(warehouse, [str(HOSTILE / "truncated.jsonl.gz")])
    assert 10 < report.rows < 50
    reasons = [why for _, why in _quarantined(warehouse)]
    assert any("gzip stream ends early" in why for why in reasons)
    got = connect(warehouse).execute("SELECT count(*) FROM dsa_steps").fetchone()
    assert got == (report.rows,)


def test_a_truncated_csv_gzip_keeps_its_complete_rows_and_quarantines_the_cut_line(warehouse):
    # 45 complete rows (lines 2-46), then line 47 cut inside its last field: "…,1765,1"
    # of "…,1765,16", which must not be stored as a row of 1 output token
    report = ingest(warehouse, [str(HOSTILE / "azure_truncated.csv.gz")])
    assert (report.rows, report.files[0].fmt) == (45, "azure")
    quarantined = connect(warehouse).execute("SELECT line_no, reason, raw FROM quarantine")
    ((line, reason, raw),) = quarantined.fetchall()
    assert (line, raw) == (47, "2023-11-16 18:17:45.0356355,1765,1")
    assert "gzip stream ends early" in reason
    stored = connect(warehouse).execute(
        "SELECT input_tokens, output_tokens FROM workload_requests ORDER BY request_idx"
    )
    assert stored.fetchall() == [(100 + 37 * i, 10 + i % 13) for i in range(45)]


def test_a_corrupt_gzip_is_one_sentence_naming_the_file(warehouse, cli):
    status, _, err = cli("-w", warehouse.location, "ingest", str(HOSTILE / "corrupt_crc.jsonl.gz"))
    assert status == 1
    assert err.startswith("Error: ") and "corrupt_crc.jsonl.gz: corrupt gzip data" in err
    assert connect(warehouse).execute("SELECT count(*) FROM dsa_steps").fetchone() == (0,)


@pytest.mark.parametrize("name", ["array_first_line.jsonl", "truncated_first_line.jsonl"])
@pytest.mark.parametrize("kind", [None, "dsa"])
def test_a_bad_first_line_is_quarantined_not_a_refusal(warehouse, name, kind):
    report = ingest(warehouse, [str(HOSTILE / name)], kind=kind)
    assert report.rows == 2
    assert [line for line, _ in _quarantined(warehouse)] == [1]


def test_an_unknown_file_in_a_folder_says_what_was_committed(warehouse, tmp_path, cli):
    from tests.conftest import seed_record, write_jsonl

    folder = tmp_path / "mixed"
    write_jsonl(folder / "a.jsonl", [seed_record(0, 0, 99, [1])])
    write_jsonl(folder / "b.jsonl", [{"what": "not a trace"}])
    status, _, err = cli("-w", warehouse.location, "ingest", str(folder))
    assert status == 1
    assert "b.jsonl is not a trace kvtrace knows" in err
    assert (
        "(a.jsonl was committed before it; the same command again skips what was committed)" in err
    )
    assert connect(warehouse).execute("SELECT count(*) FROM dsa_steps").fetchone() == (1,)


@pytest.mark.parametrize(
    ("name", "good", "bad_lines"),
    [
        ("null_first_line.jsonl", [0, 1, 2], [1]),
        ("mixed_values.jsonl", [0, 1, 3, 4], [2, 4, 5, 6, 7, 8, 9, 11]),
        ("deeply_nested.jsonl.gz", [0, 1, 2], [2, 4]),
    ],
)
def test_lines_that_are_not_json_objects_are_quarantined_never_parsed(
    warehouse, name, good, bad_lines
):
    # Arrow's JSON reader crashes the process on a block that starts with null: such a
    # line must reach the quarantine, and every good line the warehouse.
    report = ingest(warehouse, [str(HOSTILE / name)])
    assert report.rows == len(good)
    quarantined = _quarantined(warehouse)
    assert [line for line, _ in quarantined] == bad_lines
    got = connect(warehouse).execute("SELECT request_id FROM dsa_steps ORDER BY 1").fetchall()
    assert got == [(r,) for r in good]


def test_what_each_line_that_is_no_object_is_told(warehouse):
    ingest(warehouse, [str(HOSTILE / "mixed_values.jsonl")])
    reasons = dict(_quarantined(warehouse))
    assert reasons[2] == "expected a JSON object, got null"
    assert reasons[4] == "expected a JSON object, got a number"
    assert reasons[5] == "expected a JSON object, got an array"
    assert reasons[8] == reasons[11] == "more than one JSON value on the line"
    assert reasons[9] == "expected a JSON object, got null"


def test_a_line_nested_too_deeply_is_one_quarantined_line(warehouse):
    ingest(warehouse, [str(HOSTILE / "deeply_nested.jsonl.gz")])
    reasons = dict(_quarantined(warehouse))
    assert reasons[2].startswith("nested too deeply")


def test_a_folder_with_a_null_first_line_ingests_every_file(warehouse, tmp_path, cli):
    import shutil

    from tests.conftest import seed_record, write_jsonl

    folder = tmp_path / "run"
    shutil.copy(HOSTILE / "null_first_line.jsonl", folder.mkdir() or folder / "a.jsonl")
    write_jsonl(folder / "b.jsonl", [seed_record(7, 0, 99, [3])])
    status, out, _ = cli("-w", warehouse.location, "ingest", str(folder))
    assert status == 0, out
    got = connect(warehouse).execute("SELECT request_id FROM dsa_steps ORDER BY 1").fetchall()
    assert got == [(0,), (1,), (2,), (7,)]
