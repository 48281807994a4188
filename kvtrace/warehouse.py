"""Open a warehouse: its layout, manifest, commits and DuckDB connections.

A warehouse is a folder of hive-partitioned Parquet files plus ``_manifest/``, one JSON
file per commit listing the files that commit published.  Readers see exactly the files
the manifest lists, so a writer that dies before its manifest record lands leaves
nothing visible.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kvtrace import __version__
from kvtrace.errors import WarehouseError
from kvtrace.schema import MANIFEST, TABLES, TableSpec
from kvtrace.storage import LocalStorage, partition_value

DEFAULT_PATH = "kvtrace-warehouse"
MANIFEST_DIR = "_manifest"
SCHEMA_DIR = "_schema"
MARKER = "kvtrace.json"
_LIST_LEAVES = {"selected_pos", "hbm_hit_blocks", "local_pool_hit_blocks", "remote_pool_hit_blocks"}


def default_path() -> Path:
    """``$KVTRACE_WAREHOUSE`` when set, else ``./kvtrace-warehouse``."""
    return Path(os.environ.get("KVTRACE_WAREHOUSE") or DEFAULT_PATH)


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
            if self.root.exists() and any(self.root.iterdir()):
                raise WarehouseError(
                    f"{self.root} exists and is not a kvtrace warehouse; choose an empty folder"
                )
            self.root.mkdir(parents=True, exist_ok=True)
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
        """Every published file, one row each (the columns of `kvtrace.schema.MANIFEST`)."""
        rows: list[dict[str, Any]] = []
        for record in self.storage.list(MANIFEST_DIR, ".json"):
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

    def has_source(self, sha256: str, run_id: str) -> bool:
        """Whether these exact source bytes were already ingested into ``run_id``."""
        manifest = self.manifest()
        same = pc.and_(
            pc.equal(manifest["source_sha256"], sha256),
            pc.equal(manifest["run_id"], run_id),
        )
        return bool(pc.any(same).as_py())

    def fingerprint(self) -> str:
        """A short hash of the manifest: equal fingerprints mean equal visible data."""
        names = sorted(p.name for p in self.storage.list(MANIFEST_DIR, ".json"))
        return hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]

    # -- writing -----------------------------------------------------------------------------

    def begin(
        self,
        run_id: str,
        *,
        source_path: str | None = None,
        source_sha256: str | None = None,
        source_size: int | None = None,
    ) -> Commit:
        """Start a commit; pass it to `write` and then to `commit`."""
        stamp = _now().strftime("%Y%m%dT%H%M%S%fZ")
        commit_id = f"{stamp}-{os.getpid()}-{os.urandom(4).hex()}"
        return Commit(commit_id, run_id, source_path, source_sha256, source_size)

    def write(self, commit: Commit, table: str, data: pa.Table) -> None:
        """Write ``data`` (rows of one partition) as one Parquet file of ``commit``.

        The file is complete on disk and renamed into its partition folder before this
        returns, but stays invisible until the commit is recorded.
        """
        if data.num_rows == 0:
            return
        spec = TABLES[table]
        data = _conform(data, spec)
        relative = self._file_path(spec, commit, data)
        temp = self.storage.new_temp(".parquet")
        _write_parquet(data, temp, spec)
        size = temp.stat().st_size
        self.storage.publish(temp, relative)
        commit.entries.append(
            {
                "table": table,
                "path": relative,
                "rows": data.num_rows,
                "bytes": size,
            }
        )

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
        for entry in commit.entries:
            self.storage.remove(entry["path"])
        commit.entries.clear()

    def _file_path(self, spec: TableSpec, commit: Commit, data: pa.Table) -> str:
        """``<table>/<key>=<value>/.../<run>[-r<first>-<last>]-<commit>-<n>.parquet``."""
        parts = [spec.name]
        for column in spec.partition_by:
            values = data[column].unique().to_pylist()
            if len(values) != 1:
                raise WarehouseError(
                    f"one file of {spec.name} must hold one {column}, got {values}")
            parts.append(f"{column}={partition_value(values[0])}")
        name = partition_value(commit.run_id)
        if "request_id" in data.column_names:
            ids = data["request_id"]
            name += f"-r{pc.min(ids).as_py()}-{pc.max(ids).as_py()}"
        name += f"-{commit.commit_id}-{len(commit.entries):04d}.parquet"
        return "/".join([*parts, name])

    # -- reading -----------------------------------------------------------------------------

    def connect(self):
        """A DuckDB connection with every table and view of this warehouse.

        See `kvtrace.catalog.open_connection`.
        """
        from kvtrace.catalog import open_connection

        return open_connection(self)


def connect(path: str | os.PathLike[str] | None = None):
    """Open the warehouse at ``path`` (default: `default_path`) and return a DuckDB connection.

    Examples
    --------
    >>> con = kvtrace.connect("kvtrace-warehouse")  # doctest: +SKIP
    >>> con.sql("SELECT * FROM dsa_summary").pl()  # doctest: +SKIP
    """
    return Warehouse(path or default_path()).connect()


def _conform(data: pa.Table, spec: TableSpec) -> pa.Table:
    """Order, fill and cast ``data`` to the table's schema (missing columns become NULL)."""
    columns = []
    for column in spec.schema:
        if column.name in data.column_names:
            columns.append(data[column.name].cast(column.type))
        else:
            columns.append(pa.nulls(data.num_rows, column.type))
    return pa.Table.from_arrays(columns, schema=spec.schema)


def _write_parquet(data: pa.Table, path: Path, spec: TableSpec) -> None:
    """ZSTD, delta-encoded sorted position lists, one row group per call where it fits."""
    list_leaves = [
        f"{name}.list.element" for name in data.column_names if name in _LIST_LEAVES
    ]
    pq.write_table(
        data,
        path,
        compression="zstd",
        compression_level=3,
        use_dictionary=[c for c in data.column_names if pa.types.is_string(data[c].type)],
        column_encoding={leaf: "DELTA_BINARY_PACKED" for leaf in list_leaves},
        row_group_size=max(data.num_rows, 1),
        write_statistics=True,
    )
