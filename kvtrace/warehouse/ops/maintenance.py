"""Keeping a warehouse small and fast, safely: compaction and vacuum.

Every maintenance command holds the warehouse's maintenance lock (one at a time; ingests
and collectors never wait on it) and starts by settling what others left behind:

- table versions that a killed maintenance command committed but did not journal are
  journaled now (compaction keeps every row, so completing it is always safe);
- the files of commits whose writers died before their journal row (a killed ingest,
  collector or a crash) are taken out of the tables' logs, and those commits are
  retracted, so that ingesting their sources again commits them anew.

A commit's writer is alive while it holds its commit's mark (`Storage.hold_commit`): a
lock the operating system lets go of when the process dies, or on an object store a
marker it refreshes.  Vacuum never deletes a file that the newest version, a version the
journal names, a commit in flight or a version inside the retention references.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction

from kvtrace._version import __version__
from kvtrace.errors import WarehouseError
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
from kvtrace.warehouse._store import Warehouse
from kvtrace.warehouse.schema import JOURNAL, LOCK_TABLE
from kvtrace.warehouse.schema.tables import TABLES

__all__ = [
    "MAINTENANCE_LOCK",
    "SAFE_RETAIN_HOURS",
    "Leftover",
    "MaintenanceReport",
    "describe_leftovers",
    "leftovers",
    "optimize",
    "row",
    "settle",
    "vacuum",
]

SAFE_RETAIN_HOURS = 1.0  # a shorter retention needs force (see `vacuum`)
MAINTENANCE_LOCK = "maintenance"
_MAINTENANCE_OPERATIONS = {"OPTIMIZE"}  # Delta operations that rewrite without new rows


@dataclass
class MaintenanceReport:
    """What a maintenance command did, table by table, and what it found on the way."""

    tables: dict[str, str] = field(default_factory=dict)
    version: int = 0
    notes: list[str] = field(default_factory=list)  # one sentence each


@dataclass(frozen=True)
class Leftover:
    """A file in a table's newest version that no journaled commit wrote."""

    table: str
    path: str  # relative to the table
    size: int
    commit_id: str
    alive: bool  # its writer is still at it


def leftovers(warehouse: Warehouse) -> list[Leftover]:
    """The files of unjournaled commits in the tables' newest versions: a writer's
    still in flight, or a dead writer's."""
    journaled = journal.journaled_ids(journal.newest_commits(warehouse.storage)[1])
    found = []
    alive: dict[str, bool] = {}
    for name in TABLES:
        table = open_table(warehouse.storage, name)
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
                alive[commit] = warehouse.storage.commit_alive(commit)
            found.append(Leftover(name, path, size, commit, alive[commit]))
    return found


def describe_leftovers(found: list[Leftover]) -> list[str]:
    """One sentence per kind of leftover, saying how to clear it now."""
    notes = []
    dead = {f.commit_id for f in found if not f.alive}
    live = {f.commit_id for f in found if f.alive}
    if dead:
        notes.append(
            f"{len(dead)} commit(s) whose writers died before recording them left "
            f"{sum(not f.alive for f in found)} file(s) in "
            f"{', '.join(sorted({f.table for f in found if not f.alive}))}; nobody "
            "sees them, and 'kvtrace vacuum' (or 'kvtrace check --repair') drops "
            "them now; ingesting their sources again commits them instead"
        )
    if live:
        notes.append(
            f"{len(live)} commit(s) are being written right now "
            f"({', '.join(sorted({f.table for f in found if f.alive}))}); they "
            "become visible when their writers finish"
        )
    return notes


# -- settling what others left ---------------------------------------------------------------


def settle(warehouse: Warehouse) -> list[str]:
    """Journal the table versions that maintenance left unjournaled, and drop the files
    of commits whose writers died.  The caller holds the maintenance lock.

    A journal with an empty entry is left to ``kvtrace check --repair``: the commit that
    entry recorded would look like a dead writer's, and be dropped without its source
    being named."""
    _refuse_empty_journal_entries(warehouse)
    return [*_journal_maintenance(warehouse), *_drop_dead_commits(warehouse)]


def _refuse_empty_journal_entries(warehouse: Warehouse) -> None:
    """Raise a `WarehouseError` when an entry of the journal's log is empty (Delta Lake
    reads past it; one listing finds it)."""
    for path, size in sorted(warehouse.storage.list_files(f"{JOURNAL}/{LOG_DIR}").items()):
        name = path.rsplit("/", 1)[-1]
        if size == 0 and name.endswith(".json") and name[:20].isdigit():
            refuse_damaged_journal_entry(int(name[:20]), b"")


def _journal_maintenance(warehouse: Warehouse) -> list[str]:
    """Journal the table versions that a killed maintenance command committed (they
    rewrite rows, they never add any: journaling them is always safe)."""
    named = journal.named_versions(journal.newest_commits(warehouse.storage)[1])
    entries = []
    for name in TABLES:
        table = open_table(warehouse.storage, name)
        if table is None or table.version() <= named.get(name, -1):
            continue
        done = [
            entry
            for entry in table.history(table.version() - named.get(name, -1))
            if entry["version"] > named.get(name, -1) and _is_maintenance(entry)
        ]
        if done:
            newest = max(done, key=lambda entry: entry["version"])
            entries.append(_entry(name, newest["version"], str(newest.get(COMMIT_ID_KEY) or "")))
    if not entries:
        return []
    _journal(warehouse, "settle", entries)
    return [
        f"completed the journal of a maintenance command that was stopped: "
        f"{', '.join(e['table'] for e in entries)}"
    ]


def _is_maintenance(entry: dict[str, Any]) -> bool:
    return entry.get("operation") in _MAINTENANCE_OPERATIONS or (
        entry.get(OPERATION_KEY) in ("cleanup", "repair")
    )


def _drop_dead_commits(warehouse: Warehouse) -> list[str]:
    """Take the files of dead commits out of their tables' logs (so that no engine reads
    them) and retract those commits (so that their sources can be ingested again)."""
    dead = [f for f in leftovers(warehouse) if not f.alive]
    if dead:  # a writer records its commit, then lets go of its hold: one that let go
        # between the journal read and the liveness check is journaled by now
        journaled = journal.journaled_ids(journal.newest_commits(warehouse.storage)[1])
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
        table = open_table(warehouse.storage, name)
        assert table is not None
        app_ids.update(_app_ids(table, {f.commit_id for f in files}))
        version = _remove(table, name, [(f.path, f.size) for f in files], "cleanup", commit_id)
        entries.append(_entry(name, version, commit_id))
    retracted = [
        {"commit_id": c, "app_id": app_ids.get(c, f"kvtrace-commit:{c}")}
        for c in sorted({f.commit_id for f in dead})
    ]
    _journal(warehouse, "cleanup", entries, retracted, commit_id)
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


def _entry(table: str, version: int, commit_id: str, files: int = 0) -> dict[str, Any]:
    return {
        "table": table,
        "version": version,
        "commit_id": commit_id,
        "files": files,
        "rows": 0,
        "bytes": 0,
    }


def _journal(
    warehouse: Warehouse,
    operation: str,
    entries: list[dict[str, Any]],
    retracted: list[dict[str, str]] | None = None,
    commit_id: str | None = None,
) -> None:
    commit_id = commit_id or journal.new_commit_id()
    journal.append(
        warehouse.storage,
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


# -- the commands ----------------------------------------------------------------------------


def optimize(warehouse: Warehouse, target_mb: int = 256) -> MaintenanceReport:
    """Compact each table's small files into files of about ``target_mb`` MB (Delta's
    compaction), journaling each table's new version as soon as it is made.

    A table that a writer is committing into right now is left for the next run.
    """
    with warehouse.storage.lock(MAINTENANCE_LOCK):
        report = MaintenanceReport(notes=settle(warehouse))
        commit_id = journal.new_commit_id()
        busy = set()
        for name in TABLES:
            table = open_table(warehouse.storage, name)
            if table is None or len(table.file_uris()) < 2:
                continue
            journaled = journal.journaled_ids(journal.newest_commits(warehouse.storage)[1])
            paths = active_files(table)["path"].to_pylist()
            if any((c := journal.commit_of(p)) is not None and c not in journaled for p in paths):
                busy.add(name)  # a commit in flight: its files must not be compacted yet
                continue
            metrics = _compact(table, target_mb, commit_id)
            report.tables[name] = (
                f"{metrics['numFilesRemoved']} files into {metrics['numFilesAdded']}"
            )
            journal.append(
                warehouse.storage,
                row(
                    commit_id,
                    "optimize",
                    [_entry(name, table.version(), commit_id, metrics["numFilesAdded"])],
                ),
                f"kvtrace-optimize:{commit_id}:{name}",
            )
        if busy:
            report.notes.append(
                f"left {', '.join(sorted(busy))} as they were: a writer is "
                "committing into them; optimize again when it has finished"
            )
        report.version = journal.newest_commits(warehouse.storage)[0]
    warehouse.stored_snapshot()  # kept for the queries that follow (they read it at once)
    return report


def _compact(table: DeltaTable, target_mb: int, commit_id: str) -> dict[str, Any]:
    """Delta's compaction of ``table``, tried again when a writer's commit beat it."""
    attempts = 5
    while True:
        try:
            metrics = table.optimize.compact(
                target_size=target_mb << 20,
                commit_properties=CommitProperties(custom_metadata={COMMIT_ID_KEY: commit_id}),
            )
            table.update_incremental()
            return metrics
        except CommitFailedError:
            attempts -= 1
            if attempts == 0:
                raise
            table.update_incremental()


def vacuum(
    warehouse: Warehouse, retain_hours: float = 168.0, *, force: bool = False, dry_run: bool = False
) -> MaintenanceReport:
    """Delete the files no version of the last ``retain_hours`` needs (Delta's vacuum,
    files no log lists included), after settling what others left behind.

    Never deleted, whatever the retention: a file of the newest version, of a version the
    journal names, or of a commit in flight.  A retention under `SAFE_RETAIN_HOURS` needs
    ``force``: a query or report running now may still read files of the versions it
    gives up, and ``--as-of`` those versions stops working.
    """
    if retain_hours < SAFE_RETAIN_HOURS and not force:
        raise WarehouseError(
            f"a retention under {SAFE_RETAIN_HOURS:g} hour deletes files that a query or "
            "report running now may still read, and makes the versions of the last "
            f"{retain_hours:g} hours unreadable with --as-of; give --force to vacuum anyway"
        )
    with warehouse.storage.lock(MAINTENANCE_LOCK):
        report = MaintenanceReport(notes=[] if dry_run else settle(warehouse))
        named = journal.named_versions(journal.newest_commits(warehouse.storage)[1])
        for name in TABLES:
            table = open_table(warehouse.storage, name)
            if table is None:
                continue
            doomed = _unneeded(warehouse, table, name, named.get(name), retain_hours)
            _sweep(warehouse, name, doomed, dry_run, report)
        for name in (JOURNAL, LOCK_TABLE):  # append-only: only orphans of failed
            # commit attempts, never younger than the safe retention
            table = open_table(warehouse.storage, name)
            if table is not None:
                hours = max(retain_hours, SAFE_RETAIN_HOURS)
                _sweep(warehouse, name, _expired(warehouse, table, name, hours), dry_run, report)
        if not dry_run:
            for hold in warehouse.storage.dead_holds():
                warehouse.storage.remove(hold)
        report.version = journal.newest_commits(warehouse.storage)[0]
    return report


def _sweep(
    warehouse: Warehouse, name: str, doomed: list[str], dry_run: bool, report: MaintenanceReport
) -> None:
    """Delete ``doomed`` (paths in table ``name``) unless ``dry_run``, and say how many."""
    if not doomed:
        return
    if not dry_run:
        for path in doomed:
            warehouse.storage.remove(f"{name}/{path}")
    report.tables[name] = f"{len(doomed)} file(s)" + (" would go" if dry_run else "")


def _expired(warehouse: Warehouse, table: DeltaTable, name: str, retain_hours: float) -> list[str]:
    """The files of ``table`` (paths in it) that Delta's vacuum would delete and that are
    there: it names a removed file's tombstone at every run, deleted already or not."""
    candidates = table.vacuum(
        retention_hours=math.ceil(retain_hours),
        dry_run=True,
        enforce_retention_duration=False,
        full=True,
    )
    if not candidates:
        return []
    present = warehouse.storage.list_files(name)
    return [path for path in candidates if f"{name}/{path}" in present]


def _unneeded(
    warehouse: Warehouse, table: DeltaTable, name: str, named: int | None, retain_hours: float
) -> list[str]:
    """The files of ``table`` (paths in it) that no version inside the retention, no
    version the journal names and no commit in flight needs."""
    candidates = _expired(warehouse, table, name, retain_hours)
    if not candidates:
        return []
    keep = set()
    if named is not None and (then := open_table(warehouse.storage, name, named)) is not None:
        keep |= set(active_files(then)["path"].to_pylist())
    doomed = [
        path
        for path in candidates
        if path not in keep
        and not (
            (commit := journal.commit_of(path)) is not None
            and warehouse.storage.commit_alive(commit)
        )
    ]
    # A writer adds its files to the log before it lets go of its hold: one seen done
    # above has its files in the newest version now, which keeps them.
    newest = open_table(warehouse.storage, name)
    if newest is not None:
        keep = set(active_files(newest)["path"].to_pylist())
        doomed = [path for path in doomed if path not in keep]
    return doomed
