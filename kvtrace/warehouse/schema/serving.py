"""Serving traces: KV pool snapshots per (worker, poll tick) and per-request metrics."""

from __future__ import annotations

import pyarrow as pa

from kvtrace.warehouse.schema.core import TableSpec

__all__ = ["POOL_BREAKDOWN", "POOL_COUNTERS", "POOL_SNAPSHOTS", "REQUEST_METRICS", "RUN_SUMMARIES"]

# Pool fields every snapshot may carry, and the finer breakdown only newer servers report.
POOL_COUNTERS = (
    "capacity_tokens",
    "held_tokens",
    "available_tokens",
    "idle_evictable_tokens",
    "session_count",
    "resident_session_count",
)
POOL_BREAKDOWN = (
    "radix_protected_tokens",
    "running_batch_tokens",
    "inflight_transfer_tokens",
    "prealloc_tokens",
    "retracted_tokens",
    "running_batch_size",
    "prefill_backup_tokens",
)

POOL_SNAPSHOTS = TableSpec(
    "pool_snapshots",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("experiment", pa.string()),
            ("worker_id", pa.string()),
            ("worker_role", pa.string()),
            ("t_s", pa.float64()),
            ("ts", pa.timestamp("us", tz="UTC")),
            *[(name, pa.int64()) for name in POOL_COUNTERS],
            ("kvcache_mem_gb", pa.float64()),
            ("last_gen_throughput", pa.float64()),
            *[(name, pa.int64()) for name in POOL_BREAKDOWN],
            ("sessions", pa.string()),
            ("poll_latency_ms", pa.float64()),
            ("poll_error", pa.string()),
        ]
    ),
    partition_by=("run_id",),
    partition_dirs=("run",),
    sort_by=("worker_id", "t_s"),
    record_key=("worker_id", "t_s"),
)

REQUEST_METRICS = TableSpec(
    "request_metrics",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("experiment", pa.string()),
            ("request_id", pa.string()),
            ("session_id", pa.string()),
            ("turn_id", pa.int64()),
            ("prefill_worker", pa.string()),
            ("decode_worker", pa.string()),
            ("execution_mode", pa.string()),
            ("status", pa.string()),
            ("error_type", pa.string()),
            ("error_message", pa.string()),
            ("kv_transfer_blocks", pa.int64()),
            ("session_reused", pa.bool_()),
            ("cached_tokens", pa.int64()),
            ("input_tokens", pa.int64()),
            ("output_tokens", pa.int64()),
            ("arrival_s", pa.float64()),
            ("ttft_s", pa.float64()),
            ("latency_s", pa.float64()),
            ("truncated", pa.bool_()),
        ]
    ),
    partition_by=("run_id",),
    partition_dirs=("run",),
    sort_by=("arrival_s",),
    record_key=("request_id",),
)

RUN_SUMMARIES = TableSpec(
    "run_summaries",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("experiment", pa.string()),
            ("source_path", pa.string()),
            ("summary", pa.string()),
        ]
    ),
    record_key=("summary",),
)
