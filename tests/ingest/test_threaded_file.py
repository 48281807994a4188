"""A file whose batches a thread stores: an abort waits for the batch in flight and leaves
no file, an error surfaces at close, and what the thread stored is committed."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kvtrace import connect
from kvtrace.ingest.sink import FileSink
from kvtrace.warehouse.schema.tables import TABLES
from kvtrace.warehouse.table_file import TableFile


def _requests(first: int, count: int):
    rows = [
        {"request_idx": i, "arrival_s": float(i), "input_tokens": 10, "output_tokens": 1}
        for i in range(first, first + count)
    ]
    return pa.Table.from_pylist(rows, schema=TABLES["workload_requests"].schema)


def test_an_abort_waits_for_the_batch_in_flight_and_leaves_no_file(warehouse, slow_table_appends):
    commit = warehouse.begin("aborted")
    requests = FileSink(warehouse, commit).open_file_in_thread("workload_requests")
    handle = requests.file.handle
    requests.append(_requests(0, 5))
    assert slow_table_appends.wait(5)
    warehouse.abort(commit)  # while the thread is still encoding
    assert not handle.temp.exists()
    assert commit.files == [] and commit.open_files == []


def test_a_failed_batch_is_raised_by_close(warehouse, monkeypatch):
    def full_disk(self, data):
        raise OSError("No space left on device")

    monkeypatch.setattr(TableFile, "append", full_disk)
    requests = FileSink(warehouse, warehouse.begin("full")).open_file_in_thread("workload_requests")
    requests.append(_requests(0, 5))
    with pytest.raises(OSError, match="No space left"):
        requests.close()


def test_the_batches_stored_by_the_thread_are_committed_once_each(warehouse):
    commit = warehouse.begin("stored")
    requests = FileSink(warehouse, commit).open_file_in_thread("workload_requests")
    for first in (0, 5, 5, 10):  # the third batch repeats the second's records
        requests.append(_requests(first, 5))
    assert requests.close() == 15
    warehouse.commit(commit)
    count = connect(warehouse).execute("SELECT count(*) FROM workload_requests").fetchone()
    assert count == (15,)
