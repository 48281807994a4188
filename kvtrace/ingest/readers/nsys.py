"""Read Nsight Systems SQLite exports (``nsys export --type sqlite``) into
``timeline_events``, as the PyTorch profiler (Kineto) would have written the same events,
so that every timeline view reads them as it reads a Kineto trace.

What becomes a row (`kvtrace.ingest.readers._nsys_export` reads the tables):

* CUDA kernels (``CUPTI_ACTIVITY_KIND_KERNEL``): category ``kernel``, the demangled name,
  device, stream and correlation id; pid is the device and tid the stream, as Kineto
  writes GPU events.
* copies (``CUPTI_ACTIVITY_KIND_MEMCPY``): ``gpu_memcpy`` named as Kineto names them
  (``Memcpy HtoD (Pinned -> Device)``), the copy kind (``HtoD``, ``DtoH``, ``DtoD``,
  ``PtoP``, ...; a unified-memory migration takes its direction, an unknown kind none),
  bytes, and the bandwidth Kineto gives (bytes per nanosecond: GB/s).
* memsets (``CUPTI_ACTIVITY_KIND_MEMSET``): ``gpu_memset``, ``Memset (Device)``, bytes.
* CUDA API calls (``CUPTI_ACTIVITY_KIND_RUNTIME``): ``cuda_runtime`` (``cuda*``) or
  ``cuda_driver`` (``cu*``), named without the ``_vNNNN`` version suffix nsys keeps and
  Kineto drops (``cudaLaunchKernel_v7000`` is ``cudaLaunchKernel``), with the
  correlation id that links a launch to its kernel; pid and tid the calling thread's.
* synchronisation (``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION``): ``cuda_sync``, ``Event
  Sync``, ``Stream Wait Event``, ``Stream Sync`` or ``Context Sync``; an event or
  context sync on stream -1, as Kineto puts them.  An event sync or stream wait gets
  the stream its event was recorded on and the correlation id of that
  ``cudaEventRecord`` (``wait_on_stream``, ``wait_on_correlation``) from the export's
  CUDA event records (``CUPTI_ACTIVITY_KIND_CUDA_EVENT``), as Kineto links them
  (`kvtrace.ingest.readers._nsys_waits`); without that table both stay NULL and a note
  says so.
* NVTX push/pop and start/end ranges (``NVTX_EVENTS``): ``user_annotation`` events named
  by their text, on the thread that opened them; a range named ``ProfilerStep#N`` is an
  iteration, as in a Kineto trace.  Marks (instants) and ranges that never ended are
  counted as left out.

Times are on Kineto's clock, so that an export lines up with PyTorch profiler traces and
with counters written on that clock (`kvtrace.collectors.counters`): the export gives
nanoseconds since the capture session's start, and its session start as Unix time
(``TARGET_INFO_SESSION_START_TIME.utcEpochNs``); Kineto writes Unix nanoseconds less a
base time, that Unix time floored to whole periods of 7,889,238 s (libkineto's
output_json.h), divided by 1000.  So ``ts_us`` = (session start - base + start) / 1000
and ``dur_us`` = (end - start) / 1000, exact to the nanosecond; the run's settings keep
``base_time_ns`` and ``session_start_utc_ns``.  An export without its session start
keeps the session's clock (``ts_us`` = start / 1000; ``clock``: ``session``).  An
event's place (``event_idx``) is its place in the export's events sorted by start
(ties: ranges, calls, kernels, copies, memsets, syncs, then row id).  A row whose start
or end is not an integer, or that ends before it starts, goes to the quarantine.

Ranks: an export holds the processes nsys traced.  Where one process ran GPU work, the
rank is the number after ``rank`` in the file's name (``rank3.sqlite``,
``trace_rank_3.sqlite``; as ``nsys profile -o rank%q{RANK}`` names them), else none,
like a Kineto trace without ``distributedInfo``.  Where several did, each such process is
a rank of its own, numbered in process id order (a note says which is which), so the
views never merge two processes' streams.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from kvtrace.errors import InputError
from kvtrace.ingest._lines import is_gzip
from kvtrace.ingest.family import Advance, FileRows, IngestOptions
from kvtrace.ingest.probe import Probe
from kvtrace.ingest.readers import _nsys_export as export
from kvtrace.ingest.readers._nsys_columns import ColumnBuilder, api_name, copy_kind
from kvtrace.ingest.readers._nsys_waits import EVENT_RECORDS, wait_links, waits_without_records
from kvtrace.ingest.sink import FileSink
from kvtrace.warehouse.rows.rejects import BadLine
from kvtrace.warehouse.schema.timeline import TIMELINE_EVENTS

BATCH_ROWS = 50_000
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")  # Nsight Systems' own report files
KINETO_BASE_PERIOD_NS = 7_889_238 * 10**9  # Kineto's base time: whole three-month periods
NVTX_MARK = "NVTX mark (an instant, not a range)"
NVTX_UNENDED = "NVTX range that never ended"
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
_TIME_LIMIT_NS = 2**53  # times on the clock stay exact in float64 within it


def rank_in_name(path: Path) -> int | None:
    """The rank a file's name gives (the last ``rank<N>``, ``rank_<N>`` or ``rank-<N>``)."""
    found = _RANK_IN_NAME.findall(path.name)
    return int(found[-1]) if found else None


def not_an_export(probe: Probe) -> InputError | None:
    """The error for an Nsight Systems report not yet exported, or an SQLite database
    that is not a readable export; None for an export, or any other file."""
    if probe.path.suffix in REPORT_SUFFIXES:
        return InputError(
            f"{probe.path} is an Nsight Systems report: kvtrace reads its SQLite export, "
            f"which 'nsys export --type sqlite {probe.path.name}' writes"
        )
    if not export.is_sqlite(probe.head):
        return None
    if is_gzip(probe.path):
        return InputError(
            f"{probe.path} is a gzip-compressed SQLite database: decompress it (gunzip) "
            "before ingesting it"
        )
    try:
        connection = export.open_database(probe.path)
    except InputError as exc:
        return exc
    try:
        columns = export.table_columns(connection, probe.path)
    except InputError as exc:
        return exc
    finally:
        connection.close()
    if export.is_export(columns):
        return None
    return InputError(
        f"{probe.path} is an SQLite database but not an Nsight Systems export: it has "
        "none of the tables nsys writes (StringIds beside CUPTI_ACTIVITY_KIND_*, "
        "NVTX_EVENTS or TARGET_INFO_*); kvtrace reads what 'nsys export --type sqlite' writes"
    )


@dataclass
class NsysReader:
    """Stream an export's events as Arrow batches; ``rejected``, ``skipped``, ``rank``,
    ``world_size``, ``config`` and ``notes`` are filled in as it is read."""

    path: Path
    rejected: list[BadLine] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    rank: int | None = None  # every row's rank, where one process ran GPU work
    world_size: int | None = None
    config: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _ranks: dict[int, int] = field(default_factory=dict)  # process id -> rank, if several
    _offset_ns: int = 0  # the session's start on Kineto's clock
    _columns: ColumnBuilder | None = field(default=None, repr=False)

    def batches(self, progress: Advance | None = None) -> Iterator[pa.Table]:
        """Batches of up to `BATCH_ROWS` events, in start order."""
        connection = export.open_database(self.path)
        try:
            yield from self._read(connection, progress)
        except sqlite3.Error as exc:
            raise InputError(f"{self.path}: the export cannot be read: {exc}") from None
        finally:
            connection.close()

    def _read(self, connection: sqlite3.Connection, progress: Advance | None) -> Iterator[pa.Table]:
        columns = export.table_columns(connection, self.path)
        if not export.is_export(columns):
            raise InputError(f"{self.path} is not an Nsight Systems SQLite export")
        enums = export.enumerations(connection, columns)
        self._find_ranks(export.gpu_processes(connection, columns))
        facts = export.session_facts(connection, columns)
        self._offset_ns, clock = _clock(facts.get("session_start_utc_ns"))
        self.config = {"format": "nsys", **facts, **clock}
        if self._ranks:
            self.config["ranks_by_process"] = {str(pid): r for pid, r in self._ranks.items()}
        marks, unended = export.nvtx_left_out(connection, columns, enums)
        self.skipped.update({k: n for k, n in ((NVTX_MARK, marks), (NVTX_UNENDED, unended)) if n})
        strings = export.Strings(connection, columns)
        waits = wait_links(connection, columns)
        if unlinked := waits_without_records(connection, columns):
            self.notes.append(
                f"the export has {unlinked} event syncs and stream waits but no CUDA event "
                f"records ({EVENT_RECORDS}): the stream each waits on is left empty"
            )
        self._columns = ColumnBuilder(
            enums, strings, self._offset_ns, self.rank, self._ranks, waits
        )
        query = export.events_query(columns, enums)
        if query is None:
            return
        total = max(export.count_rows(connection, columns), 1)
        size = self.path.stat().st_size
        index = 0
        for rows in export.fetch_runs(connection.execute(query), BATCH_ROWS):
            yield self._table(rows, index)
            index += len(rows)
            if progress is not None:
                progress(min(size, size * index // total))

    def _find_ranks(self, processes: list[int]) -> None:
        """Each process its rank when several ran GPU work; else the file name's rank."""
        if len(processes) <= 1:
            self.rank = rank_in_name(self.path)
            return
        self._ranks = {pid: rank for rank, pid in enumerate(processes)}
        self.world_size = len(processes)
        self.notes.append(
            f"the export holds the GPU work of {len(processes)} processes, each stored as a "
            "rank in process id order: "
            + ", ".join(f"process {pid} as rank {rank}" for pid, rank in self._ranks.items())
        )

    def _table(self, rows: list[tuple[Any, ...]], first: int) -> pa.Table:
        """One batch of rows as `TIMELINE_EVENTS` columns (bad rows to ``rejected``)."""
        assert self._columns is not None
        low, high = -_TIME_LIMIT_NS - self._offset_ns, _TIME_LIMIT_NS - self._offset_ns
        good = [
            type(row[2]) is int and type(row[3]) is int and low <= row[2] <= row[3] <= high
            for row in rows
        ]
        if all(good):
            return self._columns.table(rows, list(range(first, first + len(rows))))
        kept: list[tuple[int, tuple[Any, ...]]] = []
        for index, (row, usable) in enumerate(zip(rows, good, strict=True), first):
            if usable:
                kept.append((index, row))
            else:
                self.rejected.append(BadLine(index + 1, _bad_times(row), _raw(row)))
        if not kept:
            return TIMELINE_EVENTS.schema.empty_table()
        return self._columns.table([row for _, row in kept], [index for index, _ in kept])


def _clock(session_start_utc_ns: object) -> tuple[int, dict[str, Any]]:
    """The session's start on Kineto's clock (ns), and what the run's settings say of the
    clock: Kineto's base time, or that the session's own clock is kept."""
    if type(session_start_utc_ns) is not int:
        return 0, {"clock": "session"}
    base = session_start_utc_ns - session_start_utc_ns % KINETO_BASE_PERIOD_NS
    return session_start_utc_ns - base, {"clock": "kineto", "base_time_ns": base}


def _bad_times(row: tuple[Any, ...]) -> str:
    table = export.SOURCES[row[0]]
    return (
        f"a {table} row needs integer start and end, end >= start, within 2**53 ns of the "
        f"clock's origin (row id {row[1]})"
    )


def _raw(row: tuple[Any, ...]) -> str:
    """The row's values as JSON, for the quarantine."""
    values = dict(zip(export.COLUMNS, row, strict=True))
    values["source"] = export.SOURCES[row[0]]
    return json.dumps(values, default=repr)[:2000]


class NsysFamily:
    """Nsight Systems SQLite exports into ``timeline_events``."""

    name = "nsys"
    reads = "Nsight Systems SQLite exports (nsys export --type sqlite)"
    tables = (TIMELINE_EVENTS.name,)
    reads_only_record_keys = True

    def recognise(self, probe: Probe) -> str | None:
        if not export.is_sqlite(probe.head):
            return None
        return "nsys" if not_an_export(probe) is None else None

    def forced_format(self, probe: Probe) -> str:
        if (problem := not_an_export(probe)) is not None:
            raise problem
        if not export.is_sqlite(probe.head):
            raise InputError(
                f"{probe.path} is not an Nsight Systems export: not an SQLite database"
            )
        return "nsys"

    def run_name(self, probe: Probe, fmt: str, options: IngestOptions) -> str:
        return options.run_name or probe.source.default_run_name()

    def read(
        self, probe: Probe, fmt: str, sink: FileSink, options: IngestOptions, advance: Advance
    ) -> FileRows:
        reader = NsysReader(probe.path)
        events = sink.open_file(TIMELINE_EVENTS.name)
        rows = 0
        for batch in reader.batches(advance):
            rows += events.append(batch)
        events.close()
        return FileRows(
            "timeline",
            rows=rows,
            rejected=reader.rejected,
            skipped=reader.skipped,
            config=reader.config,
            rank=reader.rank,
            world_size=reader.world_size,
            notes=reader.notes,
        )


NSYS = NsysFamily()

__all__ = ["NSYS", "NsysReader", "api_name", "copy_kind", "not_an_export", "rank_in_name"]
