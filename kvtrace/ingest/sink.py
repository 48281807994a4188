"""Where a family's reader puts the rows of one file: the tables of its commit.

Every record is stored once per run: a table's ``record_key``
(`kvtrace.warehouse.schema.core.TableSpec`) says what makes a record, and the sink
leaves out records whose key the run already holds or the file already gave.  So a file
that grew adds only its new records, a line repeated adds nothing, and other bytes of
the same records add nothing.  (The caller holds the run's lock, so the run's stored
keys cannot change under it.)
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.ingest._record_keys import RecordKeys, in_order, incomplete
from kvtrace.warehouse import Commit, Warehouse
from kvtrace.warehouse.schema.tables import TABLES, TableSpec
from kvtrace.warehouse.table_file import TableFile

REPEATED = "record repeated within the file"


class FileSink:
    """The tables of one file's commit.

    `write` takes rows whose ``run_id`` is still empty, fills it in, leaves out the
    records the run holds already and stores the rest in the table's order;
    `open_file` gives a file that does the same for readers that stream their rows.
    ``skipped`` counts the records left out, by reason.
    """

    def __init__(self, warehouse: Warehouse, commit: Commit) -> None:
        self.warehouse = warehouse
        self.commit = commit
        self.skipped: Counter[str] = Counter()
        self._keys: dict[str, RecordKeys] = {}  # per table: the keys to check against
        self._read: dict[str, set[str]] = {}  # per table: the files its stored keys came from

    @property
    def run_id(self) -> str:
        return self.commit.run_id

    def write(self, table: str, rows: pa.Table) -> int:
        """Store ``rows`` in ``table``; returns how many were stored."""
        spec = TABLES[table]
        rows = self._new_records(spec, self.with_run_id(rows))
        if rows.num_rows == 0:
            return 0
        order = [column for column in spec.sort_by if column != "run_id"]
        if order and not in_order(rows.select(order)):  # (most files come in order)
            rows = rows.sort_by([(column, "ascending") for column in order])
        self.warehouse.write(self.commit, table, rows)
        return int(rows.num_rows)

    def with_run_id(self, rows: pa.Table) -> pa.Table:
        """``rows`` with their ``run_id`` column filled in."""
        if "run_id" not in rows.column_names:
            return rows
        return rows.set_column(
            rows.column_names.index("run_id"),
            "run_id",
            pa.repeat(pa.scalar(self.run_id), rows.num_rows),
        )

    def write_rows(self, table: str, rows: list[dict[str, Any]]) -> int:
        """`write` for rows as dicts (a key a row lacks reads as NULL)."""
        return self.write(table, pa.Table.from_pylist(rows, schema=TABLES[table].schema))

    def open_file(self, table: str) -> StreamedFile:
        """A file of ``table`` to fill with batches of this run's rows."""
        return StreamedFile(self, self.warehouse.open_file(self.commit, table))

    def open_file_in_thread(self, table: str) -> ThreadedFile:
        """`open_file`, each batch stored by a thread while the caller prepares the next."""
        return ThreadedFile(self.open_file(table), self.commit)

    # -- record keys -------------------------------------------------------------------

    def _new_records(self, spec: TableSpec, rows: pa.Table) -> pa.Table:
        """``rows`` less the records the run holds already or that came before."""
        if spec.record_key is None or rows.num_rows == 0:
            return rows
        if spec.name not in self._keys:
            files = self.warehouse.run_files(self.run_id, spec.name)
            self._read[spec.name] = set(files)
            self._keys[spec.name] = RecordKeys(spec, self._stored_rows(spec, files))
        keep, stored, repeated = self._keys[spec.name].sift(rows)
        if stored:
            self.skipped[f"record already stored (same {', '.join(spec.record_key)})"] += stored
        if repeated:
            self.skipped[REPEATED] += repeated
        return rows if keep.all() else rows.filter(pa.array(keep))

    def collides(self) -> bool:
        """Whether a commit that landed since the run's keys were read stored a record
        this file stores too (then the file is to be read again, holding the run's lock)."""
        for table, keys in self._keys.items():
            files = self.warehouse.run_files(self.run_id, table)
            landed = [path for path in files if path not in self._read[table]]
            if landed and keys.gave_any_of(self._stored_rows(TABLES[table], landed)):
                return True
        return False

    def _stored_rows(self, spec: TableSpec, files: list[str]) -> pa.Table:
        """The run's rows of ``spec``'s table in ``files``: the key columns alone, or
        every column where some key is incomplete."""
        key = spec.record_key or ()
        if not files:
            return spec.schema.empty_table()
        stored = self.warehouse.read_key_columns(files, ["run_id", *key])
        stored = stored.filter(pc.equal(stored["run_id"].cast(pa.string()), self.run_id))
        if incomplete(stored, spec).any():
            stored = self.warehouse.read_files(files)
            stored = stored.filter(pc.equal(stored["run_id"], self.run_id))
        return stored


class StreamedFile:
    """A data file of one table filled batch by batch, each record once (see `FileSink`)."""

    def __init__(self, sink: FileSink, handle: TableFile) -> None:
        self.sink, self.handle = sink, handle

    def append(self, rows: pa.Table) -> int:
        rows = self.sink._new_records(self.handle.spec, self.sink.with_run_id(rows))
        if rows.num_rows:
            self.handle.append(rows)
        return int(rows.num_rows)

    def close(self) -> None:
        self.handle.close()


class ThreadedFile:
    """A `StreamedFile` whose batches a thread of its own stores (record keys, encoding),
    one at a time, while the caller prepares the next.  An error of a batch is raised by
    the next `append` or by `close`; `Warehouse.abort` waits for the batch in flight."""

    def __init__(self, file: StreamedFile, commit: Commit) -> None:
        self.file = file
        self.rows = 0  # records stored so far
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="kvtrace-write")
        self._storing: Future[int] | None = None
        commit.background_writes.append(self._settle)

    def append(self, rows: pa.Table) -> None:
        self._wait()
        self._storing = self._thread.submit(self.file.append, rows)

    def close(self) -> int:
        """Store what is in flight, finish the file; returns the records stored."""
        try:
            self._wait()
            self.file.close()
        finally:
            self._thread.shutdown(wait=True)
        return self.rows

    def discard(self) -> None:
        """Drop the file with the batches stored in it (they are to be read again)."""
        try:
            self._wait()
        finally:
            self._thread.shutdown(wait=True)
            self.file.handle.discard()

    def _wait(self) -> None:
        storing, self._storing = self._storing, None
        if storing is not None:
            self.rows += storing.result()

    def _settle(self) -> None:
        """Wait for the batch in flight before the commit's files are removed (its error
        does not matter then)."""
        with suppress(Exception):
            self._wait()
        self._thread.shutdown(wait=True)


__all__ = ["REPEATED", "FileSink", "StreamedFile", "ThreadedFile"]
