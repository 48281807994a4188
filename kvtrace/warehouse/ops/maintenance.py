"""Keeping a warehouse small and fast, safely: compaction and vacuum.

Every maintenance command holds the warehouse's maintenance lock (one at a time; ingests
and collectors never wait on it) and starts by settling what others left behind
(`kvtrace.warehouse._settle`): table versions a killed maintenance did not journal are
journaled, and the files of commits whose writers died are taken out of the tables'
logs and those commits retracted.  Optimize is `kvtrace.warehouse._compaction`'s
protocol, the one writers also run after their commits once a table has gathered many
small files.  Vacuum never deletes a file that the newest version, a version the journal
names, a commit in flight or a version inside the retention references.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from deltalake import DeltaTable

from kvtrace.errors import WarehouseError
from kvtrace.warehouse import _journal as journal
from kvtrace.warehouse import _settle
from kvtrace.warehouse._compaction import TARGET_MB, compact
from kvtrace.warehouse._delta_log import active_files, open_table
from kvtrace.warehouse._settle import MAINTENANCE_LOCK, Leftover, row
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


@dataclass
class MaintenanceReport:
    """What a maintenance command did, table by table, and what it found on the way."""

    tables: dict[str, str] = field(default_factory=dict)
    version: int = 0
    notes: list[str] = field(default_factory=list)  # one sentence each


def leftovers(warehouse: Warehouse) -> list[Leftover]:
    """The files of unjournaled commits in the tables' newest versions: a writer's
    still in flight, or a dead writer's."""
    return _settle.leftovers(warehouse.storage)


def settle(warehouse: Warehouse) -> list[str]:
    """Settle what others left behind (`kvtrace.warehouse._settle.settle`); the caller
    holds the maintenance lock."""
    return _settle.settle(warehouse.storage)


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


# -- the commands ----------------------------------------------------------------------------


def optimize(warehouse: Warehouse, target_mb: int = TARGET_MB) -> MaintenanceReport:
    """Compact each table's small files, and the journal's, into files of about
    ``target_mb`` MB (Delta's compaction), journaling each table's new version as soon
    as it is made (`kvtrace.warehouse._compaction.compact`).

    A table that a writer is committing into right now is left for the next run.
    """
    with warehouse.storage.lock(MAINTENANCE_LOCK):
        report = MaintenanceReport(notes=settle(warehouse))
        done, busy = compact(warehouse.storage, [*TABLES, JOURNAL], target_mb)
        report.tables = {compacted.table: compacted.describe() for compacted in done}
        if busy:
            report.notes.append(
                f"left {', '.join(sorted(busy))} as they were: a writer is "
                "committing into them; optimize again when it has finished"
            )
        report.version = journal.newest_commits(warehouse.storage)[0]
    warehouse.stored_snapshot()  # kept for the queries that follow (they read it at once)
    return report


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
