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
        ]
    ),
    partition_by=("run_id",),
    sort_by=("request_idx",),
)
