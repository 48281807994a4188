"""``kvtrace check --repair``: return a damaged warehouse to its newest consistent version.

What a repair does, in order (holding the maintenance lock):

1. A journal entry that is missing, empty or garbled is written again as a commit that
   changes nothing (version 0: the creation of the journal), the damaged one kept in
   ``_commits/_delta_log_damaged/``.  Journal rows are independent of each other (each
   entry adds one row), so every later entry stays: only the damaged entry's commit is
   lost.  Its row is still on disk (`kvtrace.warehouse.lost_rows`): that commit is
   retracted and its source listed, and the commits that row took back are taken back
   again.
2. A table's Delta log whose entry is missing, empty or garbled is rolled back to the
   version before it: that entry and every later one are moved to
   ``<table>/_delta_log_damaged/`` (nothing is deleted), since a later entry may
   compact or remove the files the damaged one added.  A missing or garbled version 0
   of a table whose later entries are sound is written again instead (it only creates
   the table, from kvtrace's schema).
3. Commits that the rolled-back versions recorded are retracted in the journal, with
   every file of theirs taken out of the other tables too: a commit is seen whole or not
   at all.
4. A data file that is missing, cut short or unreadable (with ``deep``, any page of it)
   takes its commit with it the same way.  A compacted file (it carries no commit) is
   replaced by the files it was compacted from when they are all still there;
   otherwise it is taken out and the commits whose rows it held are retracted.
5. What others left behind is settled (`kvtrace.warehouse.maintenance.settle`).

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
from kvtrace.warehouse.file_check import file_problem
from kvtrace.warehouse.integrity import (
    DAMAGED_DIR,
    CheckReport,
    LogScan,
    Problem,
    check,
    scan_log,
)
from kvtrace.warehouse.log_entry import empty_commit
from kvtrace.warehouse.lost_rows import lost_rows
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


def repair(warehouse: Warehouse, deep: bool = False) -> RepairReport:
    """Bring ``warehouse`` back to its newest consistent version (see the module); with
    ``deep``, every page of every data file is read (`check`)."""
    with warehouse.storage.lock(MAINTENANCE_LOCK):
        report = RepairReport()
        found = check(warehouse)
        stamp = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
        if _mend_journal(warehouse, found.logs[JOURNAL], stamp, report):
            _retract(warehouse, *_lost_with_journal_entries(warehouse), report)
        _repair_logs(warehouse, found, stamp, report)
        _retract(warehouse, _commits_lost_with_logs(warehouse), [], report)
        _repair_files(warehouse, check(warehouse, deep).problems, deep, report)
        report.done += settle(warehouse)
        report.after = check(warehouse)
    return report


# -- the journal -----------------------------------------------------------------------------


def _mend_journal(warehouse: Warehouse, scan: LogScan, stamp: str, report: RepairReport) -> bool:
    """Write every damaged journal entry again as a commit that changes nothing (version 0
    as the journal's creation), keeping the damaged one aside; False when none was."""
    storage = warehouse.storage
    for version, what in sorted(scan.bad.items()):
        entry = f"{version:020d}.json"
        raw = storage.read_bytes(f"{JOURNAL}/{LOG_DIR}/{entry}")
        if raw is not None:
            storage.write_atomic(f"{JOURNAL}/{DAMAGED_DIR}/{stamp}/{entry}", raw)
        if version == 0:
            _write_version_zero(warehouse, JOURNAL)
        else:
            note = f"written again by a repair: {what}"
            storage.write_atomic(f"{JOURNAL}/{LOG_DIR}/{entry}", empty_commit(note))
        report.done.append(
            f"{JOURNAL}: wrote version {version} of its log again as a commit that changes "
            f"nothing ({what}; the damaged entry is kept in {JOURNAL}/{DAMAGED_DIR}/{stamp})"
        )
    return bool(scan.bad)


def _lost_with_journal_entries(
    warehouse: Warehouse,
) -> tuple[dict[str, dict[str, Any]], list[dict[str, str]]]:
    """The commits whose journal rows were lost with their entries (unless their source
    was recorded again since), and what those rows took back that no row takes back now."""
    storage = warehouse.storage
    lost = lost_rows(storage).to_pylist()
    standing = journal.load_rows(storage, cached=False).to_pylist()
    recorded = {_app_id(commit) for commit in standing}
    taken_back = {r["commit_id"] for commit in standing for r in commit["retracted"] or []}
    commits = {
        commit["commit_id"]: commit
        for commit in lost
        if commit["operation"] not in journal.MAINTENANCE_OPERATIONS
        and _app_id(commit) not in recorded
    }
    again = {
        r["commit_id"]: r
        for commit in lost
        for r in commit["retracted"] or []
        if r["commit_id"] not in taken_back
    }
    return commits, sorted(again.values(), key=lambda r: r["commit_id"])


# -- table logs ------------------------------------------------------------------------------


def _repair_logs(
    warehouse: Warehouse, found: CheckReport, stamp: str, report: RepairReport
) -> None:
    for name, scan in found.logs.items():
        first = scan.first_bad
        if first is None or name == JOURNAL:
            continue
        if first == 0 and set(scan.bad) == {0}:
            _write_version_zero(warehouse, name)
            report.done.append(
                f"{name}: wrote version 0 of its log again (it only creates the table)"
            )
            continue
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


def _repair_files(
    warehouse: Warehouse, problems: list[Problem], deep: bool, report: RepairReport
) -> None:
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
        restored, compacted_from = _undo_compaction(
            warehouse, problem.table, problem.path or "", deep
        )
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
    _retract(warehouse, lost, [], report)


def _undo_compaction(
    warehouse: Warehouse, name: str, path: str, deep: bool
) -> tuple[int, set[str]]:
    """Put back the files a compaction made ``path`` from, when they all are still there
    and readable (with ``deep``, every page) and every file that compaction wrote is
    still in the table; returns how many were put back (0: not possible) and the commits
    of those files."""
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
        if file_problem(filesystem, f"{base}/{name}/{source}", None, deep) is not None:
            return 0, commits
        footers[source] = pq.read_metadata(f"{base}/{name}/{source}", filesystem=filesystem)
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
    warehouse: Warehouse,
    commits: dict[str, dict[str, Any]],
    again: list[dict[str, str]],
    report: RepairReport,
) -> None:
    """Take ``commits`` (journal rows) back, their files out of every table, and
    ``again`` (retractions a lost row made) back again: one journal row."""
    if not commits and not again:
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
    retracted = again + [
        {"commit_id": c, "app_id": _app_id(commit)} for c, commit in sorted(commits.items())
    ]
    journal.append(
        warehouse.storage,
        row(commit_id, "repair", entries, retracted),
        f"{COLLECTOR_APP_PREFIX}{commit_id}",
    )
    sources = sorted({c["source_path"] for c in commits.values() if c["source_path"]})
    report.sources += [s for s in sources if s not in report.sources]
    if commits:
        report.done.append(
            f"retracted {len(commits)} commit(s) whose rows could not all be "
            "read; their other files were taken out of the logs too"
        )
    if again:
        report.done.append(
            f"took back again {len(again)} commit(s) that a lost journal entry had taken back"
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
