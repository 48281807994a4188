"""Out-of-range numbers, bad events and ragged CSV rows: quarantined one by one, never
wrapped, never a refusal of the whole file (tests/data/hostile)."""

from __future__ import annotations

import json

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import write_jsonl
from tests.ingest.test_hostile import HOSTILE


def _rows(warehouse, sql: str) -> list[tuple]:
    return connect(warehouse).execute(sql).fetchall()


def _quarantined(warehouse) -> dict[int, str]:
    return dict(_rows(warehouse, "SELECT line_no, reason FROM quarantine ORDER BY line_no"))


def test_an_arrival_count_beyond_int64_is_quarantined_not_wrapped(warehouse):
    report = ingest(warehouse, [str(HOSTILE / "azure_out_of_range.csv")])
    assert report.rows == 2
    reasons = _quarantined(warehouse)
    assert sorted(reasons) == [3, 5]
    assert reasons[3] == "input_tokens is out of range"
    assert reasons[5] == "output_tokens is out of range"
    assert _rows(
        warehouse, "SELECT input_tokens, output_tokens FROM workload_requests ORDER BY 1"
    ) == [(100, 10), (300, 30)]


def test_a_short_or_long_csv_row_is_quarantined_and_the_rest_kept(warehouse):
    report = ingest(warehouse, [str(HOSTILE / "azure_short_row.csv")])
    assert report.rows == 2
    reasons = _quarantined(warehouse)
    assert reasons == {3: "2 fields where the header has 3", 5: "4 fields where the header has 3"}
    raw = _rows(warehouse, "SELECT raw FROM quarantine WHERE line_no = 3")
    assert raw == [("2023-11-16 18:00:01.0000000,200",)]
    # the surviving rows keep their own positions as request indices
    assert _rows(
        warehouse, "SELECT request_idx, input_tokens FROM workload_requests ORDER BY 1"
    ) == [(0, 100), (2, 300)]


@pytest.mark.parametrize("name", ["azure_bom.csv", "azure_gzipped.csv.gz"])
def test_a_byte_order_mark_or_gzip_is_read(warehouse, name):
    report = ingest(warehouse, [str(HOSTILE / name)])
    assert (report.rows, report.files[0].fmt) == (2, "azure")


def test_a_burstgpt_csv_with_a_bom_and_a_short_row(warehouse):
    report = ingest(warehouse, [str(HOSTILE / "burstgpt_bom_short_row.csv")])
    assert (report.rows, report.files[0].fmt) == (2, "burstgpt")
    assert _quarantined(warehouse) == {3: "3 fields where the header has 6"}


def test_profiler_events_of_impossible_times_are_quarantined_and_the_rest_kept(warehouse):
    report = ingest(warehouse, [str(HOSTILE / "kineto_bad_events.pt.trace.json")])
    assert report.rows == 3
    reasons = _quarantined(warehouse)
    assert sorted(reasons) == [2, 4, 5, 6]
    assert "ts is out of range: 1e+30" in reasons[2]
    assert "dur is out of range: inf" in reasons[4]
    assert "dur must be at least 0" in reasons[5]
    assert "args.bytes is out of range" in reasons[6]
    names = _rows(warehouse, "SELECT name FROM timeline_events ORDER BY ts_us")
    assert names == [("good_a",), ("good_b",), ("good_c",)]


def test_a_profiler_event_nested_too_deeply_is_one_quarantined_event(warehouse):
    report = ingest(warehouse, [str(HOSTILE / "kineto_deeply_nested.json.gz")])
    assert (report.rows, report.files[0].family) == (2, "timeline")
    assert _quarantined(warehouse) == {
        2: "nested too deeply to read (more levels than any trace record has)"
    }


def test_a_json_document_nested_too_deeply_is_one_sentence(warehouse, cli):
    status, _, err = cli(
        "-w", warehouse.location, "ingest", str(HOSTILE / "deeply_nested_summary.json.gz")
    )
    assert status == 1
    assert err.startswith("Error: ") and "nested too deeply to read" in err
    assert "Traceback" not in err and "RecursionError" not in err


@pytest.mark.parametrize(
    ("name", "records", "table"),
    [
        (
            "exp_metrics.jsonl",
            [
                {"request_id": "a", "latency_s": 1.0, "input_tokens": 10},
                {"request_id": "b", "latency_s": 1.0, "input_tokens": 10**23},
                {"request_id": "c", "latency_s": 1.0, "turn_id": -(10**23)},
            ],
            "request_metrics",
        ),
        (
            "niah.jsonl",
            [
                {"index": 0, "pred": "7", "outputs": ["7"]},
                {"index": 10**23, "pred": "7", "outputs": ["7"]},
                {"index": 2, "pred": "7", "outputs": ["7"], "length": 10**23},
            ],
            "eval_samples",
        ),
        (
            "profile_export.jsonl",
            [
                {
                    "metadata": {"session_num": 0},
                    "metrics": {"input_sequence_length": {"value": 10, "unit": "tokens"}},
                },
                {
                    "metadata": {"session_num": 1},
                    "metrics": {"input_sequence_length": {"value": 10**23, "unit": "tokens"}},
                },
                {
                    "metadata": {"session_num": 2},
                    "metrics": {"request_latency": {"value": 1e400, "unit": "ms"}},
                },
            ],
            "request_timings",
        ),
        (
            "mooncake.jsonl",
            [
                {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]},
                {"timestamp": 1, "input_length": 10**23, "output_length": 1, "hash_ids": [1]},
                {"timestamp": 2, "input_length": 10, "output_length": 1, "hash_ids": [10**23]},
            ],
            "workload_requests",
        ),
    ],
)
def test_an_integer_beyond_int64_is_quarantined_in_every_json_family(
    warehouse, tmp_path, name, records, table
):
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r).replace("1e+400", "1e400") for r in records) + "\n")
    report = ingest(warehouse, [str(path)])
    assert report.rows == 1, _quarantined(warehouse)
    reasons = _quarantined(warehouse)
    assert sorted(reasons) == [2, 3]
    assert all("range" in why for why in reasons.values()), reasons
    assert _rows(warehouse, f"SELECT count(*) FROM {table}") == [(1,)]


def test_a_vllm_result_with_an_impossible_length_keeps_the_other_requests(warehouse, tmp_path):
    result = {
        "ttfts": [0.1, 0.2, 0.3],
        "input_lens": [10, 10**23, 30],
        "output_lens": [5, 5, 5],
        "itls": [[0.01], [0.01], [float("inf")]],
    }
    path = tmp_path / "vllm_result.json"
    path.write_text(json.dumps(result))
    report = ingest(warehouse, [str(path)])
    assert report.rows == 1
    assert sorted(_quarantined(warehouse)) == [2, 3]


def test_an_unknown_field_holding_a_huge_number_is_ignored(warehouse, tmp_path):
    from tests.conftest import seed_record

    path = write_jsonl(tmp_path / "t.jsonl", [seed_record(0, 0, 99, [1], note=10**30)])
    assert ingest(warehouse, [str(path)]).rows == 1
