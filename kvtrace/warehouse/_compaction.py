"""Compaction: merging a table's small files, by ``kvtrace optimize`` or after commits.

A table that gathers a file per commit (a collector's batches, an ingest of many small
sources) makes every query open that many files, and the journal gathers a one-row file
per commit.  `compact` merges them with Delta Lake's compaction, which adds no rows and
keeps the files it replaced until vacuum (so ``--as-of`` earlier versions still reads
them): each table's new version is journaled as an ``optimize`` commit as soon as it is
made; the journal's compaction is a version of the journal itself.  A table holding a
file of a commit in flight is left as it is (compacted, that file would no longer say
whose it is, and its rows would show before their commit does).

`compact_due` is the same protocol, run by a writer after its commits: when a commit
leaves a table with `auto_threshold` small files that no compaction has merged
(``$KVTRACE_AUTO_COMPACT``, 0: never), or the journal with that many files, the writer
takes the maintenance lock, if nobody holds it, settles what others left
(`kvtrace.warehouse._settle`) and compacts what is due.  It never waits for the lock:
when another maintenance holds it, the next commit looks again.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import CommitProperties

from kvtrace.errors import WarehouseError
from kvtrace.warehouse import _journal as journal
from kvtrace.warehouse._delta_log import COMMIT_ID_KEY, active_files, open_table
from kvtrace.warehouse._settle import MAINTENANCE_LOCK, row, settle, table_entry
from kvtrace.warehouse._storage import Storage
from kvtrace.warehouse.schema import JOURNAL

AUTO_COMPACT_ENV = "KVTRACE_AUTO_COMPACT"
AUTO_COMPACT_FILES = 32  # small files a table gathers before a commit compacts it
TARGET_MB = 256  # the size of compacted files
_ATTEMPTS = 5  # compactions of one table tried while writers' commits beat them


@dataclass(frozen=True)
class Compacted:
    """What compacting one table did."""

    table: str
    removed: int  # files merged
    added: int  # files they became

    def describe(self) -> str:
        return f"{self.removed} files into {self.added}"


def auto_threshold() -> int:
    """Small files a table (or the journal) gathers before the commit that adds the last
    compacts it: ``$KVTRACE_AUTO_COMPACT``, else `AUTO_COMPACT_FILES`; 0 never does."""
    raw = os.environ.get(AUTO_COMPACT_ENV, "").strip()
    if not raw:
        return AUTO_COMPACT_FILES
    if not raw.isdigit():
        raise WarehouseError(
            f"{AUTO_COMPACT_ENV} must be a whole number of files (0 turns compaction after "
            f"commits off), not {raw!r}"
        )
    return int(raw)


def due(storage: Storage, versions: dict[str, int], target_mb: int = TARGET_MB) -> set[str]:
    """The tables among ``versions`` (table -> the version a commit made) that hold
    `auto_threshold` small files no compaction has merged, with the journal when it
    lists that many files (its count as of this process's last append)."""
    threshold = auto_threshold()
    if threshold == 0:
        return set()
    found = {
        table
        for table, version in versions.items()
        if _unmerged(journal.files_at(storage, table, version), target_mb) >= threshold
    }
    if journal.listed_files(storage) >= threshold:
        found.add(JOURNAL)
    return found


def _unmerged(files: pa.Table, target_mb: int) -> int:
    """How many of a table's ``files`` (`active_files`) a commit wrote (those compaction
    wrote name none) and are small enough that any two of them merge into one."""
    small = (target_mb << 20) // 2
    return sum(
        journal.commit_of(path) is not None and size < small
        for path, size in zip(
            files["path"].to_pylist(), files["size_bytes"].to_pylist(), strict=True
        )
    )


def compact_due(storage: Storage, tables: set[str], target_mb: int = TARGET_MB) -> list[Compacted]:
    """Settle and compact ``tables`` (`due`) holding the maintenance lock, unless another
    maintenance holds it: then nothing is done (the next commit looks again)."""
    with storage.lock(MAINTENANCE_LOCK, wait=False) as held:
        if not held:
            return []
        settle(storage)
        last = [JOURNAL] if JOURNAL in tables else []  # after the tables' journal rows
        return compact(storage, [*sorted(tables - {JOURNAL}), *last], target_mb)[0]


def compact(
    storage: Storage, tables: Iterable[str], target_mb: int = TARGET_MB
) -> tuple[list[Compacted], list[str]]:
    """Compact each of ``tables`` (kvtrace tables, and the journal) into files of about
    ``target_mb`` MB, journaling each table's new version as soon as it is made: what
    was compacted, and the tables left as they were because a writer is committing into
    them.  The caller holds the maintenance lock and has settled."""
    commit_id = journal.new_commit_id()
    done, busy = [], []
    for name in tables:
        table = open_table(storage, name)
        if table is None:
            continue
        metrics = _compact(storage, table, target_mb, commit_id, in_flight=name != JOURNAL)
        if metrics is None:
            busy.append(name)
            continue
        if metrics["numFilesRemoved"] == 0:
            continue
        done.append(Compacted(name, metrics["numFilesRemoved"], metrics["numFilesAdded"]))
        if name != JOURNAL:  # the journal's compaction is a version of the journal
            journal.append(
                storage,
                row(
                    commit_id,
                    "optimize",
                    [table_entry(name, table.version(), commit_id, metrics["numFilesAdded"])],
                ),
                f"kvtrace-optimize:{commit_id}:{name}",
            )
    return done, busy


def _compact(
    storage: Storage, table: DeltaTable, target_mb: int, commit_id: str, in_flight: bool
) -> dict[str, Any] | None:
    """Delta's compaction of ``table``, tried again when a writer's commit beat it; None
    when (``in_flight``) the table holds a file of a commit in flight."""
    failed = 0
    while True:
        if in_flight and _holds_commit_in_flight(storage, table):
            return None
        if len(table.file_uris()) < 2:
            return {"numFilesRemoved": 0, "numFilesAdded": 0}
        try:
            metrics: dict[str, Any] = table.optimize.compact(
                target_size=target_mb << 20,
                commit_properties=CommitProperties(custom_metadata={COMMIT_ID_KEY: commit_id}),
            )
        except CommitFailedError:
            failed += 1
            if failed == _ATTEMPTS:
                raise
            table.update_incremental()  # and look again for commits in flight
            continue
        table.update_incremental()
        return metrics


def _holds_commit_in_flight(storage: Storage, table: DeltaTable) -> bool:
    """Whether the table's loaded version lists a file of a commit not journaled yet."""
    journaled = journal.journaled_ids(journal.newest_commits(storage)[1])
    return any(
        (commit := journal.commit_of(path)) is not None and commit not in journaled
        for path in active_files(table)["path"].to_pylist()
    )
