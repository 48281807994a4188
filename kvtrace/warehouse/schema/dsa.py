"""DSA top-k selection traces: one row per (request, decode step, layer), plus histograms.

The histograms are exact counts written at ingest, per (run, dataset, stored block size):
``dsa_offset_hist`` of the offset of every selected position and ``dsa_fill_hist`` of the
selected positions inside every touched block.  They let run-wide distributions be read
without decoding a single position list.
"""

from __future__ import annotations

import pyarrow as pa

from kvtrace.warehouse.schema.core import TableSpec

__all__ = ["DSA_FILL_HIST", "DSA_OFFSET_HIST", "DSA_REQUEST_TOKENS", "DSA_STEPS", "TIERS"]

TIERS = ("hbm", "local_pool", "remote_pool")

_TIER_COLUMNS = [
    field
    for tier in TIERS
    for field in (
        (f"{tier}_blocks", pa.int32()),
        (f"{tier}_bytes_read", pa.int64()),
        (f"{tier}_read_ops", pa.int32()),
        (f"{tier}_latency_us", pa.float64()),
        (f"{tier}_hit_blocks", pa.list_(pa.int32())),
    )
]

DSA_STEPS = TableSpec(
    "dsa_steps",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("dataset", pa.string()),
            ("block_size", pa.int32()),
            ("request_id", pa.int64()),
            ("step_idx", pa.int32()),
            ("layer_id", pa.int16()),
            ("kv_group", pa.int16()),  # a KV group's own selection (GQA); NULL: all heads
            ("seq_len", pa.int32()),
            ("batch_step", pa.int64()),
            ("ts_us", pa.float64()),
            ("topk", pa.int32()),
            ("selected_pos", pa.list_(pa.int32())),
            ("scores", pa.list_(pa.float32())),
            ("score_min", pa.float32()),
            ("score_mean", pa.float32()),
            ("score_max", pa.float32()),
            ("step_latency_us", pa.float64()),
            *_TIER_COLUMNS,
            ("unique_blocks", pa.int32()),
            ("offset_min", pa.int32()),
            ("offset_p50", pa.float32()),
            ("offset_max", pa.int32()),
            ("tokens_per_block_mean", pa.float32()),
            ("tokens_per_block_p50", pa.float32()),
            ("tokens_per_block_p95", pa.float32()),
            ("prefix_blocks", pa.list_(pa.int32())),
            ("touched_blocks", pa.list_(pa.int32())),
        ]
    ),
    partition_by=("dataset", "block_size"),
    sort_by=("run_id", "request_id", "step_idx", "layer_id"),
)

DSA_REQUEST_TOKENS = TableSpec(
    "dsa_request_tokens",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("request_id", pa.int64()),
            ("prompt_tokens", pa.int32()),
            ("token_ids", pa.list_(pa.int32())),
            ("prefix_key", pa.string()),
        ]
    ),
    partition_by=("run_id",),
    sort_by=("request_id",),
    record_key=("request_id",),
)

DSA_OFFSET_HIST = TableSpec(
    "dsa_offset_hist",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("dataset", pa.string()),
            ("block_size", pa.int32()),
            ("offset", pa.int32()),
            ("n", pa.int64()),
        ]
    ),
    partition_by=("dataset", "block_size"),
    sort_by=("run_id", "offset"),
)

DSA_FILL_HIST = TableSpec(
    "dsa_fill_hist",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("dataset", pa.string()),
            ("block_size", pa.int32()),
            ("tokens", pa.int32()),
            ("n", pa.int64()),
        ]
    ),
    partition_by=("dataset", "block_size"),
    sort_by=("run_id", "tokens"),
)
