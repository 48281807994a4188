"""The DSA writer encodes its row groups in a thread: an abort waits for it, errors surface."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvtrace.ingest._lines import Chunk, parse_chunk
from kvtrace.ingest.readers.dsa_formats import SCHEMAS, canonical
from kvtrace.warehouse.rows import dsa_writer
from kvtrace.warehouse.rows.dsa_writer import DsaWriter
from kvtrace.warehouse.table_file import TableFile
from tests.conftest import seed_record


def _add_batch(writer: DsaWriter, request: int = 0) -> None:
    records = [seed_record(request, layer, 40, [3, 9, 1]) for layer in range(4)]
    data = "".join(json.dumps(r) + "\n" for r in records).encode()
    table = parse_chunk(Chunk(data, 1, len(records), len(data)), SCHEMAS["seed"]).table
    lines = np.arange(1, len(records) + 1)
    writer.add(canonical(table, "seed"), lines, lambda line: f"line {line}")


def _writer(warehouse, commit) -> DsaWriter:
    return DsaWriter(
        warehouse,
        commit,
        string_ids=False,
        dataset="unit",
        dataset_override=True,
        block_size=16,
        request_ids={},
    )


def test_an_abort_waits_for_the_write_in_flight_and_leaves_no_file(
    warehouse, monkeypatch, slow_table_appends
):
    monkeypatch.setattr(dsa_writer, "FLUSH_BYTES", 0)  # every batch is written at once
    opened: list[TableFile] = []
    open_file = warehouse.open_file
    monkeypatch.setattr(
        warehouse, "open_file", lambda *a: opened.append(open_file(*a)) or opened[-1]
    )
    commit = warehouse.begin("aborted")
    writer = _writer(warehouse, commit)
    _add_batch(writer)
    assert slow_table_appends.wait(5)
    warehouse.abort(commit)  # while the thread is still writing
    assert writer._write_thread is None
    assert opened and not any(handle.temp.exists() for handle in opened)
    assert commit.files == [] and commit.open_files == []


def test_a_failed_write_is_raised_by_finish(warehouse, monkeypatch):
    monkeypatch.setattr(dsa_writer, "FLUSH_BYTES", 0)

    def full_disk(self, table):
        raise OSError("No space left on device")

    monkeypatch.setattr(DsaWriter, "_write_row_groups", full_disk)
    writer = _writer(warehouse, warehouse.begin("full"))
    _add_batch(writer)
    with pytest.raises(OSError, match="No space left"):
        writer.finish()
    assert writer._write_thread is None


def test_rows_written_by_the_thread_are_committed(warehouse, monkeypatch):
    monkeypatch.setattr(dsa_writer, "FLUSH_BYTES", 0)
    commit = warehouse.begin("written")
    writer = _writer(warehouse, commit)
    for request in range(3):
        _add_batch(writer, request)  # a row group each, written by the thread
    result = writer.finish()
    warehouse.commit(commit)
    assert result.rows == 12
    assert sum(f.rows for f in commit.files if f.table == "dsa_steps") == 12
