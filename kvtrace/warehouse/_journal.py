"""The warehouse's journal: the Delta table ``_commits``, and the snapshots it defines.

Delta Lake commits one table at a time, while one kvtrace commit (a source, a collector
batch) may write several tables.  So each kvtrace commit first commits its files to each
table it writes, then appends one row to ``_commits`` naming the table versions it made.
The journal's version is the warehouse's version: a snapshot reads each table at the
newest version the journal names and keeps the files of journaled commits only, so the
files of a commit that has not reached the journal (still running, or killed) are never
seen, and ``--as-of VERSION`` reproduces exactly what that version showed.

A maintenance row may take commits back (``retracted``: a cleanup of commits whose
writer died, a repair of damaged files): a snapshot then leaves those commits out, and
their sources may be committed again.  The application transaction of a source counts
its generations: the n-th commit of a source after n - 1 retractions carries version n,
so the tables and the journal take it although they hold the earlier ones.
"""

from __future__ import annotations

import os
import re
import uuid
import weakref
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import CommitProperties, Transaction

from kvtrace.errors import JournalUnreadable, WarehouseError
from kvtrace.warehouse._delta_log import (
    LOG_DIR,
    DataFile,
    active_files,
    add_actions,
    create_table,
    ensure_columns,
    open_table,
    publish_file,
)
from kvtrace.warehouse._log_entry import refuse_damaged_journal_entry
from kvtrace.warehouse._storage import Storage
from kvtrace.warehouse.schema import JOURNAL

TABLE_COMMIT = pa.struct(
    [
        ("table", pa.string()),
        ("version", pa.int64()),
        ("commit_id", pa.string()),
        ("files", pa.int64()),
        ("rows", pa.int64()),
        ("bytes", pa.int64()),
    ]
)
RETRACTION = pa.struct([("commit_id", pa.string()), ("app_id", pa.string())])
JOURNAL_SCHEMA = pa.schema(
    [
        ("commit_id", pa.string()),
        ("operation", pa.string()),  # ingest | collect | optimize | cleanup | repair | migrate
        ("run_id", pa.string()),
        ("source_path", pa.string()),
        ("source_sha256", pa.string()),
        ("source_size", pa.int64()),
        ("kvtrace_version", pa.string()),
        ("created_at", pa.timestamp("us", tz="UTC")),
        ("tables", pa.list_(TABLE_COMMIT)),
        ("retracted", pa.list_(RETRACTION)),  # commits this row takes back (maintenance rows)
        ("warehouse_version", pa.int64()),  # the journal's version this row made
    ]
)
FILES_SCHEMA = pa.schema(
    [
        ("table", pa.string()),
        ("path", pa.string()),
        ("rows", pa.int64()),
        ("bytes", pa.int64()),
        ("commit_id", pa.string()),
        ("table_version", pa.int64()),
        ("min_run_id", pa.string()),
        ("max_run_id", pa.string()),
    ]
)
# The operations of journal rows that store no rows of their own (maintenance).
MAINTENANCE_OPERATIONS = frozenset({"optimize", "settle", "cleanup", "repair"})
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


def append(storage: Storage, row: dict[str, Any], app_id: str, generation: int = 1) -> bool:
    """Append ``row`` under the transaction ``app_id`` (its ``generation``); False when the
    journal already holds that generation (another process recorded the source first).

    The row carries the version it makes (``warehouse_version``, what ``--as-of`` takes):
    it is written as a Parquet file of its own, added to the log at exactly that version,
    and written again with the next version after another process's commit took it.  A
    journal written before a column was added gains it on the way.  Nothing is appended
    on top of an empty or garbled entry (`refuse_damaged_top`).
    """
    evolved = False
    while True:
        table = open_table(storage, JOURNAL)
        if table is None:
            raise WarehouseError(f"{storage.location} has no journal ({JOURNAL})")
        refuse_damaged_top(storage, table.version())
        if (table.transaction_version(app_id) or 0) >= generation:
            return False
        if not evolved and ensure_columns(table, JOURNAL_SCHEMA):
            evolved = True
            continue
        written = _write_row(storage, {**row, "warehouse_version": table.version() + 1})
        try:
            table.create_write_transaction(
                add_actions([written]),
                mode="append",
                schema=JOURNAL_SCHEMA,
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(app_id, generation)], max_commit_retries=0
                ),
            )
            _LISTED[storage] = len(table.file_uris()) + 1
            return True
        except CommitFailedError:
            storage.remove(written.path)  # stamped with a version another commit took
            continue


def listed_files(storage: Storage) -> int:
    """How many files the journal listed once this process's last `append` to it landed
    (0 before any): what tells a writer that the journal wants compacting."""
    return _LISTED.get(storage, 0)


# Per storage, the files the journal listed after this process's last append (see above).
_LISTED: weakref.WeakKeyDictionary[Storage, int] = weakref.WeakKeyDictionary()


def refuse_damaged_top(storage: Storage, version: int) -> None:
    """Raise a `WarehouseError` when the journal's entry of ``version`` (its newest) is
    empty or garbled: Delta Lake reads an empty entry as a commit that did nothing, and
    a commit on top of it would bury the damage under a sound entry."""
    raw = storage.read_bytes(f"{JOURNAL}/{LOG_DIR}/{version:020d}.json")
    if raw is not None:
        refuse_damaged_journal_entry(version, raw)


def _write_row(storage: Storage, row: dict[str, Any]) -> DataFile:
    """``row`` as a one-row Parquet file of the journal, published under a fresh name
    (Delta Lake's own writer would cost a command 20 MB and 8 ms more)."""
    temp = storage.new_temp(".parquet")
    pq.write_table(pa.Table.from_pylist([row], schema=JOURNAL_SCHEMA), temp)
    relative = f"{JOURNAL}/{row['commit_id']}-{uuid.uuid4().hex[:8]}.parquet"
    return publish_file(storage, temp, relative)


def holds(storage: Storage, app_id: str) -> bool:
    table = open_table(storage, JOURNAL)
    return table is not None and table.transaction_version(app_id) is not None


@dataclass
class Snapshot:
    """What one version of the warehouse shows."""

    version: int
    commits: pa.Table  # the journal's rows (JOURNAL_SCHEMA) less retracted commits
    files: pa.Table  # every visible data file (FILES_SCHEMA), path relative to the root
    retractions: Counter[str]  # application transaction id -> commits of it taken back

    def table_files(self, table: str) -> pa.Table:
        return self.files.filter(pc.equal(self.files["table"], table))

    def generation(self, app_id: str) -> int:
        """The generation a new commit of ``app_id`` carries."""
        return self.retractions[app_id] + 1


def load(storage: Storage, version: int | None = None) -> Snapshot:
    """The snapshot of the journal's ``version`` (the newest when None)."""
    journal = open_table(storage, JOURNAL)
    if journal is None:
        raise WarehouseError(
            f"{storage.location} has no journal ({JOURNAL}); it is not a "
            "kvtrace warehouse of this version"
        )
    newest = journal.version()
    if version is not None:
        if not 0 <= version <= newest:
            raise WarehouseError(
                f"the warehouse has no version {version}: its versions are 0 to {newest}"
            )
        try:
            journal.load_as_version(version)
        except DeltaError as exc:
            raise WarehouseError(
                f"version {version} of the warehouse is no longer readable (vacuumed?): {exc}"
            ) from None
    try:
        rows = _read(storage, journal)
    except JournalUnreadable as exc:
        if version is None:
            raise
        raise WarehouseError(  # compaction took its files out, and vacuum deleted them
            f"version {version} of the warehouse is no longer readable (vacuumed?): {exc.what}"
        ) from None
    commits, retractions = _standing(rows)
    return Snapshot(journal.version(), commits, _visible_files(storage, commits), retractions)


def _read(storage: Storage, journal: DeltaTable, cached: bool = True) -> pa.Table:
    """The journal's rows at its loaded version.  Its files are read one by one with
    Parquet's own reader: Arrow's dataset layer, which ``to_pyarrow_table`` goes through,
    costs a command a quarter of a second and pandas' memory on import.

    A journal file never changes once written (each commit adds one under a fresh
    name; a compaction merges them into new ones), so the files a storage has read are
    kept (`_JOURNAL_FILES`) while the journal lists them, and each read fetches only the
    new ones: an ingest of many files commits once per file, and would otherwise read
    every earlier commit's row again each time.  ``cached=False`` reads every file
    (``kvtrace check`` and repair look at what is on disk).
    """
    filesystem, base = storage.arrow_filesystem()
    kept = _JOURNAL_FILES.setdefault(storage, {}) if cached else {}
    try:
        paths = [f"{base}/{JOURNAL}/{path}" for path in active_files(journal)["path"].to_pylist()]
        missing = [path for path in paths if path not in kept]
        with ThreadPoolExecutor(max_workers=min(8, max(1, len(missing)))) as pool:
            rows = pool.map(lambda path: _read_file(filesystem, path), missing)
            read = dict(zip(missing, rows, strict=True))
        parts = [kept[path] if path in kept else read[path] for path in paths]
        if cached:
            _keep(kept, paths, read)
        data = (
            pa.concat_tables(parts, promote_options="default")
            if parts
            else JOURNAL_SCHEMA.empty_table()
        )
    except (DeltaError, OSError, pa.ArrowInvalid) as exc:
        raise JournalUnreadable(f"the journal of the warehouse is unreadable ({exc})") from None
    return _distinct(_conform(data))


def _keep(kept: dict[str, pa.Table], paths: list[str], read: dict[str, pa.Table]) -> None:
    """Keep the rows of the files the journal lists (``paths``): those kept already, and
    those just ``read`` up to `KEPT_FILES` (a journal that long wants compacting)."""
    listed = set(paths)
    for gone in [path for path in kept if path not in listed]:
        del kept[gone]
    kept.update(list(read.items())[: max(0, KEPT_FILES - len(kept))])


def _distinct(rows: pa.Table) -> pa.Table:
    """Each journal row once.  A compaction's entry that a repair wrote again as an empty
    commit lists the files that compaction merged again, beside the file a later
    compaction merged them into: their rows would be read twice."""
    keys = ["commit_id", "warehouse_version", "created_at"]
    numbered = rows.select(keys).append_column("row", pa.array(range(rows.num_rows), pa.int64()))
    first = numbered.group_by(keys, use_threads=False).aggregate([("row", "min")])
    if first.num_rows == rows.num_rows:
        return rows
    return rows.take(pc.sort_indices(first["row_min"]))


def _conform(data: pa.Table) -> pa.Table:
    """Journal rows in `JOURNAL_SCHEMA` (a journal of before a column was added lacks it)."""
    for column in JOURNAL_SCHEMA:
        if column.name not in data.column_names:
            data = data.append_column(column.name, pa.nulls(data.num_rows, column.type))
    return data.select(JOURNAL_SCHEMA.names).cast(JOURNAL_SCHEMA)


def read_files(storage: Storage, paths: list[str]) -> pa.Table:
    """The rows of the journal's files ``paths`` (in its folder) that can be read, read
    from disk whether or not the log lists them."""
    filesystem, base = storage.arrow_filesystem()
    parts = []
    for path in paths:
        try:
            parts.append(_read_file(filesystem, f"{base}/{JOURNAL}/{path}"))
        except (OSError, pa.ArrowInvalid):
            continue
    if not parts:
        return JOURNAL_SCHEMA.empty_table()
    return _conform(pa.concat_tables(parts, promote_options="default"))


# Per storage, the journal files it has read: path -> rows (see `_read`); at most
# KEPT_FILES of them (one-row tables of a few KB each).
KEPT_FILES = 20_000
_JOURNAL_FILES: weakref.WeakKeyDictionary[Storage, dict[str, pa.Table]] = (
    weakref.WeakKeyDictionary()
)


def _read_file(filesystem: pafs.FileSystem, path: str) -> pa.Table:
    with filesystem.open_input_file(path) as source:
        return pq.ParquetFile(source).read()


def _standing(rows: pa.Table) -> tuple[pa.Table, Counter[str]]:
    """The journal's rows less the commits later rows took back, and how often each
    application transaction was taken back."""
    taken_back = pc.list_flatten(rows["retracted"]).combine_chunks()
    if len(taken_back) == 0:
        return rows, Counter()
    ids = taken_back.field("commit_id")
    standing = rows.filter(pc.invert(pc.is_in(rows["commit_id"], value_set=ids)))
    return standing, Counter(taken_back.field("app_id").to_pylist())


def newest_commits(storage: Storage) -> tuple[int, pa.Table]:
    """The journal's newest version and its standing rows, without listing any table's
    files."""
    journal = open_table(storage, JOURNAL)
    if journal is None:
        raise WarehouseError(f"{storage.location} has no journal ({JOURNAL})")
    return journal.version(), _standing(_read(storage, journal))[0]


def load_rows(storage: Storage, version: int | None = None, cached: bool = True) -> pa.Table:
    """The journal's standing rows at ``version`` (the newest when None), without
    opening any table (``cached``: see `_read`)."""
    journal = open_table(storage, JOURNAL, version)
    if journal is None:
        raise WarehouseError(f"{storage.location} has no journal ({JOURNAL})")
    return _standing(_read(storage, journal, cached))[0]


def every_row(storage: Storage) -> pa.Table:
    """Every row of the journal's newest version, the commits taken back included, read
    from disk."""
    journal = open_table(storage, JOURNAL)
    if journal is None:
        raise WarehouseError(f"{storage.location} has no journal ({JOURNAL})")
    return _read(storage, journal, cached=False)


def retractions(storage: Storage) -> Counter[str]:
    """How often the journal took back commits of each application transaction."""
    journal = open_table(storage, JOURNAL)
    if journal is None:
        return Counter()
    return _standing(_read(storage, journal))[1]


def named_versions(commits: pa.Table) -> dict[str, int]:
    """Per table, the newest version the journal's rows name: the one snapshots read."""
    entries = pc.list_flatten(commits["tables"]).combine_chunks()
    newest: dict[str, int] = {}
    for table, version in zip(
        entries.field("table").to_pylist(), entries.field("version").to_pylist(), strict=True
    ):
        newest[table] = max(version, newest.get(table, -1))
    return newest


def journaled_ids(commits: pa.Table) -> set[str]:
    """The ids of the commits whose files ``commits`` makes visible."""
    entries = pc.list_flatten(commits["tables"]).combine_chunks()
    return set(entries.field("commit_id").to_pylist())


def files_at(storage: Storage, table: str, version: int) -> pa.Table:
    """The files of ``table`` at ``version`` (`active_files`).  A version's files never
    change, so the newest version read of each table is kept (`_TABLE_FILES`): an ingest
    of many files works out a snapshot per file, and most of the tables it names have
    not moved since the last one."""
    kept = _TABLE_FILES.setdefault(storage, {})
    if table in kept and kept[table][0] == version:
        return kept[table][1]
    delta = open_table(storage, table, version)
    if delta is None:
        raise WarehouseError(f"the journal names table {table}, which {storage.location} lacks")
    files = active_files(delta)
    if version >= kept.get(table, (-1, files))[0]:
        kept[table] = (version, files)
    return files


# Per storage, the newest version read of each table and its files (see `files_at`).
_TABLE_FILES: weakref.WeakKeyDictionary[Storage, dict[str, tuple[int, pa.Table]]] = (
    weakref.WeakKeyDictionary()
)


def _visible_files(storage: Storage, commits: pa.Table) -> pa.Table:
    journaled = journaled_ids(commits)
    parts = []
    for table, version in sorted(named_versions(commits).items()):
        files = files_at(storage, table, version)
        paths = files["path"].to_pylist()
        ids = [commit_of(p) for p in paths]
        keep = [i is None or i in journaled for i in ids]
        kept_ids = [i for i, kept in zip(ids, keep, strict=True) if kept]
        files = files.filter(pa.array(keep, pa.bool_()))
        parts.append(
            pa.table(
                {
                    "table": pa.repeat(pa.scalar(table), files.num_rows),
                    "path": pc.binary_join_element_wise(table, files["path"], "/"),
                    "rows": files["num_records"],
                    "bytes": files["size_bytes"],
                    "commit_id": pa.array(kept_ids, pa.string()),
                    "table_version": pa.repeat(pa.scalar(version, pa.int64()), files.num_rows),
                    "min_run_id": files["min_run_id"],
                    "max_run_id": files["max_run_id"],
                },
                schema=FILES_SCHEMA,
            )
        )
    if not parts:
        return FILES_SCHEMA.empty_table()
    return pa.concat_tables(parts).sort_by([("table", "ascending"), ("path", "ascending")])
