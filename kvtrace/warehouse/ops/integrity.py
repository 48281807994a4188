"""``kvtrace check``: tell a damaged warehouse from a healthy one, problem by problem.

Verified, without trusting any library to notice:

- every Delta log (each table's and the journal's): its entries are contiguous from
  version 0 (or from its newest checkpoint), none is empty, and every line of every
  entry is one JSON action (Delta Lake reads a 0-byte newest entry as an empty commit,
  so a truncated journal would hide rows without an error);
- the journal names no table version beyond what that table's log holds;
- every file the newest version shows exists, has the size its log recorded and a
  readable Parquet footer with the rows its statistics say; with ``deep``, every page
  of it decodes (and matches its checksum where it has one).

Each problem names the table, the log version and the rows and sources it affects.
Leftovers of writers that died, or of a stopped maintenance command, are not damage
(nobody sees them); they are listed as notes with the way to clear them.
"""

from __future__ import annotations

import re
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from kvtrace.errors import JournalUnreadable, WarehouseError
from kvtrace.warehouse import _journal as journal
from kvtrace.warehouse._delta_log import LOG_DIR, active_files, open_table
from kvtrace.warehouse._log_entry import EMPTY, LogEntry, read_entry
from kvtrace.warehouse._store import MARKER, Warehouse
from kvtrace.warehouse.ops._file_check import file_problem
from kvtrace.warehouse.ops._lost_rows import lost_rows
from kvtrace.warehouse.schema import JOURNAL
from kvtrace.warehouse.schema.tables import TABLES

__all__ = ["DAMAGED_DIR", "CheckReport", "LogScan", "Problem", "check", "scan_log"]

DAMAGED_DIR = "_delta_log_damaged"  # where a repair moves the log entries it rolls back
_ENTRY = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(\.\d+\.\d+)?\.parquet$")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the warehouse."""

    table: str  # "_commits" for the journal
    version: int | None  # the log version it concerns
    what: str
    rows: int = 0  # rows that cannot be read because of it
    sources: tuple[str, ...] = ()  # sources to ingest again once it is repaired
    path: str | None = None  # a damaged data file (relative to its table)

    def line(self) -> str:
        where = self.table + (f", version {self.version}" if self.version is not None else "")
        text = f"{where}: {self.what}"
        if self.rows:
            text += f"; {self.rows:,} row(s) cannot be read"
        if self.sources:
            shown = ", ".join(self.sources[:3])
            more = len(self.sources) - 3
            text += f" (from {shown}" + (f" and {more} more" if more > 0 else "") + ")"
        return text


@dataclass
class LogScan:
    """A Delta log read entry by entry."""

    table: str
    entries: dict[int, LogEntry] = field(default_factory=dict)
    bad: dict[int, str] = field(default_factory=dict)  # version -> what is wrong with it
    checkpoint: int | None = None  # the newest checkpoint's version
    present: list[int] = field(default_factory=list)  # versions with an entry file

    @property
    def first_bad(self) -> int | None:
        return min(self.bad) if self.bad else None

    @property
    def newest(self) -> int:
        return max(self.present, default=-1)

    @property
    def readable_up_to(self) -> int:
        """The newest version that can be read (every entry up to it is sound)."""
        first = self.first_bad
        return self.newest if first is None else first - 1


def scan_log(warehouse: Warehouse, table: str) -> LogScan:
    """Read every entry of ``table``'s Delta log and note what is wrong."""
    storage = warehouse.storage
    scan = LogScan(table)
    names = storage.listdir(f"{table}/{LOG_DIR}")
    checkpoints = [int(m[1]) for n in names if (m := _CHECKPOINT.match(n))]
    scan.checkpoint = max(checkpoints, default=None)
    scan.present = sorted(int(m[1]) for n in names if (m := _ENTRY.match(n)))
    needed_from = 0 if scan.checkpoint is None else scan.checkpoint + 1
    for version in range(needed_from, scan.newest + 1):
        if version not in scan.present:
            scan.bad[version] = "the log entry is missing"
    for version in scan.present:
        raw = storage.read_bytes(f"{table}/{LOG_DIR}/{version:020d}.json") or b""
        entry, problem = read_entry(version, raw)
        if problem is not None:
            scan.bad[version] = problem
        else:
            scan.entries[version] = entry
    return scan


@dataclass
class CheckReport:
    """What `check` found."""

    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    logs: dict[str, LogScan] = field(default_factory=dict)
    files_checked: int = 0

    @property
    def healthy(self) -> bool:
        return not self.problems


def check(warehouse: Warehouse, deep: bool = False) -> CheckReport:
    """Verify the warehouse's logs, its journal and every file its newest version shows
    (with ``deep``, every page of every file: `kvtrace.warehouse.ops._file_check`)."""
    from kvtrace.warehouse.ops.maintenance import describe_leftovers, leftovers

    report = CheckReport()
    if warehouse.storage.read_bytes(MARKER) is None:
        report.problems.append(Problem(MARKER, None, "the warehouse's marker file is gone"))
    for name in (JOURNAL, *TABLES):
        report.logs[name] = scan_log(warehouse, name)
    commits = _journal_rows(warehouse, report)
    _check_named_versions(report, commits)
    _check_files(warehouse, report, commits, deep)
    if report.healthy:
        try:
            report.notes += describe_leftovers(leftovers(warehouse))
            report.notes += _half_done_maintenance(report, commits)
        except WarehouseError as exc:
            report.problems.append(Problem("warehouse", None, str(exc)))
    return report


def _journal_rows(warehouse: Warehouse, report: CheckReport) -> pa.Table:
    """The journal's standing rows at its newest readable version (noting what is lost)."""
    scan = report.logs[JOURNAL]
    if scan.bad:
        _report_journal_entries(warehouse, scan, report)
    if scan.readable_up_to < 0:
        return pa.Table.from_pylist([], schema=journal.JOURNAL_SCHEMA)
    try:
        return journal.load_rows(warehouse.storage, scan.readable_up_to, cached=False)
    except JournalUnreadable as exc:  # a journal data file damaged: nothing can be checked
        report.problems.append(Problem(JOURNAL, scan.readable_up_to, exc.what))
        return pa.Table.from_pylist([], schema=journal.JOURNAL_SCHEMA)


def _report_journal_entries(warehouse: Warehouse, scan: LogScan, report: CheckReport) -> None:
    """One problem per damaged journal entry, with the rows and sources of the journal
    row it recorded (found on disk, unlisted: `kvtrace.warehouse.ops._lost_rows`)."""
    later = frozenset(path for entry in scan.entries.values() for path in entry.adds)
    try:
        lost = lost_rows(warehouse.storage, scan.readable_up_to, later)
    except WarehouseError:
        lost = journal.JOURNAL_SCHEMA.empty_table()
    for version, what in sorted(scan.bad.items()):
        rows = [r for r in lost.to_pylist() if r["warehouse_version"] == version]
        if scan.newest > version and what != EMPTY:
            what += f"; versions {version + 1} to {scan.newest} cannot be read until it is repaired"
        count = sum(
            e["rows"] or 0
            for r in rows
            for e in r["tables"] or []
            if e["commit_id"] == r["commit_id"]
        )
        sources = tuple(sorted({r["source_path"] for r in rows if r["source_path"]}))
        report.problems.append(Problem(JOURNAL, version, what, count, sources))


def _check_named_versions(report: CheckReport, commits: pa.Table) -> None:
    """Every table's log must hold the versions the journal names, soundly."""
    by_table: dict[str, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for row in commits.to_pylist():
        for entry in row["tables"] or []:
            by_table[entry["table"]].append((entry["version"], row))
    for name in TABLES:
        scan = report.logs[name]
        for version, what in sorted(scan.bad.items()):
            hit = [(v, row) for v, row in by_table[name] if v >= version]
            rows = sum(
                e["rows"] or 0 for _, row in hit for e in row["tables"] if e["table"] == name
            )
            sources = tuple(sorted({row["source_path"] for _, row in hit if row["source_path"]}))
            report.problems.append(Problem(name, version, what, rows, sources))
        named = max((v for v, _ in by_table[name]), default=-1)
        if named > scan.newest and scan.first_bad is None:
            report.problems.append(
                Problem(
                    name,
                    named,
                    f"the journal names version {named}, but the table's log ends "
                    f"at version {scan.newest}",
                )
            )


def _check_files(warehouse: Warehouse, report: CheckReport, commits: pa.Table, deep: bool) -> None:
    """Every file the newest readable version shows: present, of its size, readable (with
    ``deep``, every page of it)."""
    journaled = journal.journaled_ids(commits)
    sources = {
        row["commit_id"]: row["source_path"]
        for row in commits.select(["commit_id", "source_path"]).to_pylist()
    }
    named = journal.named_versions(commits)
    filesystem, base = warehouse.storage.arrow_filesystem()
    for name, version in sorted(named.items()):
        scan = report.logs[name]
        if version > scan.readable_up_to:
            continue  # reported with the log
        table = open_table(warehouse.storage, name, version)
        if table is None:
            continue
        files = active_files(table)
        listing = warehouse.storage.list_files(name)
        wanted = []
        for path, size, rows in zip(
            files["path"].to_pylist(),
            files["size_bytes"].to_pylist(),
            files["num_records"].to_pylist(),
            strict=True,
        ):
            commit = journal.commit_of(path)
            if commit is not None and commit not in journaled:
                continue  # a leftover: nobody reads it
            source = (sources.get(commit) or "",) if commit else ()
            found = listing.get(f"{name}/{path}")
            added = _added_at(scan, path)
            if found is None:
                report.problems.append(
                    Problem(
                        name,
                        added,
                        f"data file {path} is missing",
                        rows or 0,
                        tuple(filter(None, source)),
                        path,
                    )
                )
            elif found != size:
                report.problems.append(
                    Problem(
                        name,
                        added,
                        f"data file {path} has {found:,} bytes, not the {size:,} "
                        "its log recorded (cut short or overwritten)",
                        rows or 0,
                        tuple(filter(None, source)),
                        path,
                    )
                )
            else:
                wanted.append((path, rows, added, tuple(filter(None, source))))
        with ThreadPoolExecutor(8) as pool:
            problems = pool.map(
                file_problem,
                [filesystem] * len(wanted),
                [f"{base}/{name}/{item[0]}" for item in wanted],
                [item[1] for item in wanted],
                [deep] * len(wanted),
            )
            for (path, rows, added, source), problem in zip(wanted, problems, strict=True):
                report.files_checked += 1
                if problem is not None:
                    report.problems.append(
                        Problem(name, added, f"data file {path} {problem}", rows or 0, source, path)
                    )


def _added_at(scan: LogScan, path: str) -> int | None:
    """The log version that added ``path`` (None when a checkpoint holds it)."""
    return max((v for v, e in scan.entries.items() if path in e.adds), default=None)


def _half_done_maintenance(report: CheckReport, commits: pa.Table) -> list[str]:
    named = journal.named_versions(commits)
    tables = [
        name
        for name in TABLES
        if any(
            e.operation == "OPTIMIZE" and v > named.get(name, -1)
            for v, e in report.logs[name].entries.items()
        )
    ]
    if not tables:
        return []
    return [
        f"a compaction of {', '.join(tables)} was stopped before it was journaled; "
        "readers see the table as it was, and the next 'kvtrace optimize', "
        "'kvtrace vacuum' or 'kvtrace check --repair' completes it"
    ]
