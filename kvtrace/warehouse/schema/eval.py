"""Evaluation outputs: one row per scored sample, and where each prompt hid its needle."""

from __future__ import annotations

import pyarrow as pa

from kvtrace.warehouse.schema.core import TableSpec

__all__ = ["EVAL_SAMPLES", "NEEDLE_SPANS"]

EVAL_SAMPLES = TableSpec(
    "eval_samples",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("task", pa.string()),
            ("sample_index", pa.int64()),
            ("request_id", pa.int64()),  # the traced request, for collected runs
            ("context_length", pa.int64()),
            ("prediction", pa.string()),
            ("answers", pa.list_(pa.string())),  # the references
            ("metric", pa.string()),
            ("score", pa.float64()),
            ("null_prediction", pa.bool_()),
            ("error_class", pa.string()),
        ]
    ),
    partition_by=("run_id",),
    sort_by=("task", "sample_index"),
    record_key=("task", "sample_index"),
)

NEEDLE_SPANS = TableSpec(
    "needle_spans",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("request_id", pa.int64()),
            ("part", pa.string()),  # value or key
            ("text", pa.string()),
            ("token_start", pa.int64()),
            ("token_end", pa.int64()),  # exclusive
        ]
    ),
    partition_by=("run_id",),
    sort_by=("request_id", "token_start"),
)
