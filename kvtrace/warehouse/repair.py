"""``kvtrace check --repair``: return a damaged warehouse to its newest consistent version.

What a repair does, in order (holding the maintenance lock):

1. A Delta log whose entry is missing, empty or garbled is rolled back to the version
   before it: that entry and every later one are moved to ``<table>/_delta_log_damaged/``
   (nothing is deleted).  A missing or garbled version 0 of a table whose later entries
   are sound is written again instead (it only creates the table, from kvtrace's schema).
2. Commits that the rolled-back versions recorded are retracted in the journal, with
   every file of theirs taken out of the other tables too: a commit is seen whole or not
   at all.
3. A data file that is missing, cut short or unreadable takes its commit with it the
   same way.  A compacted file (it carries no commit) is replaced by the files it was
   compacted from when they are all still there; otherwise it is taken out and the
   commits whose rows it held are retracted.
4. What others left behind is settled (`kvtrace.warehouse.maintenance.settle`).

Retracted commits' sources are listed: ingesting them again restores their rows (records
the warehouse still holds are not stored twice).  No data file is deleted: the files
taken out of the logs stay until ``kvtrace vacuum`` proves nothing needs them.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.transaction import AddAction, CommitProperties, RemoveAction

from kvtrace.warehouse import journal
from kvtrace.warehouse.delta_log import (
    COMMIT_ID_KEY,
    LOG_DIR,
    OPERATION_KEY,
    active_files,
    file_stats,
    open_table,
    version_zero,
)
from kvtrace.warehouse.integrity import (
    DAMAGED_DIR,
    CheckReport,
    LogScan,
    Problem,
    check,
    scan_log,
)
from kvtrace.warehouse.maintenance import MAINTENANCE_LOCK, row, settle
from kvtrace.warehouse.schema import JOURNAL
from kvtrace.warehouse.schema.tables import TABLES
from kvtrace.warehouse.store import COLLECTOR_APP_PREFIX, Warehouse


@dataclass
class RepairReport:
    """What a repair changed, and what it leaves to do."""

    done: list[str] = field(default_factory=list)  # one sentence each
    sources: list[str] = field(default_factory=list)  # to ingest again
    after: CheckReport = field(default_factory=CheckReport)  # the check after the repair


def repair(warehouse: Warehouse) -> RepairReport:
    """Bring ``warehouse`` back to its newest consistent version (see the module)."""
    with warehouse.storage.lock(MAINTENANCE_LOCK):
        report = RepairReport()
        found = check(warehouse)
        stamp = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
        _repair_logs(warehouse, found, stamp, report)
        _retract(warehouse, _commits_lost_with_logs(warehouse), report)
        _repair_files(warehouse, check(warehouse).problems, report)
        report.done += settle(warehouse)
        report.after = check(warehouse)
    return report


# -- logs ------------------------------------------------------------------------------------


def _repair_logs(
    warehouse: Warehouse, found: CheckReport, stamp: str, report: RepairReport
) -> None:
    for name, scan in found.logs.items():
        first = scan.first_bad
        if first is None:
            continue
        if first == 0 and set(scan.bad) == {0}:
            _write_version_zero(warehouse, name)
            report.done.append(
                f"{name}: wrote version 0 of its log again (it only creates the table)"
            )
            continue
        if name == JOURNAL:
            lost = _sources_of_journal_entries(warehouse, scan, first)
            report.sources += [s for s in lost if s not in report.sources]
        moved = _move_aside(warehouse, name, scan, first, stamp)
        report.done.append(
            f"{name}: rolled back to version {first - 1} (log entries "
            f"{first} to {scan.newest} moved to {name}/{DAMAGED_DIR}/{stamp}, "
            f"{moved} file(s))"
        )


def _write_version_zero(warehouse: Warehouse, name: str) -> None:
    """A new version 0 for table ``name``: the creation of an empty table of its schema."""
    schema = journal.JOURNAL_SCHEMA if name == JOURNAL else TABLES[name].schema
    warehouse.storage.write_atomic(f"{name}/{LOG_DIR}/{0:020d}.json", version_zero(schema))


def _move_aside(warehouse: Warehouse, name: str, scan: LogScan, first: int, stamp: str) -> int:
    """Move the log entries from ``first`` on (and checkpoints past it) out of the log."""
    storage = warehouse.storage
    names = storage.listdir(f"{name}/{LOG_DIR}")
    checkpoint_gone = scan.checkpoint is not None and scan.checkpoint >= first
    moving = [
        n
        for n in names
        if (n[:20].isdigit() and int(n[:20]) >= first)
        or (n == "_last_checkpoint" and checkpoint_gone)
    ]
    for entry in moving:
        storage.move(f"{name}/{LOG_DIR}/{entry}", f"{name}/{DAMAGED_DIR}/{stamp}/{entry}")
    return len(moving)


def _sources_of_journal_entries(warehouse: Warehouse, scan: LogScan, first: int) -> list[str]:
    """The sources that journal entries from ``first`` on recorded, as far as they can be
    read, and those of journal rows no sound entry lists (their entry was lost)."""
    storage = warehouse.storage
    kept = {
        path for version, entry in scan.entries.items() if version < first for path in entry.adds
    }
    files = [
        path
        for path in storage.list_files(JOURNAL)
        if path.endswith(".parquet")
        and f"/{LOG_DIR}/" not in path
        and path.split("/", 1)[1] not in kept
    ]
    sources: set[str] = set()
    for path in files:
        try:
            rows = warehouse.read_files([path], columns=["source_path"])
        except OSError:
            continue
        sources.update(s for s in rows["source_path"].to_pylist() if s)
    standing = (
        set(journal.load_rows(storage, cached=False)["source_path"].to_pylist())
        if first > 0
        else set()
    )
    return sorted(sources - standing)


def _commits_lost_with_logs(warehouse: Warehouse) -> dict[str, dict[str, Any]]:
    """The standing commits that name a table version the table's log no longer holds."""
    newest: dict[str, int] = {}
    for name in TABLES:
        table = open_table(warehouse.storage, name)
        newest[name] = table.version() if table is not None else -1
    lost = {}
    for commit in journal.load_rows(warehouse.storage, cached=False).to_pylist():
        if any(e["version"] > newest.get(e["table"], -1) for e in commit["tables"] or []):
            lost[commit["commit_id"]] = commit
    return lost


# -- data files ------------------------------------------------------------------------------


def _repair_files(warehouse: Warehouse, problems: list[Problem], report: RepairReport) -> None:
    damaged = [p for p in problems if p.path is not None]
    if not damaged:
        return
    commits = {
        c["commit_id"]: c for c in journal.load_rows(warehouse.storage, cached=False).to_pylist()
    }
    lost: dict[str, dict[str, Any]] = {}
    for problem in damaged:
        commit_id = journal.commit_of(problem.path or "")
        if commit_id is not None:
            if commit_id in commits:
                lost[commit_id] = commits[commit_id]
            continue
        restored, compacted_from = _undo_compaction(warehouse, problem.table, problem.path or "")
        if restored:
            report.done.append(
                f"{problem.table}: replaced the damaged compacted file "
                f"{problem.path} by the {restored} file(s) it was made from"
            )
            continue
        _take_out(warehouse, problem.table, [problem.path or ""], "repair")
        report.done.append(
            f"{problem.table}: took the damaged compacted file {problem.path} out of the log"
        )
        lost.update({c: commits[c] for c in compacted_from if c in commits})
    _retract(warehouse, lost, report)


def _undo_compaction(warehouse: Warehouse, name: str, path: str) -> tuple[int, set[str]]:
    """Put back the files a compaction made ``path`` from, when they all are still there
    and every file that compaction wrote is still in the table; returns how many were
    put back (0: not possible) and the commits of those files."""
    scan = scan_log(warehouse, name)
    made_at = next((e for e in scan.entries.values() if path in e.adds), None)
    if made_at is None or made_at.operation != "OPTIMIZE":
        return 0, set()
    sources = set(made_at.removes)
    commits = {c for p in sources if (c := journal.commit_of(p)) is not None}
    table = open_table(warehouse.storage, name)
    assert table is not None
    active = set(active_files(table)["path"].to_pylist())
    listing = warehouse.storage.list_files(name)
    filesystem, base = warehouse.storage.arrow_filesystem()
    if not set(made_at.adds) <= active or any(f"{name}/{p}" not in listing for p in sources):
        return 0, commits
    footers = {}
    for source in sources:
        try:
            footers[source] = pq.read_metadata(f"{base}/{name}/{source}", filesystem=filesystem)
        except OSError:
            return 0, commits
    now_ms = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = [
        RemoveAction(p, True, now_ms, made_at.adds[p].get("size")) for p in made_at.adds
    ]
    actions += [
        AddAction(p, listing[f"{name}/{p}"], {}, now_ms, False, file_stats(footers[p]))
        for p in sorted(sources)
    ]
    _commit_actions(table, name, actions, "repair")
    return len(sources), commits


# -- retracting commits ----------------------------------------------------------------------


def _retract(
    warehouse: Warehouse, commits: dict[str, dict[str, Any]], report: RepairReport
) -> None:
    """Take ``commits`` back: their files out of every table, one journal row."""
    if not commits:
        return
    commit_id = journal.new_commit_id()
    entries = []
    by_table: dict[str, list[str]] = defaultdict(list)
    for name in TABLES:
        table = open_table(warehouse.storage, name)
        if table is None:
            continue
        for path in active_files(table)["path"].to_pylist():
            if journal.commit_of(path) in commits:
                by_table[name].append(path)
    for name, paths in sorted(by_table.items()):
        version = _take_out(warehouse, name, paths, "repair", commit_id)
        entries.append(
            {
                "table": name,
                "version": version,
                "commit_id": commit_id,
                "files": 0,
                "rows": 0,
                "bytes": 0,
            }
        )
    retracted = [
        {"commit_id": c, "app_id": _app_id(commit)} for c, commit in sorted(commits.items())
    ]
    journal.append(
        warehouse.storage,
        row(commit_id, "repair", entries, retracted),
        f"{COLLECTOR_APP_PREFIX}{commit_id}",
    )
    sources = sorted({c["source_path"] for c in commits.values() if c["source_path"]})
    report.sources += [s for s in sources if s not in report.sources]
    report.done.append(
        f"retracted {len(commits)} commit(s) whose rows could not all be "
        "read; their other files were taken out of the logs too"
    )


def _app_id(commit: dict[str, Any]) -> str:
    if commit["source_sha256"]:
        return f"kvtrace-source:{commit['run_id']}:{commit['source_sha256']}"
    return f"{COLLECTOR_APP_PREFIX}{commit['commit_id']}"


def _take_out(
    warehouse: Warehouse, name: str, paths: list[str], operation: str, commit_id: str | None = None
) -> int:
    table = open_table(warehouse.storage, name)
    assert table is not None
    now_ms = int(time.time() * 1000)
    return _commit_actions(
        table, name, [RemoveAction(p, True, now_ms) for p in paths], operation, commit_id
    )


def _commit_actions(
    table: DeltaTable,
    name: str,
    actions: list[AddAction | RemoveAction],
    operation: str,
    commit_id: str | None = None,
) -> int:
    metadata = {OPERATION_KEY: operation, COMMIT_ID_KEY: commit_id or journal.new_commit_id()}
    table.create_write_transaction(
        actions,
        mode="append",
        schema=TABLES[name].schema,
        commit_properties=CommitProperties(custom_metadata=metadata),
    )
    table.update_incremental()
    return table.version()
