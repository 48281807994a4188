"""``kvtrace ingest``: load existing trace dumps into the warehouse.

Each source file is one commit: it becomes visible whole or not at all, and the same
records ingested again into the same run add nothing.  The families of traces kvtrace
reads are listed in `kvtrace.ingest.families`; each is one module following the
protocol of `kvtrace.ingest.family`, and `kvtrace.ingest._commit` commits for them all.
"""

from __future__ import annotations

from concurrent.futures import Executor

from kvtrace.defaults import DEFAULT_BLOCK_SIZE, Kind
from kvtrace.ingest._report import FileReport, IngestReport
from kvtrace.ingest._sources import Found, SourceFile, Unreadable, expand
from kvtrace.ingest.family import ColumnMapping, IngestOptions
from kvtrace.ingest.fanout import Progress, ingest_paths
from kvtrace.warehouse import Warehouse


def ingest(
    warehouse: Warehouse,
    paths: list[str],
    *,
    dataset: str | None = None,
    run_name: str | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    prefix_key_tokens: int | None = None,
    kind: Kind | None = None,
    experiment: str | None = None,
    columns: ColumnMapping | None = None,
    trace_format: str | None = None,
    progress: Progress | None = None,
    jobs: int = 1,
    executor: Executor | None = None,
) -> IngestReport:
    """Ingest every trace file named by ``paths`` (files, folders or glob patterns).

    Parameters
    ----------
    dataset, run_name
        Override what the records or their folder say.
    block_size
        Block size for DSA records that do not state theirs.
    prefix_key_tokens
        Prompt tokens a DSA dump's prefix key covers (the seed tracer's
        ``--trace-prefix-key-tokens``); by default what the run's ``summary.json`` says,
        else 256.
    kind
        Read every file as the family of this name (one of
        `kvtrace.ingest.families.kind_names`, or an installed family's); by default each
        file's content tells.
    experiment
        Label of serving runs (pool series, request metrics), e.g. ``exp2_2p6d``.
    columns
        For CSV arrival traces of a layout kvtrace does not know: which columns hold
        the arrival, the lengths (and model, log type); see `parse_column_mapping`.
    trace_format
        Read Mooncake-shaped arrival traces as this format, which their content cannot
        tell: ``mooncake-delta`` (each turn holds only the prompt it adds).
    progress
        Called with (bytes done, bytes in all) as the files are read.
    jobs
        Files read at once, each in its own process (one commit per file either way).
    executor
        Where to read the files instead, one task per file (e.g. a Ray cluster's, from
        `kvtrace.distributed`); its workers must reach the warehouse.
    """
    options = IngestOptions(
        dataset=dataset,
        run_name=run_name,
        block_size=block_size,
        prefix_key_tokens=prefix_key_tokens,
        kind=kind,
        experiment=experiment,
        columns=columns,
        trace_format=trace_format,
    )
    return ingest_with(warehouse, paths, options, progress=progress, jobs=jobs, executor=executor)


def ingest_with(
    warehouse: Warehouse,
    paths: list[str] | Found,
    options: IngestOptions,
    *,
    progress: Progress | None = None,
    jobs: int = 1,
    executor: Executor | None = None,
) -> IngestReport:
    """`ingest` with what applies to every file gathered in ``options`` (as the command
    line builds them)."""
    report = ingest_paths(
        warehouse, paths, options, progress=progress, jobs=jobs, executor=executor
    )
    warehouse.stored_snapshot()  # kept for the queries that follow (they read it at once)
    return report


__all__ = [
    "FileReport",
    "IngestOptions",
    "IngestReport",
    "SourceFile",
    "Unreadable",
    "expand",
    "ingest",
    "ingest_with",
]
