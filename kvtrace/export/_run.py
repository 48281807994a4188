"""One run's part of an export: its connection, its rows batch by batch, its tracks."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

import duckdb

from kvtrace.export.trace_json import TraceWriter
from kvtrace.sql.named_queries import named_queries

BATCH_ROWS = 65_536  # rows turned into events at a time: what bounds the memory
Row = tuple[Any, ...]


def query_rows(con: duckdb.DuckDBPyConnection, query: str, run_id: str) -> Iterator[list[Row]]:
    """The rows of the export's named query for a run, a batch of tuples at a time."""
    sql = named_queries("kvtrace.export", "perfetto")[query]
    for batch in con.sql(sql, params={"run": run_id}).to_arrow_reader(BATCH_ROWS):
        yield list(zip(*(column.to_pylist() for column in batch.columns), strict=True))


def all_query_rows(con: duckdb.DuckDBPyConnection, query: str, run_id: str) -> list[Row]:
    """The rows of a query that gives few (a run's processes, block sizes)."""
    return [row for rows in query_rows(con, query, run_id) for row in rows]


@dataclass
class RunExport:
    """What a source's writer needs of its run: the rows of the export's queries for
    it, the trace being written, the DSA block size drawn and the pids of its profiler
    processes (by rank and stored pid)."""

    con: duckdb.DuckDBPyConnection
    run_id: str
    run_name: str
    writer: TraceWriter
    dsa_block_size: int | None = None
    profiler_pids: dict[tuple[Any, str], int] = field(default_factory=dict)

    def rows(self, query: str) -> Iterator[list[Row]]:
        """The rows of the named query for this run, a batch of tuples at a time."""
        return query_rows(self.con, query, self.run_id)

    def all_rows(self, query: str) -> list[Row]:
        """The rows of a query that gives few."""
        return all_query_rows(self.con, query, self.run_id)

    def process(self, part: str, *key: object) -> int:
        """The pid of this run's process ``part`` (its name after the run's)."""
        return self.writer.process((self.run_id, part, *key), f"{self.run_name} · {part}")


def write_counter_groups(
    run: RunExport,
    query: str,
    group: Callable[[Row], Hashable],
    event: Callable[[Row], dict[str, Any]],
    arg: Callable[[Row], tuple[str, Any]],
) -> int:
    """Counter events from a query whose rows come grouped: consecutive rows of one
    ``group`` make one ``event`` (its ``args`` filled from each row's ``arg``: key,
    value), also across batches; returns how many events."""
    written = 0
    pending: dict[str, Any] | None = None
    last: Hashable = None
    for rows in run.rows(query):
        events: list[dict[str, Any]] = []
        for row in rows:
            key = group(row)
            if pending is None or key != last:
                if pending is not None:
                    events.append(pending)
                pending, last = {**event(row), "args": {}}, key
            name, value = arg(row)
            pending["args"][name] = value
        run.writer.write(events)
        written += len(events)
    if pending is not None:
        run.writer.write([pending])
        written += 1
    return written


def seconds_to_us(seconds: float) -> float:
    """A wall-clock time in seconds from the run's start as the format's microseconds."""
    return seconds * 1e6
