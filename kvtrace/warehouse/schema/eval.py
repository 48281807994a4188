"""Evaluation outputs: one row per scored sample, where each prompt hid its needle, and
how far a chunked attention's merged output strays from a reference."""

from __future__ import annotations

import pyarrow as pa

from kvtrace.warehouse.schema.core import TableSpec

__all__ = ["EVAL_SAMPLES", "MERGE_NUMERICS", "NEEDLE_SPANS"]

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

MERGE_NUMERICS = TableSpec(
    "merge_numerics",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("layer_id", pa.int16()),  # NULL: a kernel test outside a model
            ("chunks", pa.int32()),  # key/value chunks merged into the output
            ("merge_step", pa.int32()),  # merges done when measured; NULL: all (chunks - 1)
            ("method", pa.string()),  # the merge's name, e.g. pairwise, nway
            ("dtype", pa.string()),
            ("lse_max_diff", pa.float64()),  # |LSE - reference LSE|, max
            ("lse_mean_diff", pa.float64()),  # |LSE - reference LSE|, mean
            ("out_max_diff", pa.float64()),  # |output - reference output|, max
            ("out_mean_diff", pa.float64()),  # |output - reference output|, mean
        ]
    ),
    partition_by=("run_id",),
    sort_by=("layer_id", "chunks", "merge_step"),
    record_key=("layer_id", "chunks", "merge_step", "method"),
    record_key_nullable=("layer_id", "merge_step", "method"),
)
