"""Tables every trace family shares: runs, requests, the quarantine and ingest checks."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

__all__ = ["INGEST_CHECKS", "QUARANTINE", "REQUESTS", "RUNS", "TableSpec"]


@dataclass(frozen=True)
class TableSpec:
    """A warehouse table: its Arrow schema, the columns that name its directories, its
    order, and what identifies one record of a run.

    ``record_key`` names the columns that tell two records of one run apart: ingest
    stores a record whose key the run already holds no second time (a file that grew,
    repeated lines, other bytes of the same records).  A record with a NULL in its key
    is told apart by all of its columns, except in the ``record_key_nullable`` columns,
    where NULL is a value of its own (a trace that names no rank).  None: rows are not
    records of a source (bookkeeping tables), or their writer keeps its own keys
    (``dsa_steps``).
    """

    name: str
    schema: pa.Schema
    partition_by: tuple[str, ...] = ()
    sort_by: tuple[str, ...] = ()
    partition_dirs: tuple[str, ...] = ()  # folder names of partition_by, when they differ
    record_key: tuple[str, ...] | None = None
    record_key_nullable: tuple[str, ...] = ()

    def partition_dir(self, column: str) -> str:
        names = self.partition_dirs or self.partition_by
        return names[self.partition_by.index(column)]


RUNS = TableSpec(
    "runs",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("run_name", pa.string()),
            ("kind", pa.string()),
            ("dataset", pa.string()),
            ("dataset_variant", pa.string()),
            ("model", pa.string()),
            ("model_config", pa.string()),
            ("collector_config", pa.string()),
            ("rank", pa.int32()),
            ("world_size", pa.int32()),
            ("source", pa.string()),
            ("host", pa.string()),
            ("started_at", pa.timestamp("us", tz="UTC")),
            ("kvtrace_version", pa.string()),
        ]
    ),
    partition_by=("run_id",),
)

REQUESTS = TableSpec(
    "requests",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("dataset", pa.string()),
            ("request_id", pa.int64()),
            ("request_key", pa.string()),
            ("prompt_tokens", pa.int64()),
            ("new_tokens", pa.int64()),
            ("prefix_key", pa.string()),
            ("prefix_cache_hit", pa.bool_()),
            ("prefix_cached_tokens", pa.int64()),
            ("prefix_region_tokens", pa.int64()),
            ("arrival_s", pa.float64()),
            ("finish_s", pa.float64()),
            ("latency_ms", pa.float64()),
            ("status", pa.string()),
            ("skip_reason", pa.string()),
        ]
    ),
    partition_by=("dataset",),
    sort_by=("run_id", "request_id"),
)

QUARANTINE = TableSpec(
    "quarantine",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("source_path", pa.string()),
            ("source_sha256", pa.string()),
            ("line_no", pa.int64()),
            ("reason", pa.string()),
            ("raw", pa.string()),
        ]
    ),
)

INGEST_CHECKS = TableSpec(
    "ingest_checks",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("source_path", pa.string()),
            ("statistic", pa.string()),
            ("rows_checked", pa.int64()),
            ("rows_disagreeing", pa.int64()),
            ("first_line", pa.int64()),
            ("source_value", pa.float64()),
            ("recomputed_value", pa.float64()),
        ]
    ),
)
