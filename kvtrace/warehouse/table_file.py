"""Writing a table's Parquet files: kvtrace's encodings, one partition per file, each
file finished under a scratch name and renamed into its partition folder.

A file stays invisible until its commit is recorded (`kvtrace.warehouse._store`).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kvtrace.warehouse._delta_log import publish_file
from kvtrace.warehouse._storage import Storage, partition_value
from kvtrace.warehouse.schema.tables import TableSpec

if TYPE_CHECKING:
    from kvtrace.warehouse._commit import Commit

__all__ = ["PARALLEL_FILE_BYTES", "TableFile", "write_table"]

PARALLEL_FILE_BYTES = 8 << 20  # a larger write is encoded as several files at once
# list values a row group holds at most (8 MB of DSA positions, 1,024 rows at top-k 2048):
# readers decode a row group at a time, so this bounds what reading any part of one costs
ROW_GROUP_LIST_VALUES = 1 << 21
# integer lists whose neighbours are close: sorted positions and blocks, and the block
# hashes of a prompt (numbered in order of first use: half the size of plain ZSTD)
_LIST_LEAVES = {
    "selected_pos",
    "hbm_hit_blocks",
    "local_pool_hit_blocks",
    "remote_pool_hit_blocks",
    "hash_ids",
}


class TableFile:
    """A Parquet file of one partition written in several row groups, then published.

    Get one from `kvtrace.warehouse.Warehouse.open_file`; `append` writes a row group,
    `close` renames the file into its partition folder (still invisible until the commit
    is recorded).
    """

    def __init__(self, storage: Storage, commit: Commit, spec: TableSpec) -> None:
        self.storage, self.commit, self.spec = storage, commit, spec
        self.temp = storage.new_temp(".parquet")
        self.rows = 0
        self._first: pa.Table | None = None
        self._request_range: list[int] = []
        self._writer: pq.ParquetWriter | None = None
        commit.open_files.append(self)

    @property
    def bytes_written(self) -> int:
        return self.temp.stat().st_size if self.temp.exists() else 0

    def append(self, data: pa.Table) -> None:
        data = _conform(data, self.spec)
        if self._writer is None:
            self._first = data.slice(0, 1)
            self._writer = pq.ParquetWriter(self.temp, self.spec.schema, **_parquet_options(data))
        self._writer.write_table(data, row_group_size=_row_group_rows(data))
        self.rows += data.num_rows
        if "request_id" in data.column_names:
            ids = data["request_id"]
            self._request_range = [
                min([pc.min(ids).as_py(), *self._request_range[:1]]),
                max([pc.max(ids).as_py(), *self._request_range[1:]]),
            ]

    def close(self) -> None:
        """Finish the file and move it into its partition folder."""
        self.commit.open_files.remove(self)
        if self._writer is None or self._first is None:
            return
        self._writer.close()
        data_file = publish_file(self.storage, self.temp, self._path(self._first))
        self.commit.files.append(data_file)
        if self.commit.hold is not None:
            self.commit.hold.touch()

    def discard(self) -> None:
        if self in self.commit.open_files:
            self.commit.open_files.remove(self)
        if self._writer is not None:
            self._writer.close()
        self.temp.unlink(missing_ok=True)

    def _path(self, first: pa.Table) -> str:
        """``<table>/<key>=<value>/.../<run>[-r<first>-<last>]-<commit>-<n>.parquet``.

        The partition values are those of the file's first row (callers write one
        partition per file).
        """
        spec, commit = self.spec, self.commit
        parts = [spec.name]
        for column in spec.partition_by:
            value = partition_value(first[column][0].as_py())
            parts.append(f"{spec.partition_dir(column)}={value}")
        name = partition_value(commit.run_id)
        if self._request_range:
            name += f"-r{self._request_range[0]}-{self._request_range[1]}"
        name += f"-{commit.commit_id}-{len(commit.files):04d}.parquet"
        return "/".join([*parts, name])


def write_table(storage: Storage, commit: Commit, spec: TableSpec, data: pa.Table) -> None:
    """Write ``data`` (rows of one partition) as Parquet files of ``commit``: one, or for
    a large table one per core, encoded at once (`PARALLEL_FILE_BYTES`)."""
    if data.num_rows == 0:
        return
    parts = _parallel_parts(data)
    step = -(-data.num_rows // parts)
    handles = [TableFile(storage, commit, spec) for _ in range(parts)]
    if parts == 1:
        handles[0].append(data)
    else:
        with ThreadPoolExecutor(parts) as pool:  # Parquet encoding releases the GIL
            list(
                pool.map(
                    lambda handle, start: handle.append(data.slice(start, step)),
                    handles,
                    range(0, data.num_rows, step),
                )
            )
    for handle in handles:
        handle.close()


def _parallel_parts(data: pa.Table) -> int:
    """How many files to encode ``data`` into at once: one per core, each of at least
    `PARALLEL_FILE_BYTES` bytes in memory."""
    return max(
        1, min(os.cpu_count() or 1, int(data.num_rows), int(data.nbytes) // PARALLEL_FILE_BYTES)
    )


def _conform(data: pa.Table, spec: TableSpec) -> pa.Table:
    """Order, fill and cast ``data`` to the table's schema (missing columns become NULL)."""
    columns = []
    for column in spec.schema:
        if column.name in data.column_names:
            columns.append(data[column.name].cast(column.type))
        else:
            columns.append(pa.nulls(data.num_rows, column.type))
    return pa.Table.from_arrays(columns, schema=spec.schema)


def _parquet_options(data: pa.Table) -> dict[str, Any]:
    """ZSTD; dictionaries for strings; delta encoding for integers and the integer lists
    of `_LIST_LEAVES`, byte-stream split for floats (both smaller and faster to write than
    plain); a checksum on every page (`kvtrace check --deep` finds any byte changed)."""
    encoding = {
        f"{name}.list.element": "DELTA_BINARY_PACKED"
        for name in data.column_names
        if name in _LIST_LEAVES
    }
    for column in data.schema:
        if pa.types.is_integer(column.type) or pa.types.is_timestamp(column.type):
            encoding[column.name] = "DELTA_BINARY_PACKED"
        elif pa.types.is_floating(column.type):
            encoding[column.name] = "BYTE_STREAM_SPLIT"
    return {
        "compression": "zstd",
        "compression_level": 1,  # as small as level 3 on these encodings, a fifth faster
        "use_dictionary": [c for c in data.column_names if pa.types.is_string(data[c].type)],
        "column_encoding": encoding,
        "write_statistics": True,
        "write_page_checksum": True,
    }


def _row_group_rows(data: pa.Table) -> int:
    """Rows a row group of ``data`` holds: all of them, unless its longest list column
    would hold more than `ROW_GROUP_LIST_VALUES` values."""
    values: int = max(
        (
            int(pc.sum(pc.list_value_length(column)).as_py() or 0)
            for column, field in zip(data.columns, data.schema, strict=True)
            if pa.types.is_list(field.type) or pa.types.is_large_list(field.type)
        ),
        default=0,
    )
    rows: int = data.num_rows
    if values <= ROW_GROUP_LIST_VALUES:
        return max(rows, 1)
    return max(1, rows * ROW_GROUP_LIST_VALUES // values)
