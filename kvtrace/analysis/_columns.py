"""The rows the what-if's SQL functions return (kept apart from the simulation code, so a
connection can declare the functions without loading the compiled kernels)."""

from __future__ import annotations

import pyarrow as pa

# What names a simulated stream and its policy: the leading columns of the hit curve and
# of every what-if table.
SIMULATION_KEYS = [
    ("run_id", pa.string()),
    ("block_size", pa.int32()),
    ("policy", pa.string()),
    ("granularity", pa.string()),
    ("scope", pa.string()),
    ("sharing", pa.string()),
]
HIT_CURVE = pa.struct(
    [
        *SIMULATION_KEYS,
        ("capacity_blocks", pa.int64()),
        ("accesses", pa.int64()),
        ("hits", pa.int64()),
        ("shared_hits", pa.int64()),
        ("hit_rate", pa.float64()),
        ("missed_blocks", pa.int64()),
    ]
)
REUSE = pa.struct(
    [
        ("run_id", pa.string()),
        ("block_size", pa.int32()),
        ("granularity", pa.string()),
        ("scope", pa.string()),
        ("sharing", pa.string()),
        ("distance", pa.int64()),
        ("accesses", pa.int64()),
        ("shared_accesses", pa.int64()),
    ]
)
PREFIX_HIT_CURVE = pa.struct(
    [
        ("run_id", pa.string()),
        ("policy", pa.string()),
        ("capacity_blocks", pa.int64()),
        ("accesses", pa.int64()),
        ("hits", pa.int64()),
        ("hit_rate", pa.float64()),
        ("semantics", pa.string()),
        ("weight", pa.string()),
        ("warmup", pa.float64()),
        ("capacity_bytes", pa.int64()),
        ("requests", pa.int64()),
        ("hit_tokens", pa.int64()),
        ("tokens", pa.int64()),
    ]
)
PREFIX_REQUESTS = pa.struct(
    [
        ("run_id", pa.string()),
        ("policy", pa.string()),
        ("semantics", pa.string()),
        ("capacity_blocks", pa.int64()),
        ("request_idx", pa.int64()),
        ("counted", pa.bool_()),
        ("tokens", pa.int64()),
        ("blocks", pa.int64()),
        ("hit_blocks", pa.int64()),
        ("hit_tokens", pa.int64()),
        ("ttft_saved_ms", pa.float64()),
        ("prefill_source", pa.string()),
    ]
)
KV_CACHE_FIDELITY = pa.struct(
    [
        ("run_id", pa.string()),
        ("worker", pa.string()),
        ("t_s", pa.float64()),
        ("capacity_blocks", pa.int64()),
        ("observed_stored", pa.int64()),
        ("simulated_stored", pa.int64()),
        ("observed_removed", pa.int64()),
        ("simulated_evicted", pa.int64()),
        ("observed_restores", pa.int64()),
        ("simulated_restores", pa.int64()),
        ("observed_resident", pa.int64()),
        ("simulated_resident", pa.int64()),
    ]
)
COST_MODEL = pa.struct(
    [
        ("run_id", pa.string()),
        ("source", pa.string()),
        ("observations", pa.int64()),
        ("intercept_s", pa.float64()),
        ("per_prefill_token_s", pa.float64()),
        ("per_decode_token_s", pa.float64()),
        ("per_kv_token_s", pa.float64()),
        ("r2", pa.float64()),
        ("residual_p50_s", pa.float64()),
        ("residual_p90_s", pa.float64()),
        ("residual_p99_s", pa.float64()),
        ("per_prefill_sq_token_s", pa.float64()),
        ("loo_rmse_s", pa.float64()),
        ("loo_mape", pa.float64()),
    ]
)
KERNEL_SEQUENCES = pa.struct(
    [
        ("run_id", pa.string()),
        ("rank", pa.int64()),
        ("place", pa.int64()),
        ("pattern", pa.string()),
        ("kernels", pa.int64()),
        ("count", pa.int64()),
        ("gpu_kernel_us", pa.float64()),
        ("cpu_op_us", pa.float64()),
    ]
)
CRITICAL_PATH = pa.struct(
    [
        ("run_id", pa.string()),
        ("rank", pa.int64()),
        ("step", pa.int64()),
        ("edge_type", pa.string()),
        ("event_idx", pa.int64()),
        ("name", pa.string()),
        ("category", pa.string()),
        ("stream", pa.int64()),
        ("bound_by", pa.string()),
        ("duration_us", pa.float64()),
    ]
)
ROUTING = pa.struct(
    [
        ("run_id", pa.string()),
        ("policy", pa.string()),
        ("cache", pa.string()),
        ("worker", pa.int64()),
        ("workers", pa.int64()),
        ("capacity_blocks", pa.int64()),
        ("requests", pa.int64()),
        ("blocks", pa.int64()),
        ("hit_blocks", pa.int64()),
        ("tokens", pa.int64()),
        ("prefill_tokens_saved", pa.int64()),
        ("hit_rate", pa.float64()),
        ("mean_load", pa.float64()),
        ("peak_load", pa.int64()),
        ("request_share", pa.float64()),
        ("imbalance", pa.float64()),
    ]
)
ROUTING_REQUESTS = pa.struct(
    [
        ("run_id", pa.string()),
        ("policy", pa.string()),
        ("cache", pa.string()),
        ("request_idx", pa.int64()),
        ("worker", pa.int64()),
        ("load", pa.int64()),
        ("blocks", pa.int64()),
        ("hit_blocks", pa.int64()),
        ("tokens", pa.int64()),
        ("hit_tokens", pa.int64()),
    ]
)
SERVING_CAPACITY = pa.struct(
    [
        ("run_id", pa.string()),
        ("cost_run_id", pa.string()),
        ("point", pa.string()),
        ("load_level", pa.int64()),
        ("request_rate", pa.float64()),
        ("requests", pa.int64()),
        ("percentile", pa.float64()),
        ("ttft_slo_ms", pa.float64()),
        ("tpot_slo_ms", pa.float64()),
        ("meets_slo", pa.bool_()),
        ("predicted_ttft_ms", pa.float64()),
        ("predicted_tpot_ms", pa.float64()),
        ("measured_ttft_ms", pa.float64()),
        ("measured_tpot_ms", pa.float64()),
        ("peak_kv_tokens", pa.int64()),
        ("peak_kv_gib", pa.float64()),
        ("kv_bytes_per_token", pa.float64()),
        ("kv_capacity_tokens", pa.int64()),
        ("memory_limited", pa.bool_()),
    ]
)
KV_ROUTING_SCORE = pa.struct(
    [
        ("run_id", pa.string()),
        ("request_idx", pa.int64()),
        ("t_s", pa.float64()),
        ("worker", pa.string()),
        ("blocks", pa.int64()),
        ("hit_blocks", pa.int64()),
        ("best_worker", pa.string()),
        ("best_hit_blocks", pa.int64()),
        ("agrees", pa.bool_()),
        ("workers_seen", pa.int64()),
    ]
)
