"""One entry of a Delta log, read without trusting any library to notice damage.

Delta Lake reads a 0-byte entry as a commit that did nothing, so a damaged journal would
hide commits without an error; `read_entry` tells an empty, cut or garbled entry from a
sound one.  Nothing here loads Arrow or Delta Lake: opening a warehouse checks its
journal's newest entry with it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from kvtrace._version import __version__
from kvtrace.errors import WarehouseError

_ACTIONS = {
    "commitInfo",
    "add",
    "remove",
    "metaData",
    "protocol",
    "txn",
    "cdc",
    "domainMetadata",
    "checkpointMetadata",
    "sidecar",
}
DAMAGED = "'kvtrace check' says what is wrong, and 'kvtrace check --repair' mends it"
REPAIR_NOTE = "kvtrace.repair"  # the commitInfo field of an entry a repair wrote again
EMPTY = "the log entry is empty (0 bytes): its commit is lost"  # Delta Lake reads past it


@dataclass
class LogEntry:
    """What one version of a Delta log did to the table's files."""

    version: int
    adds: dict[str, dict[str, Any]] = field(default_factory=dict)  # path -> add action
    removes: list[str] = field(default_factory=list)
    operation: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # commitInfo


def read_entry(version: int, raw: bytes) -> tuple[LogEntry, str | None]:
    """The entry ``raw`` of ``version``, and what is wrong with it (None: it is sound)."""
    entry = LogEntry(version)
    if not raw.strip():
        return entry, EMPTY
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except (ValueError, RecursionError):
            return entry, f"the log entry is garbled or cut short (line {number} is not JSON)"
        if not isinstance(action, dict) or len(action) != 1 or not set(action) <= _ACTIONS:
            return entry, f"the log entry is garbled (line {number} is no Delta action)"
        kind, body = next(iter(action.items()))
        if not isinstance(body, dict):
            return entry, f"the log entry is garbled (line {number} is no Delta action)"
        if kind == "add":
            entry.adds[body.get("path", "")] = body
        elif kind == "remove":
            entry.removes.append(body.get("path", ""))
        elif kind == "commitInfo":
            entry.metadata = body
            entry.operation = body.get("operation")
    return entry, None


def refuse_damaged_journal_entry(version: int, raw: bytes) -> None:
    """Raise a `WarehouseError` when ``raw``, the journal's entry of ``version``, is empty
    or garbled."""
    if (problem := read_entry(version, raw)[1]) is not None:
        raise WarehouseError(
            f"version {version} of the warehouse's journal cannot be read ({problem}); {DAMAGED}"
        )


def empty_commit(note: str) -> bytes:
    """An entry that changes nothing, saying why (``note``): what a repair writes in place
    of an entry that lost its content, so that the log stays contiguous."""
    info = {
        "timestamp": int(time.time() * 1000),
        "operation": "WRITE",
        "operationParameters": {"mode": "Append"},
        "clientVersion": f"kvtrace-{__version__}",
        REPAIR_NOTE: note,
    }
    return (json.dumps({"commitInfo": info}, separators=(",", ":")) + "\n").encode()
