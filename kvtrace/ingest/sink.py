"""Where a family's reader puts the rows of one file: the tables of its commit."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from kvtrace.warehouse import Commit, TableFile, Warehouse
from kvtrace.warehouse.schema import TABLES


class FileSink:
    """The tables of one file's commit.

    `write` takes rows whose ``run_id`` is still empty, fills it in and stores them in
    the table's order; `open_file` is for readers that stream rows of their own.
    """

    def __init__(self, warehouse: Warehouse, commit: Commit) -> None:
        self.warehouse = warehouse
        self.commit = commit

    @property
    def run_id(self) -> str:
        return self.commit.run_id

    def write(self, table: str, rows: pa.Table) -> int:
        """Store ``rows`` in ``table``; returns how many were stored."""
        if rows.num_rows == 0:
            return 0
        spec = TABLES[table]
        rows = self.with_run_id(rows)
        order = [(column, "ascending") for column in spec.sort_by if column != "run_id"]
        if order:
            rows = rows.sort_by(order)
        self.warehouse.write(self.commit, table, rows)
        return rows.num_rows

    def with_run_id(self, rows: pa.Table) -> pa.Table:
        """``rows`` with their ``run_id`` column filled in."""
        if "run_id" not in rows.column_names:
            return rows
        return rows.set_column(rows.column_names.index("run_id"), "run_id",
                               pa.repeat(pa.scalar(self.run_id), rows.num_rows))

    def write_rows(self, table: str, rows: list[dict[str, Any]]) -> int:
        """`write` for rows as dicts (a key a row lacks reads as NULL)."""
        return self.write(table, pa.Table.from_pylist(rows, schema=TABLES[table].schema))

    def open_file(self, table: str) -> TableFile:
        """A file of ``table`` to fill with row groups (rows of this run only)."""
        return self.warehouse.open_file(self.commit, table)
