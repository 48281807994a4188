"""A line longer than the bound on one record (`lines.MAX_LINE_BYTES`, 256 MiB; a few KiB
here) is quarantined with a reason naming the bound, never held whole in memory, and the
lines after it are read, in every family that reads lines."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import pytest

from kvtrace import connect
from kvtrace.ingest import _lines as lines
from kvtrace.ingest import ingest
from tests.conftest import seed_record

BOUND = 4 << 10
REASON = "line longer than 4 KiB: left out, the lines after it read"


@pytest.fixture(autouse=True)
def small_bound(monkeypatch):
    monkeypatch.setattr(lines, "MAX_LINE_BYTES", BOUND, raising=False)


def _mooncake(i: int, blocks: int = 2) -> str:
    record = {"timestamp": 1000 * i, "input_length": 512 * blocks, "output_length": 10}
    return json.dumps(record | {"hash_ids": list(range(blocks))})


def _request(i: int, padding: int = 0) -> str:
    return json.dumps({"request_id": f"r{i}", "latency_s": 1.0, "note": "x" * padding})


# per family: its records, the third one far over the bound, and the table they go to
FAMILIES = {
    "dsa": (
        [json.dumps(seed_record(i, 0, 99, [1, 2] * (3000 if i == 2 else 1))) for i in range(5)],
        "dsa_steps",
    ),
    "mooncake": ([_mooncake(i, 3000 if i == 2 else 2) for i in range(5)], "workload_requests"),
    "exp_metrics": ([_request(i, 50_000 if i == 2 else 0) for i in range(5)], "request_metrics"),
}


def _write(path: Path, records: list[str], end: str = "\n") -> Path:
    content = ("\n".join(records) + end).encode()
    path.write_bytes(gzip.compress(content) if path.name.endswith(".gz") else content)
    return path


def _quarantine(warehouse) -> list[tuple[int, str, str]]:
    query = "SELECT line_no, reason, raw FROM quarantine ORDER BY line_no"
    return connect(warehouse).execute(query).fetchall()


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_line_over_the_bound_is_quarantined_and_the_rest_read(
    warehouse, tmp_path, family, suffix
):
    records, table = FAMILIES[family]
    assert len(records[2]) > 4 * BOUND and all(len(r) < BOUND for r in records[:2] + records[3:])
    path = _write(tmp_path / f"{family}{suffix}", records)
    report = ingest(warehouse, [str(path)])
    assert report.rows == 4
    ((line, reason, raw),) = _quarantine(warehouse)
    assert (line, reason) == (3, REASON)
    assert len(raw) >= BOUND and records[2].startswith(raw)
    assert connect(warehouse).execute(f"SELECT count(*) FROM {table}").fetchone() == (4,)


def test_a_long_last_line_without_a_newline_is_quarantined(warehouse, tmp_path):
    records = [_mooncake(i, 3000 if i == 4 else 2) for i in range(5)]
    path = _write(tmp_path / "moon.jsonl", records, end="")
    assert ingest(warehouse, [str(path)]).rows == 4
    assert [(line, reason) for line, reason, _ in _quarantine(warehouse)] == [(5, REASON)]


def test_long_lines_one_after_another_keep_the_numbering(warehouse, tmp_path):
    records = [_mooncake(i, 3000 if i in (1, 2, 4) else 2) for i in range(7)]
    path = _write(tmp_path / "moon.jsonl", records)
    assert ingest(warehouse, [str(path)]).rows == 4
    assert [line for line, _, _ in _quarantine(warehouse)] == [2, 3, 5]
    stored = connect(warehouse).execute(
        "SELECT request_idx, output_tokens FROM workload_requests ORDER BY 1"
    )
    assert stored.fetchall() == [(0, 10), (3, 10), (5, 10), (6, 10)]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_a_long_line_is_never_held_whole(tmp_path, suffix):
    # 8 MiB of one line against a bound of 4 KiB: reading keeps a bounded window of it
    path = tmp_path / f"long{suffix}"
    content = b'{"a": 1}\n{"b": "' + b"x" * (8 << 20) + b'"}\n{"c": 3}\n'
    path.write_bytes(gzip.compress(content) if suffix.endswith(".gz") else content)
    tracemalloc.start()
    try:
        chunks = [(chunk.data, chunk.long_lines) for chunk in lines.read_chunks(path)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
    assert b"".join(data for data, _ in chunks) == b'{"a": 1}\n\n{"c": 3}\n'
    (long_line,) = [note for _, notes in chunks for note in notes]
    assert (long_line.line_no, long_line.reason) == (2, REASON)


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_a_csv_row_over_its_bound_is_quarantined_and_the_rest_read(warehouse, tmp_path, suffix):
    # no arrival trace's row comes near 1 MiB; Arrow's reader refused a whole file for one
    rows = [f"2023-11-16 18:17:0{i}.0000000,{100 + i},{10 + i}" for i in range(5)]
    rows[2] = rows[2].replace(",102,", "," + "1" * (3 << 20) + ",")
    path = _write(tmp_path / f"azure{suffix}", ["TIMESTAMP,ContextTokens,GeneratedTokens", *rows])
    report = ingest(warehouse, [str(path)])
    assert (report.rows, report.files[0].fmt) == (4, "azure")
    ((line, reason, raw),) = _quarantine(warehouse)
    assert (line, reason) == (4, "line longer than 1 MiB: left out, the lines after it read")
    assert rows[2].startswith(raw)
    stored = connect(warehouse).execute(
        "SELECT request_idx, input_tokens FROM workload_requests ORDER BY 1"
    )
    assert stored.fetchall() == [(0, 100), (1, 101), (3, 103), (4, 104)]
