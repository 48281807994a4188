"""Compacted files: the commits whose rows each holds, and putting back what it was made of.

Delta Lake's compaction (``kvtrace optimize``) writes files whose names carry no commit.
The log entry that added one removed the files it was made from: their names carry their
commits, or they were compacted files themselves, followed back the same way.
"""

from __future__ import annotations

import time

import pyarrow.parquet as pq
from deltalake.transaction import AddAction, RemoveAction

from kvtrace.warehouse import _journal as journal
from kvtrace.warehouse._delta_log import active_files, commit_actions, file_stats, open_table
from kvtrace.warehouse._log_entry import LogEntry
from kvtrace.warehouse._store import Warehouse
from kvtrace.warehouse.ops._file_check import file_problem
from kvtrace.warehouse.ops.integrity import LogScan, scan_log
from kvtrace.warehouse.schema.tables import TABLES


def held_commits(scan: LogScan, path: str) -> set[str]:
    """The commits whose rows the compacted file ``path`` holds (none known when the log
    no longer has the entry that made it)."""
    made_at = _compaction_of(scan, path)
    if made_at is None:
        return set()
    held: set[str] = set()
    for source in made_at.removes:
        commit = journal.commit_of(source)
        if commit is None:
            held |= held_commits(scan, source)
        else:
            held.add(commit)
    return held


def put_back_inputs(
    warehouse: Warehouse, name: str, path: str, deep: bool
) -> tuple[int, int] | None:
    """Replace the compacted file ``path`` of table ``name`` (and every file its compaction
    wrote) by the files it was made from, when they all are still there and readable
    (with ``deep``, every page): how many were put back and the table's new version
    (None: not possible)."""
    made_at = _compaction_of(scan_log(warehouse, name), path)
    table = open_table(warehouse.storage, name)
    if made_at is None or table is None:
        return None
    sources = sorted(set(made_at.removes))
    active = set(active_files(table)["path"].to_pylist())
    listing = warehouse.storage.list_files(name)
    filesystem, base = warehouse.storage.arrow_filesystem()
    if not set(made_at.adds) <= active or any(f"{name}/{p}" not in listing for p in sources):
        return None
    if any(file_problem(filesystem, f"{base}/{name}/{p}", None, deep) for p in sources):
        return None
    now_ms = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = [
        RemoveAction(p, True, now_ms, made_at.adds[p].get("size")) for p in made_at.adds
    ]
    for source in sources:
        footer = pq.read_metadata(f"{base}/{name}/{source}", filesystem=filesystem)
        actions.append(
            AddAction(source, listing[f"{name}/{source}"], {}, now_ms, False, file_stats(footer))
        )
    version = commit_actions(table, TABLES[name].schema, actions, "repair", journal.new_commit_id())
    return len(sources), version


def _compaction_of(scan: LogScan, path: str) -> LogEntry | None:
    """The compaction entry of ``scan`` that added ``path``."""
    return next(
        (e for e in scan.entries.values() if path in e.adds and e.operation == "OPTIMIZE"), None
    )
