"""DSA top-k selections of prefill: one row per (request, query chunk, layer).

Kept apart from ``dsa_steps`` (decode only, as the seed defines it), so that every
decode view reads what it read before.  A chunk's row holds the union of the positions
its query tokens selected and how many of them selected each one.
"""

from __future__ import annotations

import pyarrow as pa

from kvtrace.warehouse.schema.core import TableSpec

__all__ = ["DSA_PREFILL"]

DSA_PREFILL = TableSpec(
    "dsa_prefill",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("dataset", pa.string()),
            ("request_id", pa.int64()),
            ("layer_id", pa.int16()),
            ("query_start", pa.int32()),
            ("query_end", pa.int32()),
            ("batch_step", pa.int64()),
            ("ts_us", pa.float64()),
            ("topk", pa.int32()),
            ("selected_pos", pa.list_(pa.int32())),
            ("select_count", pa.list_(pa.int32())),
            ("step_latency_us", pa.float64()),
        ]
    ),
    partition_by=("dataset",),
    sort_by=("run_id", "request_id", "query_start", "layer_id"),
)
