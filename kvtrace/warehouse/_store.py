"""Open a warehouse: its layout, its tables and its commits.

A warehouse is a folder (or an object-store prefix) holding one Delta Lake table per
kvtrace table, plus the journal ``_commits`` (`kvtrace.warehouse._journal`).  A commit
writes finished Parquet files, adds them to each table's log, and becomes visible when
its journal row lands; a writer that dies before then leaves nothing kvtrace shows.  A
commit that leaves a table with many small files compacts it afterwards
(`kvtrace.warehouse._compaction`), outside the run's lock.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from kvtrace._version import __version__
from kvtrace.errors import WarehouseError
from kvtrace.warehouse import snapshot_cache
from kvtrace.warehouse._commit import COLLECTOR_APP_PREFIX, Commit
from kvtrace.warehouse._open_storage import open_storage
from kvtrace.warehouse._storage import (
    IN_FLIGHT_DIR,
    LOCK_DIR,
    TMP_DIR,
    LocalStorage,
    Storage,
)
from kvtrace.warehouse.schema import JOURNAL, LOCK_TABLE, TABLE_NAMES, schema_digest

if TYPE_CHECKING:  # Arrow, Delta Lake and the writers load with the code that needs them:
    # a query that finds its snapshot kept on disk needs none of them
    import pyarrow as pa

    from kvtrace.warehouse._delta_log import DataFile
    from kvtrace.warehouse._journal import Snapshot
    from kvtrace.warehouse.table_file import TableFile

SCHEMA_DIR = "_schema"
SCHEMA_STAMP = "_stamp"  # the digest of the schemas the files were written for
MARKER = "kvtrace.json"
FORMAT = 2  # 1: the manifest of kvtrace's own (converted by `kvtrace migrate`)
_OWN_ENTRIES = {
    MARKER,
    SCHEMA_DIR,
    TMP_DIR,
    LOCK_DIR,
    IN_FLIGHT_DIR,
    LOCK_TABLE,
    JOURNAL,
    *TABLE_NAMES,
}


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Warehouse:
    """A kvtrace warehouse at ``location``: a folder, or an object-store URI.

    Parameters
    ----------
    location
        The warehouse folder or URI (``s3://bucket/prefix``).
    create
        Create the warehouse when it does not exist yet; otherwise a missing warehouse
        is an error.
    as_of
        Show the warehouse as it was at this version (read-only).
    """

    def __init__(
        self, location: str | os.PathLike[str], *, create: bool = False, as_of: int | None = None
    ) -> None:
        self.storage: Storage = open_storage(location)
        self.location = self.storage.location
        self.root = self.storage.root if isinstance(self.storage, LocalStorage) else None
        self.as_of = as_of
        self._snapshot: Snapshot | None = None
        self._due: set[str] = set()  # tables that commits left due for compaction
        self._run_locks = 0  # run locks this object holds (compaction waits for them)
        marker = self.storage.read_bytes(MARKER)
        if marker is None:
            if not create:
                raise WarehouseError(
                    f"no kvtrace warehouse at {self.location}; create one with 'kvtrace ingest'"
                )
            self._create()
            self._ensure_schema_files()
        elif json.loads(marker).get("format") != FORMAT:
            raise WarehouseError(
                f"{self.location} is a warehouse of an earlier kvtrace (its own manifest); "
                f"convert it with 'kvtrace -w {self.location} migrate'"
            )
        elif self.root is not None:  # an object store's views take the schema from Arrow
            self._ensure_schema_files()
        if as_of is not None:
            self.snapshot()  # a version asked for must exist, whatever is read of it

    # -- layout ---------------------------------------------------------------------------

    def _create(self) -> None:
        """Lay out a new warehouse.  Processes creating one at once only ever add
        kvtrace's own entries, and the marker comes last, so any of them may finish it."""
        foreign = [name for name in self.storage.listdir() if name not in _OWN_ENTRIES]
        if foreign:
            raise WarehouseError(
                f"{self.location} exists and is not a kvtrace warehouse (it "
                f"holds {foreign[0]}); choose an empty folder"
            )
        create_tables(self.storage)
        self.storage.write_atomic(MARKER, json.dumps({"format": FORMAT}).encode())

    def _ensure_schema_files(self) -> None:
        """Keep one empty Parquet file per table, so every view has its columns when empty.

        A stamp of the schemas they were last written for spares a command reading every
        file's schema when nothing changed (one read and one listing instead)."""
        stamp = schema_digest().encode()
        present = set(self.storage.listdir(SCHEMA_DIR))
        if (
            self.storage.read_bytes(f"{SCHEMA_DIR}/{SCHEMA_STAMP}") == stamp
            and {f"{name}.parquet" for name in TABLE_NAMES} <= present
        ):
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        from kvtrace.warehouse.schema.tables import TABLES

        filesystem, base = self.storage.arrow_filesystem()
        for spec in TABLES.values():
            relative = f"{SCHEMA_DIR}/{spec.name}.parquet"
            try:
                if pq.read_schema(f"{base}/{relative}", filesystem=filesystem).equals(spec.schema):
                    continue
            except (OSError, pa.ArrowInvalid):
                pass
            if self.as_of is not None:
                continue  # a read-only view of the past writes nothing
            temp = self.storage.new_temp(".parquet")
            pq.write_table(spec.schema.empty_table(), temp)
            self.storage.publish(temp, relative)
        if self.as_of is None:
            self.storage.write_atomic(f"{SCHEMA_DIR}/{SCHEMA_STAMP}", stamp)

    def uri(self, relative: str) -> str:
        """The name DuckDB and Arrow read a warehouse file by."""
        return self.storage.uri(relative)

    def schema_file(self, table: str) -> str:
        return self.uri(f"{SCHEMA_DIR}/{table}.parquet")

    # -- reading ----------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """What the warehouse shows: the ``as_of`` version, or the newest one (read again
        when another commit has landed since)."""
        if self.as_of is not None:
            if self._snapshot is None:
                place = snapshot_cache.stored(self.storage, self.as_of)
                self._snapshot = self._load_snapshot(place, self.as_of)
                self._check_present(self._snapshot)
            return self._snapshot
        newest = snapshot_cache.newest_version(self.storage)
        if self._snapshot is None or newest is None or newest != self._snapshot.version:
            place = None if newest is None else snapshot_cache.stored(self.storage, newest)
            self._snapshot = self._load_snapshot(place, None)
        return self._snapshot

    def _load_snapshot(
        self, place: snapshot_cache.StoredSnapshot | None, version: int | None
    ) -> Snapshot:
        """The snapshot of ``version`` (the newest when None): as kept at ``place`` by the
        first reader that needed it on disk (`stored_snapshot`), else computed from the
        journal (and not kept: an ingest works out one per file it commits, which only
        its own checks read)."""
        if place is not None and (kept := snapshot_cache.load(place)) is not None:
            return kept
        from kvtrace.warehouse import _journal as journal

        return journal.load(self.storage, version)

    def stored_snapshot(self) -> snapshot_cache.StoredSnapshot | None:
        """Where the snapshot the warehouse shows is kept on disk, for readers that read it
        there (DuckDB): computed and kept first when no process has.  None where it
        cannot be kept (or a commit landed meanwhile): read `snapshot` instead."""
        place = snapshot_cache.stored(self.storage, self.as_of)
        if place is None:
            return None
        if not place.present():
            snapshot = self.snapshot()
            if snapshot.version != place.version:
                return None
            snapshot_cache.keep(place, snapshot)
        return place if place.present() else None

    def _check_present(self, snapshot: Snapshot) -> None:
        """An earlier version is readable while vacuum has not deleted its files."""
        paths = snapshot.files["path"].to_pylist()
        present: set[str] = set()
        for table in sorted({p.split("/", 1)[0] for p in paths}):
            present |= set(self.storage.list_files(table))
        gone = [p for p in paths if p not in present]
        if gone:
            raise WarehouseError(
                f"version {snapshot.version} of the warehouse is no longer readable "
                f"(vacuumed?): {len(gone)} of its {len(paths)} files are gone; "
                "'kvtrace sql \"FROM warehouse_commits\"' lists the versions"
            )

    @property
    def version(self) -> int:
        """The warehouse's version (its journal's): every commit adds one."""
        return self.snapshot().version

    def files(self, table: str) -> list[str]:
        """Paths (relative to the root) of the visible files of ``table``."""
        paths: list[str] = self.snapshot().table_files(table)["path"].to_pylist()
        return paths

    def run_files(self, run_id: str, table: str) -> list[str]:
        """Paths of the visible files of ``table`` that may hold rows of ``run_id`` (by
        their statistics)."""
        import pyarrow.compute as pc

        files = self.snapshot().table_files(table)
        low, high = files["min_run_id"], files["max_run_id"]
        covers = pc.or_kleene(
            pc.is_null(low), pc.and_(pc.less_equal(low, run_id), pc.greater_equal(high, run_id))
        )
        paths: list[str] = files.filter(covers)["path"].to_pylist()
        return paths

    def read_files(self, paths: list[str], **options: Any) -> pa.Table:
        """``pyarrow.parquet.read_table`` over warehouse files (paths relative to the root)."""
        import pyarrow.parquet as pq

        filesystem, base = self.storage.arrow_filesystem()
        return pq.read_table(
            [f"{base}/{p}" for p in paths], filesystem=filesystem, partitioning=None, **options
        )

    def read_key_columns(
        self, paths: list[str], columns: list[str], dictionary: tuple[str, ...] = ("run_id",)
    ) -> pa.Table:
        """Some columns of warehouse files, read one file and one row group at a time on
        one thread (far less memory in flight than `read_files`); the ``dictionary``
        columns come dictionary-encoded."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        filesystem, base = self.storage.arrow_filesystem()
        parts: list[pa.Table] = []
        for path in paths:
            with filesystem.open_input_file(f"{base}/{path}") as handle:
                parquet = pq.ParquetFile(handle, read_dictionary=dictionary, pre_buffer=False)
                for group in range(parquet.num_row_groups):
                    parts.append(parquet.read_row_group(group, columns, use_threads=False))
        return pa.concat_tables(parts).combine_chunks()

    def source_hashes(self, run_id: str, size: int) -> set[str]:
        """The sha256 of every source of ``size`` bytes already ingested into ``run_id``
        (none: a source of that size is surely new to it, without hashing it first)."""
        import pyarrow.compute as pc

        commits = self.snapshot().commits
        same = commits.filter(
            pc.and_(pc.equal(commits["source_size"], size), pc.equal(commits["run_id"], run_id))
        )
        return set(same["source_sha256"].to_pylist())

    # -- writing -----------------------------------------------------------------------------

    def _writable(self) -> None:
        if self.as_of is not None:
            raise WarehouseError(f"version {self.as_of} of {self.location} is read-only")

    @contextmanager
    def run_lock(self, run_id: str) -> Iterator[None]:
        """A context manager that holds ``run_id``'s lock: what one process reads of the
        run and then commits is not interleaved with another's (request id mapping,
        record identity).  A compaction that the commits inside made due runs once it is
        let go of, so that the run's other writers do not wait for it."""
        with self.storage.lock(f"run-{run_id}"):
            self._run_locks += 1
            try:
                yield
            finally:
                self._run_locks -= 1
        if self._run_locks == 0:
            self._compact_due()

    def begin(
        self,
        run_id: str,
        *,
        source_path: str | None = None,
        source_sha256: str | None = None,
        source_size: int | None = None,
        operation: str = "ingest",
    ) -> Commit:
        """Start a commit; pass it to `write` and then to `commit`.

        Scratch files that writers which died left more than a day ago are removed here,
        and a setting of compaction after commits that cannot be read is refused.
        """
        self._writable()
        for stale in self.storage.stale_temps(older_than_s=86_400):
            stale.unlink(missing_ok=True)
        from kvtrace.warehouse._compaction import auto_threshold
        from kvtrace.warehouse._journal import new_commit_id

        auto_threshold()

        commit_id = new_commit_id()
        return Commit(
            commit_id,
            run_id,
            source_path,
            source_sha256,
            source_size,
            operation,
            hold=self.storage.hold_commit(commit_id),
        )

    @contextmanager
    def transaction(
        self,
        run_id: str,
        *,
        source_path: str | None = None,
        source_sha256: str | None = None,
        source_size: int | None = None,
        operation: str = "ingest",
    ) -> Iterator[Commit]:
        """A commit for the block: recorded when the block ends, aborted (nothing of it
        visible) when the block raises."""
        commit = self.begin(
            run_id,
            source_path=source_path,
            source_sha256=source_sha256,
            source_size=source_size,
            operation=operation,
        )
        try:
            yield commit
        except BaseException:
            self.abort(commit)
            raise
        self.commit(commit)

    def write(self, commit: Commit, table: str, data: pa.Table) -> None:
        """Write ``data`` (rows of one partition) as Parquet files of ``commit``: one, or
        for a large table one per core, encoded at once (`kvtrace.warehouse.table_file`).

        The files are complete in the warehouse before this returns, but stay invisible
        until the commit is recorded.
        """
        from kvtrace.warehouse.schema.tables import TABLES
        from kvtrace.warehouse.table_file import write_table

        write_table(self.storage, commit, TABLES[table], data)

    def write_rows(self, commit: Commit, table: str, rows: list[dict[str, Any]]) -> None:
        """`write` for rows as dicts, built with the table's schema (so a column that the
        first row lacks is not dropped, and a missing key reads as NULL)."""
        import pyarrow as pa

        from kvtrace.warehouse.schema.tables import TABLES

        self.write(commit, table, pa.Table.from_pylist(rows, schema=TABLES[table].schema))

    def open_file(self, commit: Commit, table: str) -> TableFile:
        """A file of ``table`` to fill with row groups of one partition."""
        from kvtrace.warehouse.schema.tables import TABLES
        from kvtrace.warehouse.table_file import TableFile

        return TableFile(self.storage, commit, TABLES[table])

    def commit(self, commit: Commit) -> bool:
        """Add the files of ``commit`` to their tables and record it in the journal.

        Returns False when the commit's source had already been recorded (by another
        process ingesting the same bytes at once): it then adds nothing.  A table (or
        the journal) that the commit left with many small files is compacted then, or
        when the run lock held around it is let go of (`kvtrace.warehouse._compaction`).
        """
        try:
            landed = self._record(commit)
        finally:
            if commit.hold is not None:
                commit.hold.release()
        if self._run_locks == 0:
            self._compact_due()
        return landed

    def _compact_due(self) -> None:
        """Compact what commits left due, unless another maintenance is at it.  The
        commits stand whatever happens: a compaction the store fails or a writer keeps
        beating is left for the next commit (or ``kvtrace optimize``) to do."""
        if not self._due:
            return
        from deltalake.exceptions import DeltaError

        from kvtrace.warehouse import _compaction as compaction

        due, self._due = self._due, set()
        with suppress(DeltaError, OSError):  # nothing half-done shows: the next
            compaction.compact_due(self.storage, due)  # maintenance settles it

    def _record(self, commit: Commit) -> bool:
        from kvtrace.warehouse import _journal as journal
        from kvtrace.warehouse._delta_log import add_files
        from kvtrace.warehouse.schema.tables import TABLES

        by_table: dict[str, list[DataFile]] = {}
        for data_file in commit.files:
            by_table.setdefault(data_file.table, []).append(data_file)
        generation = self._generation(commit.app_id)
        entries = []
        versions: dict[str, int] = {}
        for table, files in sorted(by_table.items()):
            version, landed = add_files(
                self.storage,
                table,
                TABLES[table].schema,
                files,
                commit.app_id,
                commit.commit_id,
                generation,
            )
            if landed != commit.commit_id:  # the table holds another process's files
                for data_file in files:
                    self.storage.remove(data_file.path)
            versions[table] = version
            entries.append(
                {
                    "table": table,
                    "version": version,
                    "commit_id": landed,
                    "files": len(files),
                    "rows": sum(f.rows for f in files),
                    "bytes": sum(f.size for f in files),
                }
            )
        row = {
            "commit_id": commit.commit_id,
            "operation": commit.operation,
            "run_id": commit.run_id,
            "source_path": commit.source_path,
            "source_sha256": commit.source_sha256,
            "source_size": commit.source_size,
            "kvtrace_version": __version__,
            "created_at": _now(),
            "tables": entries,
        }
        commit.landed = journal.append(self.storage, row, commit.app_id, generation)
        if commit.landed:
            from kvtrace.warehouse import _compaction as compaction

            self._due |= compaction.due(self.storage, versions)
        return commit.landed

    def _generation(self, app_id: str) -> int:
        """The generation of a new commit of ``app_id``: 1, unless earlier commits of its
        source were taken back (a collector's batch is never committed twice)."""
        if app_id.startswith(COLLECTOR_APP_PREFIX):
            return 1
        from kvtrace.warehouse import _journal as journal

        snapshot = self._snapshot
        if snapshot is not None and snapshot_cache.newest_version(self.storage) == snapshot.version:
            return snapshot.generation(app_id)  # the journal read for this ingest's checks
        return journal.retractions(self.storage)[app_id] + 1

    def abort(self, commit: Commit) -> None:
        """Remove the files of a commit that will not be recorded."""
        for settle in commit.background_writes:
            settle()
        for handle in list(commit.open_files):
            handle.discard()
        for data_file in commit.files:
            self.storage.remove(data_file.path)
        commit.files.clear()
        if commit.hold is not None:
            commit.hold.release()


def create_tables(storage: Storage) -> None:
    """Create the journal and one empty Delta table per kvtrace table."""
    from kvtrace.warehouse import _journal as journal
    from kvtrace.warehouse._delta_log import create_table
    from kvtrace.warehouse.schema.tables import TABLES

    journal.create(storage)
    # on an object store each is a few round trips, waited for at once; on local disk one
    # takes 6 ms, and threads only cost (Delta Lake's runtime per thread: 0.2 s, 50 MB)
    workers = 1 if isinstance(storage, LocalStorage) else 8
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda spec: create_table(storage, spec.name, spec.schema), TABLES.values()))
