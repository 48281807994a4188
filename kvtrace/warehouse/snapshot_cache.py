"""Snapshots kept on disk: what a version of a warehouse shows, computed once per machine.

Once version V of a warehouse is committed, its snapshot never changes: the journal's rows
up to V and the table versions they name are fixed.  Computing it reads every journal file
and the log of every table it names (in a warehouse of a thousand runs, thousands of
one-row files), so a process that needs a version's snapshot on disk (a connection, the
end of an ingest or optimize: `Warehouse.stored_snapshot`) keeps it in the cache folder
(`kvtrace.defaults.cache_folder`) as two Parquet files and a JSON file, and later
processes read those instead.  DuckDB reads the Parquet files directly, so a query
needs no Arrow and no Delta Lake library to find what to read (`kvtrace.sql.catalog`).

A snapshot is named by its warehouse's location, its version and a hash of the journal's
log entry of that version, which holds the unique names of that commit's files: a
warehouse deleted and made again at the same location never finds the old one's.  The
newest version is read from the names in the journal's log folder (Delta Lake publishes
each version's entry whole, under its number).  Anything unreadable in the cache is
computed again; nothing is trusted that the log does not name.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import uuid
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvtrace.defaults import cache_folder
from kvtrace.warehouse._log_entry import refuse_damaged_journal_entry
from kvtrace.warehouse.schema import JOURNAL

if TYPE_CHECKING:
    from kvtrace.warehouse._journal import Snapshot
    from kvtrace.warehouse._storage import Storage

__all__ = [
    "COMMITS",
    "FILES",
    "JOURNAL_LOG",
    "KEEP_PER_WAREHOUSE",
    "RETRACTIONS",
    "StoredSnapshot",
    "forget",
    "keep",
    "load",
    "newest_version",
    "stored",
]

JOURNAL_LOG = f"{JOURNAL}/_delta_log"
KEEP_PER_WAREHOUSE = 8  # snapshots kept per warehouse: the newest versions kept
COMMITS = "commits.parquet"  # the journal's standing rows
FILES = "files.parquet"  # the visible data files
RETRACTIONS = "retractions.json"  # application transaction id -> commits taken back
_LOG_ENTRY = re.compile(r"^(\d{20})\.json$")


@dataclass(frozen=True)
class StoredSnapshot:
    """Where a version's snapshot is (or is to be) kept."""

    version: int
    folder: Path

    @property
    def commits(self) -> Path:
        return self.folder / COMMITS

    @property
    def files(self) -> Path:
        return self.folder / FILES

    @property
    def retractions(self) -> Path:
        return self.folder / RETRACTIONS

    def present(self) -> bool:
        return self.retractions.is_file()


def newest_version(storage: Storage) -> int | None:
    """The journal's newest version, from its log's entry names (None: no entry)."""
    versions = [int(m[1]) for name in storage.listdir(JOURNAL_LOG) if (m := _LOG_ENTRY.match(name))]
    return max(versions) if versions else None


def stored(storage: Storage, version: int | None = None) -> StoredSnapshot | None:
    """Where the snapshot of ``version`` (the newest when None) is kept; None when the
    journal's log lacks that version's entry (never made, or cleaned up).

    An entry that is empty or garbled is a `WarehouseError`: Delta Lake would read an
    empty one as a commit that did nothing, and answer without that commit's rows."""
    if version is None and (version := newest_version(storage)) is None:
        return None
    entry = storage.read_bytes(f"{JOURNAL_LOG}/{version:020d}.json")
    if entry is None:
        return None
    refuse_damaged_journal_entry(version, entry)
    digest = hashlib.sha256(entry).hexdigest()[:16]
    return StoredSnapshot(version, _warehouse_folder(storage) / f"{version:012d}-{digest}")


def _warehouse_folder(storage: Storage) -> Path:
    name = hashlib.sha256(storage.location.encode()).hexdigest()[:16]
    return cache_folder() / "snapshots" / name


def load(place: StoredSnapshot) -> Snapshot | None:
    """The snapshot kept at ``place`` as Arrow tables; None when it is not there whole."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kvtrace.warehouse._journal import FILES_SCHEMA, JOURNAL_SCHEMA, Snapshot

    if not place.present():
        return None
    try:
        retractions = Counter(json.loads(place.retractions.read_text()))
        commits = pq.read_table(place.commits, schema=JOURNAL_SCHEMA)
        files = pq.read_table(place.files, schema=FILES_SCHEMA)
    except (OSError, ValueError, pa.ArrowException):
        forget(place)  # damaged: kept again by whoever computes it next
        return None
    return Snapshot(place.version, commits, files, retractions)


def forget(place: StoredSnapshot) -> None:
    """Remove what is kept at ``place`` (it could not be read)."""
    shutil.rmtree(place.folder, ignore_errors=True)


def keep(place: StoredSnapshot, snapshot: Snapshot) -> None:
    """Keep ``snapshot`` at ``place``, whole or not at all (a folder renamed into place);
    where the cache cannot be written, nothing is kept.  Older versions of the same
    warehouse beyond `KEEP_PER_WAREHOUSE` are removed."""
    import pyarrow.parquet as pq

    if snapshot.version != place.version or place.present():
        return
    temp = place.folder.with_name(f".{place.folder.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        temp.mkdir(parents=True)
        pq.write_table(snapshot.commits, temp / COMMITS)
        pq.write_table(snapshot.files, temp / FILES)
        (temp / RETRACTIONS).write_text(json.dumps(dict(snapshot.retractions)))
        os.rename(temp, place.folder)  # another process may have kept it first: fine
    except OSError:
        pass
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    _forget_older(place)


def _forget_older(place: StoredSnapshot) -> None:
    """Remove the warehouse's snapshots beyond the `KEEP_PER_WAREHOUSE` kept last (one
    still being read is computed again by its reader if it goes), and what a process
    killed while keeping one left for a day.

    The order is the time each was kept, not its version: a warehouse made again at the
    same place starts again at version 1, and its snapshots must not give way to the
    higher versions of the one it replaced."""
    entries: list[tuple[float, str, Path]] = []
    try:
        for path in place.folder.parent.iterdir():
            with suppress(OSError):  # another process may remove one at once
                entries.append((path.stat().st_mtime, path.name, path))
    except OSError:
        return
    day_ago = time.time() - 86_400
    abandoned = [p for mtime, name, p in entries if name.startswith(".") and mtime < day_ago]
    kept = [p for _, name, p in sorted(entries) if not name.startswith(".")]
    for old in kept[:-KEEP_PER_WAREHOUSE] + abandoned:
        shutil.rmtree(old, ignore_errors=True)
