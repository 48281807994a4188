"""The warehouse's journal: the Delta table ``_commits``, and the snapshots it defines.

Delta Lake commits one table at a time, while one kvtrace commit (a source, a collector
batch) may write several tables.  So each kvtrace commit first commits its files to each
table it writes, then appends one row to ``_commits`` naming the table versions it made.
The journal's version is the warehouse's version: a snapshot reads each table at the
newest version the journal names and keeps the files of journaled commits only, so the
files of a commit that has not reached the journal (still running, or killed) are never
seen, and ``--as-of VERSION`` reproduces exactly what that version showed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import CommitProperties, Transaction

from kvtrace.errors import WarehouseError
from kvtrace.warehouse.delta_log import active_files, create_table, open_table
from kvtrace.warehouse.storage import Storage

JOURNAL = "_commits"
TABLE_COMMIT = pa.struct([
    ("table", pa.string()), ("version", pa.int64()), ("commit_id", pa.string()),
    ("files", pa.int64()), ("rows", pa.int64()), ("bytes", pa.int64()),
])
JOURNAL_SCHEMA = pa.schema([
    ("commit_id", pa.string()),
    ("operation", pa.string()),  # ingest | collect | optimize | migrate
    ("run_id", pa.string()),
    ("source_path", pa.string()),
    ("source_sha256", pa.string()),
    ("source_size", pa.int64()),
    ("kvtrace_version", pa.string()),
    ("created_at", pa.timestamp("us", tz="UTC")),
    ("tables", pa.list_(TABLE_COMMIT)),
])
FILES_SCHEMA = pa.schema([
    ("table", pa.string()), ("path", pa.string()), ("rows", pa.int64()),
    ("bytes", pa.int64()), ("commit_id", pa.string()), ("table_version", pa.int64()),
    ("min_run_id", pa.string()), ("max_run_id", pa.string()),
])
# A kvtrace data file ends in -<commit id>-<nnnn>.parquet; files that the table format's
# own compaction wrote carry none (they only ever hold rows of journaled commits).
_COMMIT_IN_NAME = re.compile(r"-(\d{8}T\d{12}Z-[0-9a-f]{8})-\d{4}\.parquet$")


def new_commit_id() -> str:
    """A fresh commit id: its time, then random hex (file names sort by commit time)."""
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S%fZ}-{os.urandom(4).hex()}"


def commit_of(path: str) -> str | None:
    """The kvtrace commit id in a data file's name (None for compacted files)."""
    match = _COMMIT_IN_NAME.search(path)
    return match[1] if match else None


def create(storage: Storage) -> None:
    create_table(storage, JOURNAL, JOURNAL_SCHEMA)


def append(storage: Storage, row: dict[str, Any], app_id: str) -> bool:
    """Append ``row`` under the transaction ``app_id``; False when the journal already
    holds it (another process recorded the same source first)."""
    data = pa.Table.from_pylist([row], schema=JOURNAL_SCHEMA)
    while True:
        table = open_table(storage, JOURNAL)
        if table is None:
            raise WarehouseError(f"{storage.location} has no journal ({JOURNAL})")
        if table.transaction_version(app_id) is not None:
            return False
        try:
            write_deltalake(table, data, mode="append", commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id, 1)]))
            return True
        except CommitFailedError:
            continue


def holds(storage: Storage, app_id: str) -> bool:
    table = open_table(storage, JOURNAL)
    return table is not None and table.transaction_version(app_id) is not None


@dataclass
class Snapshot:
    """What one version of the warehouse shows."""

    version: int
    commits: pa.Table  # the journal's rows (JOURNAL_SCHEMA)
    files: pa.Table  # every visible data file (FILES_SCHEMA), path relative to the root

    def table_files(self, table: str) -> pa.Table:
        return self.files.filter(pc.equal(self.files["table"], table))


def load(storage: Storage, version: int | None = None) -> Snapshot:
    """The snapshot of the journal's ``version`` (the newest when None)."""
    journal = open_table(storage, JOURNAL)
    if journal is None:
        raise WarehouseError(f"{storage.location} has no journal ({JOURNAL}); it is not a "
                             "kvtrace warehouse of this version")
    newest = journal.version()
    if version is not None:
        if not 0 <= version <= newest:
            raise WarehouseError(f"the warehouse has no version {version}: its versions "
                                 f"are 0 to {newest}")
        try:
            journal.load_as_version(version)
        except DeltaError as exc:
            raise WarehouseError(f"version {version} of the warehouse is no longer "
                                 f"readable (vacuumed?): {exc}") from None
    commits = _read(journal)
    return Snapshot(journal.version(), commits, _visible_files(storage, commits))


def _read(journal: DeltaTable) -> pa.Table:
    try:
        data = journal.to_pyarrow_table()
    except (DeltaError, OSError) as exc:
        raise WarehouseError(f"the journal of the warehouse is unreadable: {exc}") from None
    return data.select(JOURNAL_SCHEMA.names).cast(JOURNAL_SCHEMA)


def newest_commits(storage: Storage) -> tuple[int, pa.Table]:
    """The journal's newest version and its rows, without listing any table's files."""
    journal = open_table(storage, JOURNAL)
    if journal is None:
        raise WarehouseError(f"{storage.location} has no journal ({JOURNAL})")
    return journal.version(), _read(journal)


def journaled_ids(commits: pa.Table) -> set[str]:
    """The ids of the commits whose files ``commits`` makes visible."""
    entries = pc.list_flatten(commits["tables"]).combine_chunks()
    return set(entries.field("commit_id").to_pylist())


def _visible_files(storage: Storage, commits: pa.Table) -> pa.Table:
    entries = pc.list_flatten(commits["tables"]).combine_chunks()
    tables = entries.field("table").to_pylist()
    versions = entries.field("version").to_pylist()
    newest: dict[str, int] = {}
    for table, version in zip(tables, versions, strict=True):
        newest[table] = max(version, newest.get(table, -1))
    journaled = journaled_ids(commits)
    parts = []
    for table, version in sorted(newest.items()):
        delta = open_table(storage, table, version)
        if delta is None:
            raise WarehouseError(f"the journal names table {table}, which "
                                 f"{storage.location} lacks")
        files = active_files(delta)
        paths = files["path"].to_pylist()
        ids = [commit_of(p) for p in paths]
        keep = [i is None or i in journaled for i in ids]
        kept_ids = [i for i, kept in zip(ids, keep, strict=True) if kept]
        files = files.filter(pa.array(keep))
        parts.append(pa.table({
            "table": pa.repeat(pa.scalar(table), files.num_rows),
            "path": pc.binary_join_element_wise(table, files["path"], "/"),
            "rows": files["num_records"], "bytes": files["size_bytes"],
            "commit_id": pa.array(kept_ids, pa.string()),
            "table_version": pa.repeat(pa.scalar(version, pa.int64()), files.num_rows),
            "min_run_id": files["min_run_id"], "max_run_id": files["max_run_id"],
        }, schema=FILES_SCHEMA))
    if not parts:
        return FILES_SCHEMA.empty_table()
    return pa.concat_tables(parts).sort_by([("table", "ascending"), ("path", "ascending")])
