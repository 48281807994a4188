"""``kvtrace export perfetto``: every row with a time of some runs as one Chrome trace /
Perfetto JSON file (``traceEvents``), which ui.perfetto.dev and chrome://tracing open.

What each source becomes is in `kvtrace.export.sources`.  Processes (``pid``) are
numbered from 1 in the order they first appear: run by run in the order the runs were
asked for, and within a run source by source in `SOURCES` order (a run's profiler
processes by rank, then stored pid); each is named after its run.  Clocks: profiler
events and counters keep the profiler's microseconds; wall-clock sources start at 0 at
their run's start, so runs lie side by side from 0.  The file is written as it goes
(bounded memory), to a temporary file renamed into place once whole; ``.gz`` gzips it.
A trace whose profiler rows all come from one rank names it in ``distributedInfo``, as
Kineto does, so kvtrace's own Kineto reader reads the file back with that rank.
"""

from __future__ import annotations

import gzip
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import duckdb

from kvtrace._version import __version__
from kvtrace.errors import InputError
from kvtrace.export import _profiler as profiler
from kvtrace.export import _tracks as tracks
from kvtrace.export._run import RunExport, all_query_rows
from kvtrace.export.sources import SOURCE_NAMES, SOURCES
from kvtrace.export.trace_json import TraceWriter
from kvtrace.warehouse import Warehouse

CLOCKS = (
    "profiler events and counters: the profiler's clock, microseconds as recorded; "
    "DSA steps, pool snapshots, engine metrics, serving counters, KV events and requests: "
    "microseconds from their run's start"
)


@dataclass(frozen=True)
class PerfettoSpec:
    """An export: the runs (ids or names, in the order their processes come), the file,
    the sources to take (all by default), the DSA block size (None: each run's smallest
    stored one with step times) and the KV residency bucket in seconds."""

    runs: tuple[str, ...]
    output: Path
    sources: tuple[str, ...] = SOURCE_NAMES
    dsa_block_size: int | None = None
    kv_bucket_s: float = 1.0


@dataclass
class ExportReport:
    """What an export wrote: events per source, the runs (id, name) and notes on rows
    left out."""

    output: Path
    events: int = 0
    by_source: Counter[str] = field(default_factory=Counter)
    runs: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _RunPlan:
    run_id: str
    run_name: str
    rows: dict[str, int]  # rows with a time per source
    dsa_block_size: int | None  # the stored block size drawn (None: no DSA steps)
    ranks: frozenset[Any]


def export_perfetto(
    warehouse: Warehouse, spec: PerfettoSpec, progress: Callable[[int], None] | None = None
) -> ExportReport:
    """Write the trace ``spec`` asks for; ``progress`` hears the events written so far.

    Raises `InputError` for a run that does not exist or has nothing to export (before
    anything is written); a failure leaves no file at ``spec.output``.
    """
    from kvtrace.analysis import open_analysis_connection

    unknown = [name for name in spec.sources if name not in SOURCE_NAMES]
    if unknown:
        raise InputError(f"expected sources among {', '.join(SOURCE_NAMES)}, got {unknown[0]!r}")
    if not spec.kv_bucket_s > 0:
        raise InputError(f"the KV residency bucket must be positive, got {spec.kv_bucket_s}")
    con = open_analysis_connection(warehouse)
    try:
        con.execute("SET VARIABLE kvtrace_export_bucket_s = ?", [spec.kv_bucket_s])
        plans = [_plan(con, run_id, spec) for run_id in _run_ids(con, spec.runs)]
        report = ExportReport(spec.output, runs=[(p.run_id, p.run_name) for p in plans])
        with _trace_file(spec.output) as sink:
            writer = TraceWriter(sink, _header(plans), progress)
            for plan in plans:
                _write_run(con, plan, writer, report)
            writer.close(_trailer(plans, warehouse))
        report.events = writer.events
        return report
    finally:
        con.close()


def _run_ids(con: duckdb.DuckDBPyConnection, selectors: tuple[str, ...]) -> list[str]:
    from kvtrace.sql.runs import run_ids

    if not selectors:
        raise InputError("name at least one run to export (--run RUN)")
    return run_ids(con, selectors)


def _plan(con: duckdb.DuckDBPyConnection, run_id: str, spec: PerfettoSpec) -> _RunPlan:
    """What the run has of each source asked for; one sentence when it has nothing."""
    ((name,),) = con.execute(
        "SELECT coalesce(any_value(run_name), $run) FROM runs WHERE run_id = $run",
        {"run": run_id},
    ).fetchall()
    relation = con.sql(_query("source_rows"), params={"run": run_id})
    counts = dict(zip(relation.columns, relation.fetchall()[0], strict=True))
    rows = {source: int(counts[source]) for source in spec.sources}
    block_size = None
    if "dsa" in rows:
        block_size, rows["dsa"] = _dsa_block_size(con, run_id, name, spec.dsa_block_size)
    if not any(rows.values()):
        asked = ", ".join(s.reads for s in SOURCES if s.name in spec.sources)
        raise InputError(f"run {name!r} has nothing to export: no rows with a time in {asked}")
    profiled = rows.get("profiler") or rows.get("counters")
    ranks = frozenset(
        rank for rank, _ in (all_query_rows(con, "profiler_processes", run_id) if profiled else [])
    )
    return _RunPlan(run_id, name, rows, block_size, ranks)


def _dsa_block_size(
    con: duckdb.DuckDBPyConnection, run_id: str, name: str, asked: int | None
) -> tuple[int | None, int]:
    """The stored block size whose DSA steps the run's export draws (``asked``, else
    the smallest with step times, else the smallest) and how many of its rows have a
    step time; (None, 0) for a run without DSA steps."""
    stored = {size: timed for size, timed, _ in all_query_rows(con, "dsa_block_sizes", run_id)}
    if not stored:
        return None, 0
    if asked is None:
        asked = min((size for size, timed in stored.items() if timed), default=min(stored))
    elif asked not in stored:
        sizes = ", ".join(str(size) for size in sorted(stored))
        raise InputError(f"run {name!r} stores DSA steps at block size {sizes}, not {asked}")
    return asked, stored[asked]


# source -> its writer: the run's events of it, returning how many
_WRITERS: dict[str, Callable[[RunExport], int]] = {
    "profiler": profiler.write_events,
    "counters": profiler.write_counters,
    "dsa": tracks.write_dsa,
    "pool": tracks.write_pool,
    "engine": tracks.write_engine,
    "serving": tracks.write_serving,
    "kv": tracks.write_kv_residency,
    "requests": tracks.write_requests,
}


def _write_run(
    con: duckdb.DuckDBPyConnection, plan: _RunPlan, writer: TraceWriter, report: ExportReport
) -> None:
    """The run's sources, in `SOURCES` order, and notes of what could not be drawn."""
    run = RunExport(con, plan.run_id, plan.run_name, writer, plan.dsa_block_size)
    if plan.rows.get("profiler") or plan.rows.get("counters"):
        profiler.register_processes(run)
    for source in SOURCES:
        if plan.rows.get(source.name):
            report.by_source[source.name] += _WRITERS[source.name](run)
    report.notes += _untimed(con, plan)


def _untimed(con: duckdb.DuckDBPyConnection, plan: _RunPlan) -> list[str]:
    """Notes of the rows the run has but that have no time to be drawn at."""
    notes = []
    if "dsa" in plan.rows:
        untimed = sum(
            later
            for size, _, later in all_query_rows(con, "dsa_block_sizes", plan.run_id)
            if size == plan.dsa_block_size
        )
        if untimed:
            notes.append(
                f"run {plan.run_name!r}: {untimed:,} DSA step rows have no step time (ts_us) "
                "and are left out"
            )
    if "requests" in plan.rows:
        ((untimed,),) = all_query_rows(con, "untimed_requests", plan.run_id)
        if untimed:
            notes.append(
                f"run {plan.run_name!r}: {untimed:,} requests have no arrival time and are left out"
            )
    return notes


def _header(plans: list[_RunPlan]) -> dict[str, Any]:
    """``distributedInfo`` with the rank when every profiler row has the same one."""
    ranks = {rank for plan in plans for rank in plan.ranks}
    if len(ranks) == 1 and None not in ranks:
        return {"distributedInfo": {"rank": next(iter(ranks))}}
    return {}


def _trailer(plans: list[_RunPlan], warehouse: Warehouse) -> dict[str, Any]:
    return {
        "otherData": {
            "exporter": f"kvtrace {__version__}",
            "warehouse_version": warehouse.version,
            "runs": {plan.run_id: plan.run_name for plan in plans},
            "clocks": CLOCKS,
        }
    }


def _query(name: str) -> str:
    from kvtrace.sql.named_queries import named_queries

    return named_queries("kvtrace.export", "perfetto")[name]


@contextmanager
def _trace_file(output: Path) -> Iterator[BinaryIO]:
    """A file that appears at ``output`` only once whole; gzip for a ``.gz`` name."""
    from kvtrace.sql.query import atomic_output

    if not output.name:  # "", "." or "/"
        raise InputError("--output names no file; give one such as trace.json")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        file = next((p for p in reversed(output.parents) if p.is_file()), output.parent)
        raise InputError(f"cannot write {output}: {file} is a file, not a folder") from None
    with atomic_output(output) as sink:
        if output.name.endswith(".gz"):
            with gzip.GzipFile(
                filename="", mode="wb", fileobj=sink, compresslevel=6, mtime=0
            ) as gz:
                yield gz  # type: ignore[misc]
        else:
            yield sink
