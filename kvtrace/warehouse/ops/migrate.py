"""Converting a warehouse of kvtrace's former manifest (``_manifest/*.json``) to Delta
Lake tables, in place: the data files stay where they are and are added to the tables'
logs, one Delta commit and one journal row per former manifest record."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from kvtrace.errors import WarehouseError
from kvtrace.warehouse import _journal as journal
from kvtrace.warehouse._delta_log import DataFile, add_files, file_stats
from kvtrace.warehouse._open_storage import open_storage
from kvtrace.warehouse._storage import Storage
from kvtrace.warehouse._store import FORMAT, MARKER, create_tables
from kvtrace.warehouse.ops.maintenance import MaintenanceReport, row
from kvtrace.warehouse.schema.tables import TABLES

__all__ = ["LEGACY_MANIFEST", "migrate"]

LEGACY_MANIFEST = "_manifest"


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
    app_id = (
        f"kvtrace-source:{first['run_id']}:{first['source_sha256']}"
        if first.get("source_sha256")
        else f"kvtrace-commit:{record['commit_id']}"
    )
    if journal.holds(storage, app_id):
        return
    filesystem, base = storage.arrow_filesystem()
    by_table: dict[str, list[DataFile]] = {}
    for entry in listed:
        metadata = pq.read_metadata(f"{base}/{entry['path']}", filesystem=filesystem)
        by_table.setdefault(entry["table"], []).append(
            DataFile(entry["path"], entry["bytes"], entry["rows"], file_stats(metadata))
        )
    entries = []
    for table, files in sorted(by_table.items()):
        version, landed = add_files(
            storage, table, TABLES[table].schema, files, app_id, record["commit_id"]
        )
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
        report.tables[table] = str(int(report.tables.get(table, "0")) + len(files))
    journal.append(
        storage,
        row(
            record["commit_id"],
            "migrate",
            entries,
            run_id=first["run_id"],
            source_path=first.get("source_path"),
            source_sha256=first.get("source_sha256"),
            source_size=first.get("source_size"),
        ),
        app_id,
    )
