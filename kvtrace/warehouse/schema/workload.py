"""Workload traces: one row per request of an arrival trace."""

from __future__ import annotations

import pyarrow as pa

from kvtrace.warehouse.schema.core import TableSpec

WORKLOAD_REQUESTS = TableSpec(
    "workload_requests",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("request_idx", pa.int64()),  # the request's place in the trace, from 0
            ("arrival_s", pa.float64()),  # seconds since the trace's first arrival
            ("input_tokens", pa.int64()),
            ("output_tokens", pa.int64()),
            ("hash_ids", pa.list_(pa.int64())),  # prefix-block hashes, NULL when absent
            ("hash_block_tokens", pa.int32()),  # tokens per hashed block
            ("model", pa.string()),
            ("log_type", pa.string()),
            ("session_id", pa.string()),  # the conversation or session, when recorded
        ]
    ),
    partition_by=("run_id",),
    sort_by=("request_idx",),
    record_key=("request_idx",),
)

REQUEST_TIMINGS = TableSpec(
    "request_timings",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("request_idx", pa.int64()),
            ("origin", pa.string()),  # measured (a benchmark) or simulated (a simulator)
            ("arrival_s", pa.float64()),
            ("input_tokens", pa.int64()),
            ("output_tokens", pa.int64()),
            ("ttft_s", pa.float64()),
            ("itl_s", pa.list_(pa.float64())),  # inter-token latencies, when recorded
            ("tpot_s", pa.float64()),  # mean time per output token after the first
            ("e2e_s", pa.float64()),
            ("scheduling_delay_s", pa.float64()),
            ("preemptions", pa.int64()),
            ("error", pa.string()),
        ]
    ),
    partition_by=("run_id",),
    sort_by=("request_idx",),
    record_key=("request_idx",),
)

BATCH_METRICS = TableSpec(
    "batch_metrics",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("batch_idx", pa.int64()),
            ("batch_size", pa.int64()),
            ("prefill_tokens", pa.int64()),
            ("decode_tokens", pa.int64()),
            ("execution_time_s", pa.float64()),
        ]
    ),
    partition_by=("run_id",),
    sort_by=("batch_idx",),
    record_key=("batch_idx",),
)
