"""An Nsight Systems SQLite export (``nsys export --type sqlite``), opened read-only: which
of its tables kvtrace reads, their enumerations, and the one query that reads them.

Table and column names, and the enumerations' values, are those of NVIDIA's "SQLite
Schema Reference" (Nsight Systems User Guide, export schema 3.16.1 of Nsight Systems
2024.6; the tables kvtrace reads have kept these columns since the 2021 exports).  Tables
are created only when a report holds their data, so any of them may be missing, and
columns added in later versions may be missing too: a missing one reads as NULL.  Every
timestamp is an integer of nanoseconds since the start of the capture session, whose
wall-clock time is ``TARGET_INFO_SESSION_START_TIME.utcEpochNs``.  A thread is a
serialized ``globalTid`` (process id in bits 24 to 47, thread id in bits 0 to 23, as the
reference's "Serialized process and thread identifiers" recipe decodes them); a
``globalPid`` is the same with no thread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kvtrace.errors import InputError

SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite 3 database
STRINGS = "StringIds"
NVTX = "NVTX_EVENTS"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"
COPIES = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSETS = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNCS = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
GPU_TABLES = (KERNELS, COPIES, MEMSETS, SYNCS)
SESSION_START = "TARGET_INFO_SESSION_START_TIME"
EXPORT_META = "META_DATA_EXPORT"
# tables one of which, beside StringIds, every export holds
_MARKS = (*GPU_TABLES, RUNTIME, NVTX, SESSION_START, EXPORT_META, "ANALYSIS_DETAILS")

# where a row comes from; at one start time rows are read in this order (a range before
# the calls inside it, a launch call before the GPU work it starts)
SOURCES = (NVTX, RUNTIME, KERNELS, COPIES, MEMSETS, SYNCS)
COLUMNS = (
    "source", "row", "start", "end", "global_id", "device", "stream", "correlation",
    "name", "copy_kind", "src_kind", "dst_kind", "bytes", "subtype",
)  # fmt: skip

# the enumerations as the reference documents them, for an export without their tables
_COPY_KINDS = {
    0: "CUDA_MEMCPY_KIND_UNKNOWN", 1: "CUDA_MEMCPY_KIND_HTOD", 2: "CUDA_MEMCPY_KIND_DTOH",
    3: "CUDA_MEMCPY_KIND_HTOA", 4: "CUDA_MEMCPY_KIND_ATOH", 5: "CUDA_MEMCPY_KIND_ATOA",
    6: "CUDA_MEMCPY_KIND_ATOD", 7: "CUDA_MEMCPY_KIND_DTOA", 8: "CUDA_MEMCPY_KIND_DTOD",
    9: "CUDA_MEMCPY_KIND_HTOH", 10: "CUDA_MEMCPY_KIND_PTOP", 11: "CUDA_MEMCPY_KIND_UVM_HTOD",
    12: "CUDA_MEMCPY_KIND_UVM_DTOH", 13: "CUDA_MEMCPY_KIND_UVM_DTOD",
}  # fmt: skip
_MEMORY_KINDS = {
    0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
    6: "Managed Static", 7: "Unknown",
}  # fmt: skip
_NVTX_RANGE_TYPES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60}
NVTX_MARK = "NvtxMark"
_NVTX_MARK_TYPE = 34


@dataclass(frozen=True)
class Enumerations:
    """The export's enumerations kvtrace needs (its own tables, else the documented ones)."""

    copy_kinds: dict[int, str]  # copyKind -> CUDA_MEMCPY_KIND_* symbol
    memory_kinds: dict[int, str]  # srcKind, dstKind, memKind -> label (Pageable, ...)
    nvtx_ranges: tuple[int, ...]  # eventType of push/pop and start/end ranges
    nvtx_marks: tuple[int, ...]  # eventType of marks (instants)


def is_sqlite(head: bytes) -> bool:
    """Whether a file's first bytes are those of an SQLite 3 database."""
    return head.startswith(SQLITE_MAGIC)


def open_database(path: Path) -> sqlite3.Connection:
    """``path`` opened read-only (and as immutable: an export is never written again, so
    no lock or journal file is made beside it); raises `InputError` when it cannot be."""
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        raise InputError(f"{path} cannot be read as an SQLite database: {exc}") from None
    return connection


def table_columns(connection: sqlite3.Connection, path: Path) -> dict[str, frozenset[str]]:
    """Every table of the database and its columns."""
    try:
        names = [
            name
            for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        return {
            name: frozenset(
                row[1] for row in connection.execute(f"PRAGMA table_info({quote(name)})")
            )
            for name in names
        }
    except sqlite3.Error as exc:
        raise InputError(f"{path} cannot be read as an SQLite database: {exc}") from None


def is_export(columns: dict[str, frozenset[str]]) -> bool:
    """Whether a database's tables are those of an Nsight Systems export."""
    return STRINGS in columns and any(table in columns for table in _MARKS)


def enumerations(
    connection: sqlite3.Connection, columns: dict[str, frozenset[str]]
) -> Enumerations:
    """The enumerations of the export (each from its table where the export has it)."""
    copy_kinds = _enum(connection, columns, "ENUM_CUDA_MEMCPY_OPER", "name") or _COPY_KINDS
    memory_kinds = _enum(connection, columns, "ENUM_CUDA_MEM_KIND", "label") or _MEMORY_KINDS
    types = {
        name: id_
        for id_, name in _enum(connection, columns, "ENUM_NSYS_EVENT_TYPE", "name").items()
    }
    ranges = tuple(types.get(name, default) for name, default in _NVTX_RANGE_TYPES.items())
    return Enumerations(copy_kinds, memory_kinds, ranges, (types.get(NVTX_MARK, _NVTX_MARK_TYPE),))


def _enum(
    connection: sqlite3.Connection, columns: dict[str, frozenset[str]], table: str, text: str
) -> dict[int, str]:
    if not {"id", text} <= columns.get(table, frozenset()):
        return {}
    rows = connection.execute(f"SELECT id, {quote(text)} FROM {quote(table)}")
    return {id_: value for id_, value in rows if isinstance(id_, int) and isinstance(value, str)}


def events_query(columns: dict[str, frozenset[str]], enums: Enumerations) -> str | None:
    """One query over every event table the export has, rows in `COLUMNS` order sorted by
    start, source (`SOURCES`) and row id; None when the export has none of them.  A name
    is a StringIds id (`Strings` reads it), or an NVTX range's own text."""
    parts = [
        _select(index, table, columns, enums)
        for index, table in enumerate(SOURCES)
        if table in columns
    ]
    if not parts:
        return None
    return " UNION ALL ".join(parts) + " ORDER BY start, source, row"


def _select(
    source: int, table: str, columns: dict[str, frozenset[str]], enums: Enumerations
) -> str:
    own = columns[table]

    def col(name: str) -> str:
        return f"t.{quote(name)}" if name in own else "NULL"

    where = ""
    if table == NVTX:  # the text, or the id of a registered string
        name = f"coalesce({col('text')}, {col('textId')})"
        where = f" WHERE t.eventType IN ({', '.join(map(str, enums.nvtx_ranges))})"
        where += ' AND t."end" IS NOT NULL'
    elif table == KERNELS:
        name = col("demangledName") if "demangledName" in own else col("shortName")
    else:
        name = col("nameId") if table == RUNTIME else "NULL"
    global_id = col("globalTid") if table in (NVTX, RUNTIME) else col("globalPid")
    subtype = {MEMSETS: "memKind", SYNCS: "syncType"}.get(table, "")
    values = [
        str(source), "t.rowid", col("start"), col("end"), global_id, col("deviceId"),
        col("streamId"), col("correlationId"), name, col("copyKind"), col("srcKind"),
        col("dstKind"), col("bytes"), col(subtype),
    ]  # fmt: skip
    selected = ", ".join(
        f"{value} AS {quote(alias)}" for value, alias in zip(values, COLUMNS, strict=True)
    )
    return f"SELECT {selected} FROM {quote(table)} AS t{where}"


class Strings:
    """The texts of StringIds ids, each read once when first asked for (an export's
    events name few distinct strings, and it may hold many others)."""

    def __init__(self, connection: sqlite3.Connection, columns: dict[str, frozenset[str]]):
        self._connection = connection
        self._readable = {"id", "value"} <= columns.get(STRINGS, frozenset())
        self._known: dict[int, str] = {}

    def __call__(self, id_: int) -> str:
        if (text := self._known.get(id_)) is None:
            row = None
            if self._readable:
                query = f"SELECT value FROM {STRINGS} WHERE id = ?"
                row = self._connection.execute(query, (id_,)).fetchone()
            text = self._known[id_] = row[0] if row and isinstance(row[0], str) else ""
        return text


def count_rows(connection: sqlite3.Connection, columns: dict[str, frozenset[str]]) -> int:
    """About how many rows the event tables hold (their largest row ids: no scan)."""
    total = 0
    for table in SOURCES:
        if table in columns:
            (largest,) = connection.execute(f"SELECT max(rowid) FROM {quote(table)}").fetchone()
            total += largest if isinstance(largest, int) else 0
    return total


def nvtx_left_out(
    connection: sqlite3.Connection, columns: dict[str, frozenset[str]], enums: Enumerations
) -> tuple[int, int]:
    """How many NVTX marks (instants) and how many ranges that never ended the export
    holds: neither is a complete event."""
    if NVTX not in columns or not {"eventType", "end"} <= columns[NVTX]:
        return 0, 0
    marks = ", ".join(map(str, enums.nvtx_marks))
    ranges = ", ".join(map(str, enums.nvtx_ranges))
    row = connection.execute(
        f"SELECT sum(eventType IN ({marks})), "
        f'sum(eventType IN ({ranges}) AND "end" IS NULL) FROM {NVTX}'
    ).fetchone()
    return int(row[0] or 0), int(row[1] or 0)


def gpu_processes(connection: sqlite3.Connection, columns: dict[str, frozenset[str]]) -> list[int]:
    """The process ids of the processes whose GPU work the export holds, ascending."""
    parts = [
        f"SELECT DISTINCT globalPid FROM {quote(table)}"
        for table in GPU_TABLES
        if "globalPid" in columns.get(table, frozenset())
    ]
    if not parts:
        return []
    rows = connection.execute(" UNION ".join(parts))
    return sorted({process_id(value) for (value,) in rows if isinstance(value, int)})


def session_facts(
    connection: sqlite3.Connection, columns: dict[str, frozenset[str]]
) -> dict[str, object]:
    """What the export says of itself: the session's start (UTC, ns since the epoch), and
    the Nsight Systems version and schema version that wrote it."""
    facts: dict[str, object] = {}
    if "utcEpochNs" in columns.get(SESSION_START, frozenset()):
        row = connection.execute(f"SELECT utcEpochNs FROM {SESSION_START} LIMIT 1").fetchone()
        if row is not None and isinstance(row[0], int):
            facts["session_start_utc_ns"] = row[0]
    if {"name", "value"} <= columns.get(EXPORT_META, frozenset()):
        meta = dict(connection.execute(f"SELECT name, value FROM {EXPORT_META}").fetchall())
        for key, name in (
            ("nsys_version", "EXPORT_PRODUCT_VERSION"),
            ("export_schema_version", "EXPORT_SCHEMA_VERSION"),
        ):
            if isinstance(meta.get(name), str):
                facts[key] = meta[name]
    return facts


def process_id(global_id: int) -> int:
    """The process id of a serialized ``globalTid`` or ``globalPid``."""
    return (global_id >> 24) & 0xFFFFFF


def thread_id(global_tid: int) -> int:
    """The thread id of a serialized ``globalTid``."""
    return global_tid & 0xFFFFFF


def fetch_runs(cursor: sqlite3.Cursor, size: int) -> Iterator[list[tuple[object, ...]]]:
    """The rows of an executed query, ``size`` at a time."""
    while rows := cursor.fetchmany(size):
        yield rows


def quote(name: str) -> str:
    """An SQLite identifier, quoted."""
    return '"' + name.replace('"', '""') + '"'


__all__ = [
    "COLUMNS",
    "SOURCES",
    "Enumerations",
    "Strings",
    "count_rows",
    "enumerations",
    "events_query",
    "fetch_runs",
    "gpu_processes",
    "is_export",
    "is_sqlite",
    "nvtx_left_out",
    "open_database",
    "process_id",
    "quote",
    "session_facts",
    "table_columns",
    "thread_id",
]
