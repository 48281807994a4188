"""Operator profiles: the time of one operator at one size, as a profiler measured it.

Vidur's profiles (``mlp.csv``, ``attention.csv``, ``all_reduce.csv``, ``send_recv.csv``,
``cpu_overheads.csv``) are wide: one CSV row per size, one group of time columns per
operator.  The table is long over operators and wide over size parameters: one row per
(source file row, operator), with the model shape and size parameters that row states
in typed columns (NULL where that kind of profile has none), and the time statistics
the profiler gave, in milliseconds.
"""

from __future__ import annotations

import pyarrow as pa

from kvtrace.warehouse.schema.core import TableSpec

__all__ = ["OPERATOR_PROFILES"]

OPERATOR_PROFILES = TableSpec(
    "operator_profiles",
    pa.schema(
        [
            ("run_id", pa.string()),
            # mlp, attention, collectives or cpu_overheads: the kind of profile file
            ("source", pa.string()),
            # the GPU (compute/<gpu>/...) or the node's network (network/<system>/...)
            # the file's folders name; NULL when its path names neither
            ("device", pa.string()),
            # the model (compute/<gpu>/<org>/<model>/..., or cpu_overheads' model_name);
            # NULL for collectives, which are model-independent
            ("model", pa.string()),
            ("row_idx", pa.int64()),  # the data row in the file, from 0
            # the operator as the profiler names it: mlp_up_proj, attn_prefill,
            # all_reduce, schedule, ...
            ("operator", pa.string()),
            # the model's shape as the row states it (mlp, attention)
            ("n_embd", pa.int64()),
            ("n_head", pa.int64()),  # query heads (mlp: n_head; attention: n_q_head)
            ("n_kv_head", pa.int64()),
            ("n_expanded_embd", pa.int64()),  # the MLP's hidden size (mlp)
            ("vocab_size", pa.int64()),  # (mlp)
            ("use_gated_mlp", pa.bool_()),  # (mlp)
            # tensor-parallel degree: num_tensor_parallel_workers, tensor_parallel_degree
            ("tensor_parallel", pa.int32()),
            # the size parameters the time depends on
            ("num_tokens", pa.int64()),  # tokens of the iteration (mlp)
            ("batch_size", pa.int64()),  # sequences (attention, cpu_overheads)
            ("prefill_chunk_size", pa.int64()),  # new tokens of a prefill (attention)
            ("kv_cache_size", pa.int64()),  # tokens already in the KV cache (attention)
            ("is_prefill", pa.bool_()),  # (attention)
            ("block_size", pa.int64()),  # paged-attention block, tokens (attention)
            ("max_model_len", pa.int64()),  # (attention)
            ("backend", pa.string()),  # attention_backend as written (attention)
            ("size_bytes", pa.int64()),  # bytes each rank contributes (collectives)
            ("num_workers", pa.int32()),  # ranks of the collective (collectives)
            ("devices_per_node", pa.int32()),  # (collectives)
            ("max_devices_per_node", pa.int32()),  # (collectives)
            ("rank", pa.int32()),  # the rank that recorded the time (collectives)
            # the time statistics as the file gives them, in milliseconds; NULL where the
            # file has none (cpu_overheads: mean and median only)
            ("time_min_ms", pa.float64()),
            ("time_max_ms", pa.float64()),
            ("time_mean_ms", pa.float64()),
            ("time_median_ms", pa.float64()),
            ("time_std_ms", pa.float64()),
        ]
    ),
    partition_by=("run_id",),
    partition_dirs=("run",),
    sort_by=("source", "device", "model", "row_idx", "operator"),
    record_key=("source", "device", "model", "row_idx", "operator"),
    record_key_nullable=("device", "model"),
)
