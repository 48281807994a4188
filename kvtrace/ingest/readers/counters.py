"""Read named counters: a JSONL file an offloader (or any program) writes beside its
profiler trace, one line per counter value, into ``timeline_counters``.

A line is ``{"ts_us": 1523.5, "name": "kv_prefetch_hits", "value": 17}`` with, optionally,
``"labels": {"layer": "3"}`` (an object of text, numbers or booleans), ``"rank": 0`` (the
process's rank, as the trace's ``distributedInfo`` gives it; absent: a one-process
trace) and ``"pid"`` (the trace process to draw the counter beside).  ``ts_us`` is a time
on the profiler's clock, in microseconds: for a PyTorch profiler trace that is the Unix
time in nanoseconds less the trace's ``baseTimeNanoseconds``, divided by 1,000
(`kvtrace.counters` writes such files).  A line that is not such a record goes to the
quarantine.  The run is named as profiler traces are (``--run-name``, else the folder),
so a counters file beside its trace lands in the trace's run.
"""

from __future__ import annotations

from typing import Any

from kvtrace.ingest._lines import json_records, json_type, raw_text
from kvtrace.ingest._values import BadValue, whole_number
from kvtrace.ingest.family import Advance, FileRows, IngestOptions
from kvtrace.ingest.probe import Probe
from kvtrace.ingest.readers._counter_rows import (
    CounterRow,
    counter_table,
    counter_time,
    counter_value,
    labels_text,
)
from kvtrace.ingest.sink import FileSink, StreamedFile
from kvtrace.warehouse.rows.rejects import BadLine
from kvtrace.warehouse.schema.timeline import TIMELINE_COUNTERS

FIELDS = ("ts_us", "name", "value")  # what every line holds
BATCH_RECORDS = 50_000
_RANK_LIMIT = 2**31  # rank is an int32


def is_counter_record(record: dict[str, Any]) -> bool:
    """A named-counter line: a time, a name and a value."""
    return all(name in record for name in FIELDS)


def counter_row(record: object, event_idx: int) -> tuple[int | None, CounterRow]:
    """The rank and the ``timeline_counters`` row of one line; raises `BadValue` saying
    what is wrong."""
    if not isinstance(record, dict):
        raise BadValue(f"expected a JSON object, got {json_type(record)}")
    missing = [name for name in FIELDS if name not in record]
    if missing:
        raise BadValue(f"a counter record needs {', '.join(FIELDS)}; {missing[0]} is missing")
    name = record["name"]
    if not isinstance(name, str) or not name:
        raise BadValue(f"name must be a non-empty string, got {name!r}"[:200])
    pid = record.get("pid")
    if pid is not None and (isinstance(pid, bool) or not isinstance(pid, (str, int))):
        raise BadValue(f"pid must be text or a whole number, got {pid!r}"[:200])
    row = CounterRow(
        event_idx=event_idx,
        pid=None if pid is None else str(pid),
        counter=name,
        series=None,
        labels=labels_text(record.get("labels")),
        ts_us=counter_time("ts_us", record["ts_us"]),
        value=counter_value("value", record["value"]),
    )
    return _rank(record.get("rank")), row


def _rank(value: object) -> int | None:
    if value is None:
        return None
    rank = whole_number("rank", value)
    if rank >= _RANK_LIMIT:
        raise BadValue(f"rank is out of range: {value!r}")
    return rank


class CountersFamily:
    """Named-counter JSONL, into ``timeline_counters``."""

    name = "counters"
    reads = "named counters (ts_us, name, value)"
    tables = (TIMELINE_COUNTERS.name,)
    reads_only_record_keys = True

    def recognise(self, probe: Probe) -> str | None:
        record = probe.first_record
        return "jsonl" if record is not None and is_counter_record(record) else None

    def forced_format(self, probe: Probe) -> str:
        return "jsonl"

    def run_name(self, probe: Probe, fmt: str, options: IngestOptions) -> str:
        return options.run_name or probe.source.default_run_name()

    def read(
        self, probe: Probe, fmt: str, sink: FileSink, options: IngestOptions, advance: Advance
    ) -> FileRows:
        rejected: list[BadLine] = []
        table = sink.open_file(TIMELINE_COUNTERS.name)
        by_rank: dict[int | None, list[CounterRow]] = {}
        held = stored = 0
        ranks: set[int | None] = set()
        for line_no, text, record in json_records(probe.path, rejected, advance):
            try:
                rank, row = counter_row(record, line_no - 1)
            except BadValue as exc:
                rejected.append(BadLine(line_no, f"bad value: {exc}", raw_text(text)))
                continue
            by_rank.setdefault(rank, []).append(row)
            ranks.add(rank)
            held += 1
            if held >= BATCH_RECORDS:
                stored += _flush(table, by_rank)
                held = 0
        stored += _flush(table, by_rank)
        table.close()
        return FileRows(
            "timeline",  # the run's kind: profiler-clock data, as the trace beside it
            rows=stored,
            rejected=rejected,
            rank=next(iter(ranks)) if len(ranks) == 1 else None,
        )


def _flush(table: StreamedFile, by_rank: dict[int | None, list[CounterRow]]) -> int:
    """Append the rows held, a batch per rank, and forget them; returns rows stored."""
    stored = sum(table.append(counter_table(rows, rank, "jsonl")) for rank, rows in by_rank.items())
    by_rank.clear()
    return stored


COUNTERS = CountersFamily()
