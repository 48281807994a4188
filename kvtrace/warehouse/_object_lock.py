"""Locks for a warehouse on an object store, where there are no file locks.

A lock is an application transaction id of the Delta table ``_locks``: its version is
odd while someone holds it.  Taking it commits the next odd version; the Delta log lets
only one of several concurrent commits of one id land, so exactly one taker wins.
Giving it back commits the next even version.  A holder that died leaves an odd version
behind: after `STALE_AFTER_S` seconds without change, a waiter takes the lock over.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import CommitProperties, Transaction

from kvtrace.warehouse.schema import LOCK_TABLE

if TYPE_CHECKING:
    from kvtrace.warehouse._storage import Storage

STALE_AFTER_S = 600.0
_SCHEMA = pa.schema([("lock", pa.string())])


def _table(storage: Storage) -> DeltaTable:
    uri = storage.uri(LOCK_TABLE)
    options = storage.storage_options()
    try:
        return DeltaTable(uri, storage_options=options)
    except TableNotFoundError:
        with suppress(CommitFailedError, DeltaError):  # another process created it at once
            DeltaTable.create(uri, schema=_SCHEMA, mode="ignore", storage_options=options)
        return DeltaTable(uri, storage_options=options)


def _commit(table: DeltaTable, app_id: str, version: int) -> None:
    table.create_write_transaction(
        [],
        mode="append",
        schema=_SCHEMA,
        commit_properties=CommitProperties(app_transactions=[Transaction(app_id, version)]),
    )


@contextmanager
def hold(storage: Storage, name: str, wait: bool = True) -> Iterator[bool]:
    """Hold the lock ``name`` of ``storage`` for the block; other takers wait, or not to
    ``wait`` go on without it (the block is told whether it holds the lock)."""
    app_id = f"lock:{name}"
    mine = _take(storage, app_id, wait)
    if mine is None:
        yield False
        return
    try:
        yield True
    finally:
        while True:
            try:
                _commit(_table(storage), app_id, mine + 1)
                break
            except CommitFailedError:
                time.sleep(0.05)


def _take(storage: Storage, app_id: str, wait: bool) -> int | None:
    """Take the lock ``app_id``: the odd version committed for it, or None when another
    holds it and the caller would not ``wait``."""
    seen, seen_since = -1, time.monotonic()
    while True:
        table = _table(storage)
        version = table.transaction_version(app_id) or 0
        if version != seen:
            seen, seen_since = version, time.monotonic()
        held = version % 2 == 1
        if held and time.monotonic() - seen_since < STALE_AFTER_S:
            if not wait:
                return None
            time.sleep(0.1)
            continue
        mine = version + 2 if held else version + 1
        try:
            _commit(table, app_id, mine)
            return mine
        except CommitFailedError:
            continue  # another taker won this round
