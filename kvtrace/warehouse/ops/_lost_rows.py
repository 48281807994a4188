"""The journal rows that damaged journal entries recorded: found on disk, unlisted.

A journal row is a Parquet file of its own, written before the log entry that adds it
(`kvtrace.warehouse._journal.append`), so an entry emptied, cut or garbled leaves its row
on disk with no entry listing it.  The journal's folder may also hold the row of an
append that lost a race (its commit is written again under the next version) or whose
writer died before its entry: a row counts as lost only when no listed row knows its
commit (records it, names its files, or takes it back).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.warehouse import _journal as journal
from kvtrace.warehouse._delta_log import active_files, open_table
from kvtrace.warehouse._storage import Storage
from kvtrace.warehouse.schema import JOURNAL


def lost_rows(
    storage: Storage, version: int | None = None, also_listed: frozenset[str] = frozenset()
) -> pa.Table:
    """The rows that no entry of the journal up to ``version`` (the newest when None)
    lists, nor ``also_listed`` (files sound later entries add), of commits that no
    listed row knows (`kvtrace.warehouse._journal.JOURNAL_SCHEMA`)."""
    table = None if version is not None and version < 0 else open_table(storage, JOURNAL, version)
    listed = set(also_listed)
    if table is not None:
        listed |= set(active_files(table)["path"].to_pylist())
    on_disk = [
        path.split("/", 1)[1]
        for path in storage.list_files(JOURNAL)
        if path.endswith(".parquet") and path.count("/") == 1
    ]
    unlisted = journal.read_files(storage, [p for p in on_disk if p not in listed])
    if unlisted.num_rows == 0:
        return unlisted
    known = journal.read_files(storage, sorted(listed))
    taken_back = pc.list_flatten(known["retracted"]).combine_chunks()
    known_ids = (
        set(known["commit_id"].to_pylist())
        | journal.journaled_ids(known)
        | set(taken_back.field("commit_id").to_pylist())
    )
    lost = pc.invert(
        pc.is_in(unlisted["commit_id"], value_set=pa.array(sorted(known_ids), pa.string()))
    )
    return unlisted.filter(lost)
