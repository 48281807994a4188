"""A Mooncake trace is read a chunk at a time: the rows and the quarantine do not depend
on where the chunks break, and a request out of arrival order is found across chunk
boundaries."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from kvtrace import connect
from kvtrace.ingest import _lines as lines
from kvtrace.ingest import ingest
from kvtrace.ingest.readers import workload as workload_reader
from kvtrace.warehouse import Warehouse
from tests.conftest import warehouse_at


def _trace_lines() -> list[str]:
    records = []
    for i in range(120):
        records.append(
            json.dumps(
                {
                    "timestamp": 1_000 * i,
                    "input_length": 512 * (1 + i % 3),
                    "output_length": 10 + i,
                    "hash_ids": list(range(i % 7, i % 7 + 1 + i % 3)),
                }
            )
        )
    records[0] = json.dumps({"input_length": 5, "output_length": 5, "hash_ids": [1]})  # no time
    records[40] = records[40].replace('"output_length": 50', '"output_length": -1')
    records[61] = json.dumps({"timestamp": 3_000, "input_length": 9, "output_length": 9})  # early
    records[90] = '{"timestamp": 90000, "input_length": 1'  # cut short
    return records


EXPECTED_QUARANTINE = [(1, "missing field timestamp"), (41, "output_tokens is negative")]
OUT_OF_ORDER = (
    "1 request was out of arrival order; kept, in arrival order by arrival_s then request_idx"
)


def _ingested(tmp_path, name: str) -> tuple[list[tuple], list[tuple]]:
    trace = tmp_path / f"{name}.jsonl"
    trace.write_text("\n".join(_trace_lines()) + "\n")
    warehouse = Warehouse(warehouse_at(tmp_path / f"wh-{name}"), create=True)
    report = ingest(warehouse, [str(trace)], run_name="moon")
    assert report.rows == 117 and report.rejected == 3
    assert report.files[0].notes == [OUT_OF_ORDER]
    con = connect(warehouse)
    rows = con.execute(
        "SELECT request_idx, arrival_s, input_tokens, output_tokens, hash_ids "
        "FROM workload_requests ORDER BY request_idx"
    ).fetchall()
    quarantine = con.execute(
        "SELECT line_no, reason, raw FROM quarantine ORDER BY line_no"
    ).fetchall()
    return rows, quarantine


def test_small_chunks_give_the_rows_and_quarantine_of_one_chunk(tmp_path, monkeypatch):
    whole_rows, whole_quarantine = _ingested(tmp_path, "whole")
    monkeypatch.setattr(lines, "CHUNK_BYTES", 300)  # about four lines a chunk
    monkeypatch.setattr(workload_reader, "ROW_GROUP_ROWS", 32)  # several row groups
    rows, quarantine = _ingested(tmp_path, "chunked")
    assert rows == whole_rows and quarantine == whole_quarantine
    records = _trace_lines()
    assert [(line, reason) for line, reason, _ in quarantine if line != 91] == EXPECTED_QUARANTINE
    assert [raw for line, _, raw in quarantine] == [records[n - 1] for n, *_ in quarantine]
    # the first kept request (line 2) is time zero; the rest count from it
    assert rows[0][:2] == (1, 0.0) and rows[-1][:2] == (119, 118.0)


def test_a_long_trace_is_stored_in_row_groups(tmp_path, monkeypatch):
    monkeypatch.setattr(lines, "CHUNK_BYTES", 300)
    monkeypatch.setattr(workload_reader, "ROW_GROUP_ROWS", 32)
    trace = tmp_path / "moon.jsonl"
    trace.write_text("\n".join(_trace_lines()) + "\n")
    warehouse = Warehouse(tmp_path / "wh", create=True)
    report = ingest(warehouse, [str(trace)])
    (path,) = warehouse.run_files(report.files[0].run_id, "workload_requests")
    metadata = pq.read_metadata(warehouse.root / path)
    assert metadata.num_rows == 117 and metadata.num_row_groups == 4


@pytest.mark.parametrize("cut", [1, 2, 59, 60, 61, 62])
def test_a_request_out_of_order_is_found_wherever_a_chunk_ends(tmp_path, monkeypatch, cut):
    # a request earlier than one before it is out of order even when a chunk boundary
    # falls between them, and a chunk boundary before it changes nothing; it is kept
    records = _trace_lines()
    monkeypatch.setattr(lines, "CHUNK_BYTES", len("\n".join(records[:cut])) + 1)
    trace = tmp_path / "moon.jsonl"
    trace.write_text("\n".join(records) + "\n")
    warehouse = Warehouse(tmp_path / "wh", create=True)
    report = ingest(warehouse, [str(trace)])
    assert (report.rows, report.files[0].notes) == (117, [OUT_OF_ORDER])
    found = connect(warehouse).execute("SELECT line_no, reason FROM quarantine ORDER BY 1")
    assert [row for row in found.fetchall() if row[0] != 91] == EXPECTED_QUARANTINE


def test_a_large_trace_read_by_the_compiled_pass_gives_the_same_rows(tmp_path, monkeypatch):
    # small chunks: most are plain records the compiled pass reads, the rest Arrow's
    monkeypatch.setattr(lines, "CHUNK_BYTES", 300)
    by_arrow = _ingested(tmp_path, "arrow")
    monkeypatch.setattr(workload_reader, "COMPILED_PARSE_BYTES", 0)  # any trace is large
    read = []
    parse = lines._parse_int_records
    monkeypatch.setattr(
        lines, "_parse_int_records", lambda *args: read.append(table := parse(*args)) or table
    )
    assert _ingested(tmp_path, "compiled") == by_arrow
    taken = sum(table is not None for table in read)
    assert 0 < taken < len(read)
