"""Open a warehouse: its layout, manifest and commits.

A warehouse is a folder of hive-partitioned Parquet files plus ``_manifest/``, one JSON
file per commit listing the files that commit published.  Readers see exactly the files
the manifest lists, so a writer that dies before its manifest record lands leaves
nothing visible.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kvtrace import __version__
from kvtrace.errors import WarehouseError
from kvtrace.warehouse.schema import MANIFEST, TABLES, TableSpec
from kvtrace.warehouse.storage import LOCK_DIR, TMP_DIR, LocalStorage, partition_value

MANIFEST_DIR = "_manifest"
SCHEMA_DIR = "_schema"
MARKER = "kvtrace.json"
PARALLEL_FILE_BYTES = 8 << 20  # a larger write is encoded as several files at once
_LIST_LEAVES = {"selected_pos", "hbm_hit_blocks", "local_pool_hit_blocks", "remote_pool_hit_blocks"}


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class Commit:
    """Files written for one source (or one collector batch), published together.

    Data files become visible only when `Warehouse.commit` writes the manifest record.
    """

    commit_id: str
    run_id: str
    source_path: str | None = None
    source_sha256: str | None = None
    source_size: int | None = None
    entries: list[dict[str, Any]] = field(default_factory=list)
    open_files: list[TableFile] = field(default_factory=list)


class TableFile:
    """A Parquet file of one partition written in several row groups, then published.

    Get one from `Warehouse.open_file`; `append` writes a row group, `close` renames the
    file into its partition folder (still invisible until the commit is recorded).
    """

    def __init__(self, warehouse: Warehouse, commit: Commit, spec: TableSpec) -> None:
        self.warehouse, self.commit, self.spec = warehouse, commit, spec
        self.temp = warehouse.storage.new_temp(".parquet")
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
        self._writer.write_table(data, row_group_size=max(data.num_rows, 1))
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
        if self._writer is None:
            return
        self._writer.close()
        self.warehouse._publish(self.commit, self.spec, self.temp, self._first,
                                self.rows, self._request_range)

    def discard(self) -> None:
        if self in self.commit.open_files:
            self.commit.open_files.remove(self)
        if self._writer is not None:
            self._writer.close()
        self.temp.unlink(missing_ok=True)


class Warehouse:
    """A kvtrace warehouse rooted at ``path``.

    Parameters
    ----------
    path
        The warehouse folder.
    create
        Create the folder layout when it does not exist yet; otherwise a missing
        warehouse is an error.
    """

    def __init__(self, path: str | os.PathLike[str], *, create: bool = False) -> None:
        self.storage = LocalStorage(Path(path))
        self.root = self.storage.root
        if not (self.root / MARKER).is_file():
            if not create:
                raise WarehouseError(
                    f"no kvtrace warehouse at {self.root}; create one with 'kvtrace ingest'"
                )
            # Processes creating one warehouse at once only ever add kvtrace's own entries,
            # and the marker is written by an atomic rename, so any of them may finish it.
            self.root.mkdir(parents=True, exist_ok=True)
            own = {MARKER, MANIFEST_DIR, SCHEMA_DIR, TMP_DIR, LOCK_DIR, *TABLES}
            foreign = sorted(p.name for p in self.root.iterdir() if p.name not in own)
            if foreign:
                raise WarehouseError(
                    f"{self.root} exists and is not a kvtrace warehouse (it holds "
                    f"{foreign[0]}); choose an empty folder")
            self.storage.write_atomic(MARKER, json.dumps({"format": 1}).encode())
        self._ensure_schema_files()

    # -- layout ---------------------------------------------------------------------------

    def _ensure_schema_files(self) -> None:
        """Keep one empty Parquet file per table, so every view has its columns when empty."""
        for spec in TABLES.values():
            relative = f"{SCHEMA_DIR}/{spec.name}.parquet"
            target = self.root / relative
            if target.is_file() and pq.read_schema(target).equals(spec.schema):
                continue
            temp = self.storage.new_temp(".parquet")
            pq.write_table(spec.schema.empty_table(), temp)
            self.storage.publish(temp, relative)

    def schema_file(self, table: str) -> Path:
        return self.root / SCHEMA_DIR / f"{table}.parquet"

    # -- manifest ---------------------------------------------------------------------------

    def manifest(self) -> pa.Table:
        """Every published file, one row each (the columns of `schema.MANIFEST`)."""
        rows: list[dict[str, Any]] = []
        for record in self.storage.list_files(MANIFEST_DIR, ".json"):
            try:
                commit = json.loads(record.read_bytes())
            except (OSError, ValueError) as exc:
                raise WarehouseError(f"manifest record {record.name} is unreadable: {exc}") from exc
            rows.extend(commit["files"])
        for row in rows:
            row["created_at"] = datetime.fromisoformat(row["created_at"])
        return pa.Table.from_pylist(rows, schema=MANIFEST)

    def files(self, table: str) -> list[Path]:
        """Absolute paths of the published files of ``table``."""
        manifest = self.manifest()
        paths = manifest.filter(pc.equal(manifest["table"], table))["path"].to_pylist()
        return [self.root / p for p in sorted(set(paths))]

    def run_files(self, run_id: str, table: str) -> list[Path]:
        """Absolute paths of the published files of ``table`` that hold rows of ``run_id``."""
        manifest = self.manifest()
        chosen = manifest.filter(pc.and_(pc.equal(manifest["table"], table),
                                         pc.equal(manifest["run_id"], run_id)))
        return [self.root / p for p in sorted(set(chosen["path"].to_pylist()))]

    def source_hashes(self, run_id: str, size: int) -> set[str]:
        """The sha256 of every source of ``size`` bytes already ingested into ``run_id``
        (none: a source of that size is surely new to it, without hashing it first)."""
        manifest = self.manifest()
        same = manifest.filter(pc.and_(pc.equal(manifest["source_size"], size),
                                       pc.equal(manifest["run_id"], run_id)))
        return set(same["source_sha256"].to_pylist())

    def fingerprint(self) -> str:
        """A short hash of the manifest: equal fingerprints mean equal visible data."""
        names = sorted(p.name for p in self.storage.list_files(MANIFEST_DIR, ".json"))
        return hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]

    # -- writing -----------------------------------------------------------------------------

    def run_lock(self, run_id: str):
        """A context manager that holds ``run_id``'s lock: what one process reads of the
        run and then commits is not interleaved with another's (request id mapping,
        record identity)."""
        return self.storage.lock(f"run-{run_id}")

    def begin(
        self,
        run_id: str,
        *,
        source_path: str | None = None,
        source_sha256: str | None = None,
        source_size: int | None = None,
    ) -> Commit:
        """Start a commit; pass it to `write` and then to `commit`.

        Scratch files that writers which died left more than a day ago are removed here.
        """
        for stale in self.storage.stale_temps(older_than_s=86_400):
            stale.unlink(missing_ok=True)
        stamp = _now().strftime("%Y%m%dT%H%M%S%fZ")
        commit_id = f"{stamp}-{os.getpid()}-{os.urandom(4).hex()}"
        return Commit(commit_id, run_id, source_path, source_sha256, source_size)

    @contextmanager
    def transaction(self, run_id: str, *, source_path: str | None = None,
                    source_sha256: str | None = None,
                    source_size: int | None = None) -> Iterator[Commit]:
        """A commit for the block: recorded when the block ends, aborted (nothing of it
        visible) when the block raises."""
        commit = self.begin(run_id, source_path=source_path, source_sha256=source_sha256,
                            source_size=source_size)
        try:
            yield commit
        except BaseException:
            self.abort(commit)
            raise
        self.commit(commit)

    def write(self, commit: Commit, table: str, data: pa.Table) -> None:
        """Write ``data`` (rows of one partition) as Parquet files of ``commit``: one, or
        for a large table one per core, encoded at once (`PARALLEL_FILE_BYTES`).

        The files are complete on disk and renamed into their partition folder before
        this returns, but stay invisible until the commit is recorded.
        """
        if data.num_rows == 0:
            return
        parts = _parallel_parts(data)
        if parts == 1:
            handle = self.open_file(commit, table)
            handle.append(data)
            handle.close()
            return
        step = -(-data.num_rows // parts)
        handles = [self.open_file(commit, table) for _ in range(parts)]
        with ThreadPoolExecutor(parts) as pool:  # Parquet encoding releases the GIL
            list(pool.map(lambda handle, start: handle.append(data.slice(start, step)),
                          handles, range(0, data.num_rows, step)))
        for handle in handles:
            handle.close()

    def write_rows(self, commit: Commit, table: str, rows: list[dict[str, Any]]) -> None:
        """`write` for rows as dicts, built with the table's schema (so a column that the
        first row lacks is not dropped, and a missing key reads as NULL)."""
        self.write(commit, table, pa.Table.from_pylist(rows, schema=TABLES[table].schema))

    def open_file(self, commit: Commit, table: str) -> TableFile:
        """A file of ``table`` to fill with row groups of one partition."""
        return TableFile(self, commit, TABLES[table])

    def _publish(self, commit: Commit, spec: TableSpec, temp: Path, first: pa.Table,
                 rows: int, request_range: list[int]) -> None:
        relative = self._file_path(spec, commit, first, request_range)
        size = temp.stat().st_size
        self.storage.publish(temp, relative)
        commit.entries.append({"table": spec.name, "path": relative, "rows": rows,
                               "bytes": size})

    def commit(self, commit: Commit) -> None:
        """Make every file of ``commit`` visible at once by writing its manifest record."""
        created = _now().isoformat()
        files = [
            {
                "commit_id": commit.commit_id,
                **entry,
                "source_path": commit.source_path,
                "source_sha256": commit.source_sha256,
                "source_size": commit.source_size,
                "run_id": commit.run_id,
                "kvtrace_version": __version__,
                "created_at": created,
            }
            for entry in commit.entries
        ]
        payload = json.dumps({"commit_id": commit.commit_id, "files": files}, indent=1)
        self.storage.write_atomic(f"{MANIFEST_DIR}/{commit.commit_id}.json", payload.encode())

    def abort(self, commit: Commit) -> None:
        """Remove the files of a commit that will not be recorded."""
        for handle in list(commit.open_files):
            handle.discard()
        for entry in commit.entries:
            self.storage.remove(entry["path"])
        commit.entries.clear()

    def _file_path(self, spec: TableSpec, commit: Commit, first: pa.Table,
                   request_range: list[int]) -> str:
        """``<table>/<key>=<value>/.../<run>[-r<first>-<last>]-<commit>-<n>.parquet``.

        The partition values are those of the file's first row (callers write one
        partition per file).
        """
        parts = [spec.name]
        for column in spec.partition_by:
            value = partition_value(first[column][0].as_py())
            parts.append(f"{spec.partition_dir(column)}={value}")
        name = partition_value(commit.run_id)
        if request_range:
            name += f"-r{request_range[0]}-{request_range[1]}"
        name += f"-{commit.commit_id}-{len(commit.entries):04d}.parquet"
        return "/".join([*parts, name])


def _parallel_parts(data: pa.Table) -> int:
    """How many files to encode ``data`` into at once: one per core, each of at least
    `PARALLEL_FILE_BYTES` bytes in memory."""
    return max(1, min(os.cpu_count() or 1, data.num_rows, data.nbytes // PARALLEL_FILE_BYTES))


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
    """ZSTD; dictionaries for strings; delta encoding for integers and the sorted position
    lists, byte-stream split for floats (both smaller and faster to write than plain)."""
    encoding = {f"{name}.list.element": "DELTA_BINARY_PACKED"
                for name in data.column_names if name in _LIST_LEAVES}
    for column in data.schema:
        if pa.types.is_integer(column.type) or pa.types.is_timestamp(column.type):
            encoding[column.name] = "DELTA_BINARY_PACKED"
        elif pa.types.is_floating(column.type):
            encoding[column.name] = "BYTE_STREAM_SPLIT"
    return {
        "compression": "zstd",
        "compression_level": 3,
        "use_dictionary": [c for c in data.column_names if pa.types.is_string(data[c].type)],
        "column_encoding": encoding,
        "write_statistics": True,
    }
