"""Taking commits back whole: a retracted commit's rows leave every table.

A commit's own files carry its id in their names and leave the tables' logs.  Its rows
may also sit in a compacted file (`kvtrace.warehouse.ops._compacted`): that file is replaced
by the files it was made from (then the commit's own file leaves), or, when they are
gone (vacuumed) or unreadable, it leaves the log too and every commit whose rows it held
is taken back with it.  The files of commits taken back before, their own or compacted
ones, leave the same way: a table rolled back to a version before their retraction
shows them again.  One journal row records what was taken back; the sources of those
commits are the ones to ingest again.  No data file is deleted.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from deltalake.transaction import AddAction, RemoveAction

from kvtrace.warehouse import _journal as journal
from kvtrace.warehouse._commit import COLLECTOR_APP_PREFIX
from kvtrace.warehouse._delta_log import active_files, commit_actions, open_table
from kvtrace.warehouse._store import Warehouse
from kvtrace.warehouse.ops._compacted import held_commits, put_back_inputs
from kvtrace.warehouse.ops.integrity import scan_log
from kvtrace.warehouse.ops.maintenance import row
from kvtrace.warehouse.schema.tables import TABLES


@dataclass
class Retraction:
    """What a retraction did (one sentence each) and the sources to ingest again."""

    done: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


def retract(
    warehouse: Warehouse,
    commits: dict[str, dict[str, Any]],
    again: list[dict[str, str]],
    deep: bool = False,
) -> Retraction:
    """Take ``commits`` (journal rows by commit id) back whole, and ``again`` (retractions
    a lost journal row had made) back again, in one journal row; ``deep``: the files put
    back in place of a compacted one are read whole first."""
    result = Retraction()
    commits = dict(commits)
    commit_id = journal.new_commit_id()
    every = journal.every_row(warehouse.storage).to_pylist()
    taken_back = {t["commit_id"] for r in every for t in r["retracted"] or []}
    standing = {r["commit_id"]: r for r in every if r["commit_id"] not in taken_back}
    taken_back |= {t["commit_id"] for t in again}
    changed: dict[str, int] = {}  # table -> its version after the changes made to it
    while _free_from_compacted_files(
        warehouse, commits, standing, commit_id, deep, changed, result
    ):
        pass  # one compacted file at a time: each changes its table's log
    gone = _file_commits(commits.values()) | taken_back
    gone |= _file_commits(r for r in every if r["commit_id"] in taken_back)
    gone -= _file_commits(r for c, r in standing.items() if c not in commits)
    for name in TABLES:
        table = open_table(warehouse.storage, name)
        paths = [] if table is None else active_files(table)["path"].to_pylist()
        own = [p for p in paths if journal.commit_of(p) in gone]
        if own:
            changed[name] = take_out(warehouse, name, own, commit_id)
    if not commits and not again and not changed:
        return result
    entries = [_entry(name, version, commit_id) for name, version in sorted(changed.items())]
    retracted = again + [
        {"commit_id": c, "app_id": app_id(commit)} for c, commit in sorted(commits.items())
    ]
    journal.append(
        warehouse.storage,
        row(commit_id, "repair", entries, retracted),
        f"{COLLECTOR_APP_PREFIX}{commit_id}",
    )
    result.sources = sorted({c["source_path"] for c in commits.values() if c["source_path"]})
    if commits:
        result.done.append(
            f"retracted {len(commits)} commit(s) whose rows could not all be "
            "read; their other files were taken out of the logs too"
        )
    if again:
        result.done.append(
            f"took back again {len(again)} commit(s) that a lost journal entry had taken back"
        )
    return result


def _file_commits(rows: Iterable[dict[str, Any]]) -> set[str]:
    """The commits named in the files that journal ``rows`` make visible: a row's own, or
    that of an earlier commit of its source whose journal row never landed, completed."""
    found: set[str] = set()
    for r in rows:
        found.add(r["commit_id"])
        found.update(e["commit_id"] for e in r["tables"] or [])
    return found


def _free_from_compacted_files(
    warehouse: Warehouse,
    commits: dict[str, dict[str, Any]],
    standing: dict[str, dict[str, Any]],
    commit_id: str,
    deep: bool,
    changed: dict[str, int],
    result: Retraction,
) -> bool:
    """Undo (or take out) one compacted file that holds rows of ``commits`` or of a commit
    taken back before (a table rolled back to a version before that retraction shows it
    again), noting its table's new version in ``changed``; False when none does.  A
    compacted file taken out adds the ``standing`` commits whose rows it held to
    ``commits``."""
    staying = _file_commits(r for c, r in standing.items() if c not in commits)
    for name in TABLES:
        table = open_table(warehouse.storage, name)
        compacted = [] if table is None else _compacted_paths(table)
        if not compacted:
            continue
        scan = scan_log(warehouse, name)
        for path in compacted:
            held = held_commits(scan, path)
            if held <= staying:
                continue
            if restored := put_back_inputs(warehouse, name, path, deep):
                changed[name] = restored[1]
                result.done.append(
                    f"{name}: put back the {restored[0]} file(s) the compacted file {path} "
                    "was made from, to take a commit's rows out"
                )
                return True
            changed[name] = take_out(warehouse, name, [path], commit_id)
            commits.update(
                {
                    c: r
                    for c, r in standing.items()
                    if c not in commits and _file_commits([r]) & held
                }
            )
            result.done.append(
                f"{name}: took the compacted file {path} out of the log (the files it was "
                "made from are gone); the commits whose rows it held are retracted"
            )
            return True
    return False


def _compacted_paths(table: Any) -> list[str]:
    return [p for p in active_files(table)["path"].to_pylist() if journal.commit_of(p) is None]


def app_id(commit: dict[str, Any]) -> str:
    """The application transaction of a journal row's commit."""
    if commit["source_sha256"]:
        return f"kvtrace-source:{commit['run_id']}:{commit['source_sha256']}"
    return f"{COLLECTOR_APP_PREFIX}{commit['commit_id']}"


def take_out(warehouse: Warehouse, name: str, paths: list[str], commit_id: str) -> int:
    """Take ``paths`` out of table ``name``'s log (the files stay); its new version."""
    table = open_table(warehouse.storage, name)
    assert table is not None
    now_ms = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = [RemoveAction(p, True, now_ms) for p in paths]
    return commit_actions(table, TABLES[name].schema, actions, "repair", commit_id)


def _entry(table: str, version: int, commit_id: str) -> dict[str, Any]:
    return {
        "table": table,
        "version": version,
        "commit_id": commit_id,
        "files": 0,
        "rows": 0,
        "bytes": 0,
    }
