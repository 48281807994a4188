"""Keeping a warehouse small and fast: compaction, vacuum, and converting old warehouses.

`optimize` and `vacuum` use Delta Lake's own operations on every table.  `migrate` turns
a warehouse of kvtrace's former manifest (``_manifest/*.json``) into Delta tables in
place: the data files stay where they are and are added to the tables' logs.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pyarrow.parquet as pq
from deltalake.transaction import AddAction, CommitProperties, RemoveAction

from kvtrace._version import __version__
from kvtrace.errors import WarehouseError
from kvtrace.warehouse import journal
from kvtrace.warehouse.delta_log import (
    COMMIT_ID_KEY,
    DataFile,
    active_files,
    add_files,
    file_stats,
    open_table,
)
from kvtrace.warehouse.object_lock import LOCK_TABLE
from kvtrace.warehouse.schema import TABLES
from kvtrace.warehouse.storage import Storage, open_storage
from kvtrace.warehouse.store import FORMAT, MARKER, Warehouse, create_tables

UNFINISHED_AFTER_S = 3600.0  # a commit whose files are this old and not journaled is dead
LEGACY_MANIFEST = "_manifest"
_COMMIT_TIME = "%Y%m%dT%H%M%S%fZ"


@dataclass
class MaintenanceReport:
    """What a maintenance command did, table by table."""

    tables: dict[str, str] = field(default_factory=dict)
    version: int = 0


def unfinished_files(warehouse: Warehouse) -> dict[str, list[tuple[str, int, float]]]:
    """Per table, the files in its newest version that no journaled commit wrote (a
    running writer's, or a killed one's): path in the table, size, age in seconds."""
    journaled = journal.journaled_ids(journal.newest_commits(warehouse.storage)[1])
    found: dict[str, list[tuple[str, int, float]]] = {}
    for name in TABLES:
        table = open_table(warehouse.storage, name)
        if table is None:
            continue
        files = active_files(table)
        for path, size in zip(files["path"].to_pylist(), files["size_bytes"].to_pylist(),
                              strict=True):
            commit = journal.commit_of(path)
            if commit is not None and commit not in journaled:
                found.setdefault(name, []).append((path, size, _age_s(commit)))
    return found


def _age_s(commit_id: str) -> float:
    made = datetime.strptime(commit_id.split("-")[0], _COMMIT_TIME).replace(tzinfo=timezone.utc)
    return time.time() - made.timestamp()


def drop_unfinished(warehouse: Warehouse, older_than_s: float = UNFINISHED_AFTER_S) -> int:
    """Take the files of dead commits (unjournaled, older than ``older_than_s``) out of
    their tables' logs, so that other engines stop reading them too; returns how many."""
    dropped = 0
    now_ms = int(time.time() * 1000)
    for name, files in unfinished_files(warehouse).items():
        dead: list[AddAction | RemoveAction] = [
            RemoveAction(path, True, now_ms, size) for path, size, age in files
            if age >= older_than_s]
        if not dead:
            continue
        table = open_table(warehouse.storage, name)
        assert table is not None
        table.create_write_transaction(dead, mode="append", schema=TABLES[name].schema)
        dropped += len(dead)
    return dropped


def optimize(warehouse: Warehouse, target_mb: int = 256) -> MaintenanceReport:
    """Compact each table's small files into files of about ``target_mb`` MB (Delta's
    compaction), and record the new table versions in the journal."""
    running = {name: len(files) for name, files in unfinished_files(warehouse).items()}
    if running:
        raise WarehouseError(
            f"a writer is still adding to {', '.join(sorted(running))} "
            f"({sum(running.values())} file(s) of unfinished commits); run optimize when it "
            "has finished ('kvtrace vacuum' drops those of writers that died)")
    report = MaintenanceReport()
    commit_id = journal.new_commit_id()
    entries = []
    for name in TABLES:
        table = open_table(warehouse.storage, name)
        if table is None or len(table.file_uris()) < 2:
            continue
        metrics = table.optimize.compact(
            target_size=target_mb << 20,
            commit_properties=CommitProperties(custom_metadata={COMMIT_ID_KEY: commit_id}))
        table.update_incremental()
        report.tables[name] = (f"{metrics['numFilesRemoved']} files into "
                               f"{metrics['numFilesAdded']}")
        entries.append({"table": name, "version": table.version(), "commit_id": commit_id,
                        "files": metrics["numFilesAdded"], "rows": 0, "bytes": 0})
    if entries:
        journal.append(warehouse.storage, _row(commit_id, "optimize", entries),
                       f"kvtrace-commit:{commit_id}")
    report.version = journal.newest_commits(warehouse.storage)[0]
    return report


def vacuum(warehouse: Warehouse, retain_hours: float = 168.0,
           dry_run: bool = False) -> MaintenanceReport:
    """Delete the files that no version younger than ``retain_hours`` needs (Delta's
    vacuum, untracked files included), after dropping the files of dead commits.

    Versions older than ``retain_hours`` may no longer be readable with ``--as-of``.
    """
    if not dry_run:
        drop_unfinished(warehouse)
    report = MaintenanceReport()
    for name in [*TABLES, journal.JOURNAL, LOCK_TABLE]:
        table = open_table(warehouse.storage, name)
        if table is None:
            continue
        deleted = table.vacuum(retention_hours=int(retain_hours), dry_run=dry_run,
                               enforce_retention_duration=False, full=True)
        if deleted:
            report.tables[name] = f"{len(deleted)} file(s)" + (" would go" if dry_run else "")
    report.version = journal.newest_commits(warehouse.storage)[0]
    return report


def _row(commit_id: str, operation: str, entries: list[dict], run_id: str | None = None,
         **source: object) -> dict:
    return {"commit_id": commit_id, "operation": operation, "run_id": run_id,
            "source_path": source.get("source_path"),
            "source_sha256": source.get("source_sha256"),
            "source_size": source.get("source_size"), "kvtrace_version": __version__,
            "created_at": datetime.now(timezone.utc), "tables": entries}


def migrate(location: str) -> MaintenanceReport:
    """Convert the warehouse at ``location`` from kvtrace's former manifest to Delta
    tables, in place; running it again after an interruption finishes the job."""
    storage = open_storage(location)
    marker = storage.read_bytes(MARKER)
    if marker is None:
        raise WarehouseError(f"no kvtrace warehouse at {storage.location}")
    if json.loads(marker).get("format") == FORMAT:
        raise WarehouseError(f"{storage.location} is already made of Delta tables")
    create_tables(storage)
    report = MaintenanceReport()
    for name in storage.listdir(LEGACY_MANIFEST):
        if name.endswith(".json"):
            _migrate_commit(storage, name, report)
    storage.write_atomic(MARKER, json.dumps({"format": FORMAT}).encode())
    storage.remove_tree(LEGACY_MANIFEST)
    report.version = journal.newest_commits(storage)[0]
    return report


def _migrate_commit(storage: Storage, record_name: str, report: MaintenanceReport) -> None:
    """Add the files of one manifest record to their tables, then journal it."""
    raw = storage.read_bytes(f"{LEGACY_MANIFEST}/{record_name}")
    try:
        record = json.loads(raw or b"")
    except ValueError as exc:
        raise WarehouseError(f"manifest record {record_name} is unreadable: {exc}") from None
    listed = record["files"]
    if not listed:
        return
    first = listed[0]
    app_id = (f"kvtrace-source:{first['run_id']}:{first['source_sha256']}"
              if first.get("source_sha256") else f"kvtrace-commit:{record['commit_id']}")
    if journal.holds(storage, app_id):
        return
    filesystem, base = storage.arrow_filesystem()
    by_table: dict[str, list[DataFile]] = {}
    for entry in listed:
        metadata = pq.read_metadata(f"{base}/{entry['path']}", filesystem=filesystem)
        by_table.setdefault(entry["table"], []).append(
            DataFile(entry["path"], entry["bytes"], entry["rows"], file_stats(metadata)))
    entries = []
    for table, files in sorted(by_table.items()):
        version, landed = add_files(storage, table, TABLES[table].schema, files, app_id,
                                    record["commit_id"])
        entries.append({"table": table, "version": version, "commit_id": landed,
                        "files": len(files), "rows": sum(f.rows for f in files),
                        "bytes": sum(f.size for f in files)})
        report.tables[table] = str(int(report.tables.get(table, "0")) + len(files))
    journal.append(storage, _row(record["commit_id"], "migrate", entries, first["run_id"],
                                 source_path=first.get("source_path"),
                                 source_sha256=first.get("source_sha256"),
                                 source_size=first.get("source_size")), app_id)
