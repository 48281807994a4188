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
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.warehouse import Commit, TableFile, Warehouse
from kvtrace.warehouse.schema import TABLES, TableSpec

REPEATED = "record repeated within the file"

Key = tuple[Any, ...]


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
        self._stored: dict[str, set[Key]] = {}  # per table: keys the run holds
        self._taken: dict[str, set[Key]] = {}  # per table: keys this file gave

    @property
    def run_id(self) -> str:
        return self.commit.run_id

    def write(self, table: str, rows: pa.Table) -> int:
        """Store ``rows`` in ``table``; returns how many were stored."""
        spec = TABLES[table]
        rows = self._new_records(spec, self.with_run_id(rows))
        if rows.num_rows == 0:
            return 0
        order = [(column, "ascending") for column in spec.sort_by if column != "run_id"]
        if order:
            rows = rows.sort_by(order)
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

    # -- record keys -------------------------------------------------------------------

    def _new_records(self, spec: TableSpec, rows: pa.Table) -> pa.Table:
        """``rows`` less the records the run holds already or that came before."""
        key = spec.record_key
        if key is None or rows.num_rows == 0:
            return rows
        if spec.name not in self._stored:
            self._stored[spec.name] = self._stored_keys(spec)
            self._taken[spec.name] = set()
        stored, taken = self._stored[spec.name], self._taken[spec.name]
        keep = np.zeros(rows.num_rows, dtype=bool)
        for row, record in enumerate(_record_keys(rows, key)):
            if record in stored:
                self.skipped[f"record already stored (same {', '.join(key)})"] += 1
            elif record in taken:
                self.skipped[REPEATED] += 1
            else:
                taken.add(record)
                keep[row] = True
        return rows if keep.all() else rows.filter(pa.array(keep))

    def _stored_keys(self, spec: TableSpec) -> set[Key]:
        """The keys of the records of ``spec``'s table that this run holds."""
        files = self.warehouse.run_files(self.run_id, spec.name)
        if not files:
            return set()
        stored = self.warehouse.read_files(files)
        stored = stored.filter(pc.equal(stored["run_id"], self.run_id))
        return set(_record_keys(stored, spec.record_key or ()))


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


def _record_keys(rows: pa.Table, key: tuple[str, ...]) -> list[Key]:
    """Each row's record key: its key columns, or all of its columns where a key column
    is NULL."""
    columns = [rows[name].to_pylist() for name in key]
    keys: list[Key] = list(zip(*columns, strict=True))
    incomplete = [row for row, values in enumerate(keys) if None in values]
    if incomplete:
        whole = rows.drop_columns(["run_id"]).take(incomplete).to_pylist()
        for row, values in zip(incomplete, whole, strict=True):
            keys[row] = ("*", *(_hashable(v) for v in values.values()))
    return keys


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in value.items())
    return value
