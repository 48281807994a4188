"""Settling what others left behind, the first step of every maintenance.

Every maintenance (``kvtrace optimize``, ``vacuum``, a repair, a compaction after a
commit: `kvtrace.warehouse._compaction`) holds the warehouse's maintenance lock (one at a
time; ingests and collectors never wait on it) and starts by settling:

- table versions that a killed maintenance committed but did not journal are journaled
  now (compaction keeps every row, so completing it is always safe);
- the files of commits whose writers died before their journal row (a killed ingest,
  collector or a crash) are taken out of the tables' logs, and those commits are
  retracted, so that ingesting their sources again commits them anew.

A commit's writer is alive while it holds its commit's mark (`Storage.hold_commit`): a
lock the operating system lets go of when the process dies, or on an object store a
marker it refreshes.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction

from kvtrace._version import __version__
from kvtrace.warehouse import _journal as journal
from kvtrace.warehouse._delta_log import (
    APP_ID_KEY,
    COMMIT_ID_KEY,
    LOG_DIR,
    OPERATION_KEY,
    active_files,
    open_table,
)
from kvtrace.warehouse._log_entry import refuse_damaged_journal_entry
from kvtrace.warehouse._storage import Storage
from kvtrace.warehouse.schema import JOURNAL
from kvtrace.warehouse.schema.tables import TABLES

MAINTENANCE_LOCK = "maintenance"
_MAINTENANCE_OPERATIONS = {"OPTIMIZE"}  # Delta operations that rewrite without new rows


@dataclass(frozen=True)
class Leftover:
    """A file in a table's newest version that no journaled commit wrote."""

    table: str
    path: str  # relative to the table
    size: int
    commit_id: str
    alive: bool  # its writer is still at it


def leftovers(storage: Storage) -> list[Leftover]:
    """The files of unjournaled commits in the tables' newest versions: a writer's
    still in flight, or a dead writer's."""
    journaled = journal.journaled_ids(journal.newest_commits(storage)[1])
    found = []
    alive: dict[str, bool] = {}
    for name in TABLES:
        table = open_table(storage, name)
        if table is None:
            continue
        files = active_files(table)
        for path, size in zip(
            files["path"].to_pylist(), files["size_bytes"].to_pylist(), strict=True
        ):
            commit = journal.commit_of(path)
            if commit is None or commit in journaled:
                continue
            if commit not in alive:
                alive[commit] = storage.commit_alive(commit)
            found.append(Leftover(name, path, size, commit, alive[commit]))
    return found


def settle(storage: Storage) -> list[str]:
    """Journal the table versions that maintenance left unjournaled, and drop the files
    of commits whose writers died; one sentence per thing done.  The caller holds the
    maintenance lock.

    A journal with an empty entry is left to ``kvtrace check --repair``: the commit that
    entry recorded would look like a dead writer's, and be dropped without its source
    being named."""
    _refuse_empty_journal_entries(storage)
    return [*_journal_maintenance(storage), *_drop_dead_commits(storage)]


def _refuse_empty_journal_entries(storage: Storage) -> None:
    """Raise a `WarehouseError` when an entry of the journal's log is empty (Delta Lake
    reads past it; one listing finds it)."""
    for path, size in sorted(storage.list_files(f"{JOURNAL}/{LOG_DIR}").items()):
        name = path.rsplit("/", 1)[-1]
        if size == 0 and name.endswith(".json") and name[:20].isdigit():
            refuse_damaged_journal_entry(int(name[:20]), b"")


def _journal_maintenance(storage: Storage) -> list[str]:
    """Journal the table versions that a killed maintenance committed (they rewrite
    rows, they never add any: journaling them is always safe)."""
    named = journal.named_versions(journal.newest_commits(storage)[1])
    entries = []
    for name in TABLES:
        table = open_table(storage, name)
        if table is None or table.version() <= named.get(name, -1):
            continue
        done = [
            entry
            for entry in table.history(table.version() - named.get(name, -1))
            if entry["version"] > named.get(name, -1) and _is_maintenance(entry)
        ]
        if done:
            newest = max(done, key=lambda entry: entry["version"])
            entries.append(
                table_entry(name, newest["version"], str(newest.get(COMMIT_ID_KEY) or ""))
            )
    if not entries:
        return []
    _journal(storage, "settle", entries)
    return [
        f"completed the journal of a maintenance command that was stopped: "
        f"{', '.join(e['table'] for e in entries)}"
    ]


def _is_maintenance(entry: dict[str, Any]) -> bool:
    return entry.get("operation") in _MAINTENANCE_OPERATIONS or (
        entry.get(OPERATION_KEY) in ("cleanup", "repair")
    )


def _drop_dead_commits(storage: Storage) -> list[str]:
    """Take the files of dead commits out of their tables' logs (so that no engine reads
    them) and retract those commits (so that their sources can be ingested again)."""
    dead = [f for f in leftovers(storage) if not f.alive]
    if dead:  # a writer records its commit, then lets go of its hold: one that let go
        # between the journal read and the liveness check is journaled by now
        journaled = journal.journaled_ids(journal.newest_commits(storage)[1])
        dead = [f for f in dead if f.commit_id not in journaled]
    if not dead:
        return []
    by_table: dict[str, list[Leftover]] = defaultdict(list)
    for leftover in dead:
        by_table[leftover.table].append(leftover)
    commit_id = journal.new_commit_id()
    app_ids: dict[str, str] = {}
    entries = []
    for name, files in sorted(by_table.items()):
        table = open_table(storage, name)
        assert table is not None
        app_ids.update(_app_ids(table, {f.commit_id for f in files}))
        version = _remove(table, name, [(f.path, f.size) for f in files], "cleanup", commit_id)
        entries.append(table_entry(name, version, commit_id))
    retracted = [
        {"commit_id": c, "app_id": app_ids.get(c, f"kvtrace-commit:{c}")}
        for c in sorted({f.commit_id for f in dead})
    ]
    _journal(storage, "cleanup", entries, retracted, commit_id)
    return [
        f"dropped {len(dead)} file(s) of {len(retracted)} commit(s) whose writers died "
        "before recording them; ingesting their sources again commits them"
    ]


def _app_ids(table: DeltaTable, commits: set[str]) -> dict[str, str]:
    """The application transaction of each of ``commits`` that the table recorded."""
    found = {}
    for entry in table.history():
        commit = entry.get(COMMIT_ID_KEY)
        if commit in commits and entry.get(APP_ID_KEY):
            found[str(commit)] = str(entry[APP_ID_KEY])
    return found


def _remove(
    table: DeltaTable, name: str, files: list[tuple[str, int]], operation: str, commit_id: str
) -> int:
    """Take ``files`` (paths in the table, sizes) out of the table's log; the new version."""
    now_ms = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = [
        RemoveAction(path, True, now_ms, size) for path, size in files
    ]
    while True:
        try:
            table.create_write_transaction(
                actions,
                mode="append",
                schema=TABLES[name].schema,
                commit_properties=CommitProperties(
                    custom_metadata={OPERATION_KEY: operation, COMMIT_ID_KEY: commit_id}
                ),
            )
            break
        except CommitFailedError:
            table.update_incremental()  # an ingest committed at once: try again
    table.update_incremental()
    return table.version()


def table_entry(table: str, version: int, commit_id: str, files: int = 0) -> dict[str, Any]:
    """A maintenance journal row's entry for one table version (it adds no rows)."""
    return {
        "table": table,
        "version": version,
        "commit_id": commit_id,
        "files": files,
        "rows": 0,
        "bytes": 0,
    }


def _journal(
    storage: Storage,
    operation: str,
    entries: list[dict[str, Any]],
    retracted: list[dict[str, str]] | None = None,
    commit_id: str | None = None,
) -> None:
    commit_id = commit_id or journal.new_commit_id()
    journal.append(
        storage,
        row(commit_id, operation, entries, retracted),
        f"kvtrace-commit:{commit_id}",
    )


def row(
    commit_id: str,
    operation: str,
    entries: list[dict[str, Any]],
    retracted: list[dict[str, str]] | None = None,
    run_id: str | None = None,
    **source: object,
) -> dict[str, Any]:
    """A journal row of a maintenance commit."""
    return {
        "commit_id": commit_id,
        "operation": operation,
        "run_id": run_id,
        "source_path": source.get("source_path"),
        "source_sha256": source.get("source_sha256"),
        "source_size": source.get("source_size"),
        "kvtrace_version": __version__,
        "created_at": datetime.now(timezone.utc),
        "tables": entries,
        "retracted": retracted or [],
    }
