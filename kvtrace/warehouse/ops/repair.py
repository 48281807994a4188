"""``kvtrace check --repair``: return a damaged warehouse to its newest consistent version.

What a repair does, in order (holding the maintenance lock):

1. A journal entry that is missing, empty or garbled is written again as a commit that
   changes nothing (version 0: the creation of the journal), the damaged one kept in
   ``_commits/_delta_log_damaged/``.  Journal rows are independent of each other (each
   entry adds one row), so every later entry stays: only the damaged entry's commit is
   lost.  Its row is still on disk (`kvtrace.warehouse.ops._lost_rows`): that commit is
   retracted and its source listed, and the commits that row took back are taken back
   again.  So is the commit of a row whose writer died before its entry.
2. A table's Delta log whose entry is missing, empty or garbled is rolled back to the
   version before it: that entry and every later one are moved to
   ``<table>/_delta_log_damaged/`` (nothing is deleted), since a later entry may
   compact or remove the files the damaged one added.  A missing or garbled version 0
   of a table whose later entries are sound is written again instead (it only creates
   the table, from kvtrace's schema).
3. Commits that the rolled-back versions recorded are retracted in the journal, with
   their rows taken out of every other table too, compacted files included
   (`kvtrace.warehouse.ops._retraction`): a commit is seen whole or not at all.
4. A data file that is missing, cut short or unreadable (with ``deep``, any page of it)
   takes its commit with it the same way.  A compacted file (it carries no commit) is
   replaced by the files it was compacted from when they are all still there;
   otherwise it is taken out and the commits whose rows it held are retracted.
5. What others left behind is settled (`kvtrace.warehouse.ops.maintenance.settle`).

Retracted commits' sources are listed: ingesting them again restores their rows (records
the warehouse still holds are not stored twice).  No data file is deleted: the files
taken out of the logs stay until ``kvtrace vacuum`` proves nothing needs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from kvtrace.warehouse import _journal as journal
from kvtrace.warehouse._delta_log import LOG_DIR, open_table, version_zero
from kvtrace.warehouse._log_entry import empty_commit
from kvtrace.warehouse._store import Warehouse
from kvtrace.warehouse.ops._compacted import held_commits, put_back_inputs
from kvtrace.warehouse.ops._lost_rows import lost_rows
from kvtrace.warehouse.ops._retraction import Retraction, app_id, retract, take_out
from kvtrace.warehouse.ops.integrity import (
    DAMAGED_DIR,
    CheckReport,
    LogScan,
    Problem,
    check,
    scan_log,
)
from kvtrace.warehouse.ops.maintenance import MAINTENANCE_LOCK, settle
from kvtrace.warehouse.schema import JOURNAL
from kvtrace.warehouse.schema.tables import TABLES

__all__ = ["RepairReport", "repair"]


@dataclass
class RepairReport:
    """What a repair changed, and what it leaves to do."""

    done: list[str] = field(default_factory=list)  # one sentence each
    sources: list[str] = field(default_factory=list)  # to ingest again
    after: CheckReport = field(default_factory=CheckReport)  # the check after the repair

    def add(self, retraction: Retraction) -> None:
        self.done += retraction.done
        self.sources += [s for s in retraction.sources if s not in self.sources]


def repair(warehouse: Warehouse, deep: bool = False) -> RepairReport:
    """Bring ``warehouse`` back to its newest consistent version (see the module); with
    ``deep``, every page of every data file is read (`check`)."""
    with warehouse.storage.lock(MAINTENANCE_LOCK):
        report = RepairReport()
        found = check(warehouse)
        stamp = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
        _mend_journal(warehouse, found.logs[JOURNAL], stamp, report)
        _repair_logs(warehouse, found, stamp, report)
        lost, again = _lost_with_journal_entries(warehouse)
        lost |= _commits_lost_with_logs(warehouse)
        report.add(retract(warehouse, lost, again, deep))
        _repair_files(warehouse, check(warehouse, deep).problems, deep, report)
        report.done += settle(warehouse)
        report.after = check(warehouse)
    return report


# -- the journal -----------------------------------------------------------------------------


def _mend_journal(warehouse: Warehouse, scan: LogScan, stamp: str, report: RepairReport) -> None:
    """Write every damaged journal entry again as a commit that changes nothing (version 0
    as the journal's creation), keeping the damaged one aside."""
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


def _lost_with_journal_entries(
    warehouse: Warehouse,
) -> tuple[dict[str, dict[str, Any]], list[dict[str, str]]]:
    """The commits whose journal rows no entry lists (lost with a damaged entry, or whose
    writer died before its entry) unless their source was recorded again since or their
    writer is still at it, and what those rows took back that no row takes back now."""
    storage = warehouse.storage
    lost = [c for c in lost_rows(storage).to_pylist() if not storage.commit_alive(c["commit_id"])]
    standing = journal.load_rows(storage, cached=False).to_pylist()
    recorded = {app_id(commit) for commit in standing}
    taken_back = {r["commit_id"] for commit in standing for r in commit["retracted"] or []}
    commits = {
        commit["commit_id"]: commit
        for commit in lost
        if commit["operation"] not in journal.MAINTENANCE_OPERATIONS
        and app_id(commit) not in recorded
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
    """Retract the commits of damaged files; replace a damaged compacted file by the
    files it was made from, or take it out with the commits whose rows it held."""
    damaged = [p for p in problems if p.path is not None]
    if not damaged:
        return
    rows = journal.load_rows(warehouse.storage, cached=False).to_pylist()
    row_of = {e["commit_id"]: row for row in rows for e in row["tables"] or []}  # by file
    named: set[str] = set()  # the commits in the names of the files lost
    for problem in damaged:
        name, path = problem.table, problem.path or ""
        commit_id = journal.commit_of(path)
        if commit_id is not None:
            named.add(commit_id)
            continue
        held = held_commits(scan_log(warehouse, name), path)
        if restored := put_back_inputs(warehouse, name, path, deep):
            report.done.append(
                f"{name}: replaced the damaged compacted file {path} by the "
                f"{restored[0]} file(s) it was made from"
            )
            continue
        take_out(warehouse, name, [path], journal.new_commit_id())
        report.done.append(f"{name}: took the damaged compacted file {path} out of the log")
        named |= held
    lost = {row_of[c]["commit_id"]: row_of[c] for c in sorted(named) if c in row_of}
    report.add(retract(warehouse, lost, [], deep))
