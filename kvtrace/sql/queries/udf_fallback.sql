-- SQL versions of kvtrace's vectorised functions, for a plain duckdb shell.
--
-- kvtrace's Python connections register NumPy implementations of these names
-- (kvtrace/sql/functions.py); a shell started with 'duckdb -init' from 'kvtrace shell-init' gets
-- these macros instead.  Same results, computed one list element at a time.  The analysis
-- functions (kvtrace_hit_curve and its kin) cannot run there: their stand-ins, generated from
-- kvtrace/analysis/function_specs.py ('python -m kvtrace.analysis.function_specs' writes them
-- again), raise an error of the same row type.

-- @macro kvtrace_block_stats(pos, seq_len, bs)
-- Block statistics of one ascending position list at block size bs (see dsa_blocks).
CREATE MACRO kvtrace_block_stats(pos, seq_len, bs) AS (
    SELECT {
        'unique_blocks': blocks::INTEGER,
        'total_blocks_in_use': ceil(seq_len / bs)::INTEGER,
        'touched_block_ratio': blocks / ceil(seq_len / bs),
        'tokens_per_block_mean': mean_tokens,
        'tokens_per_block_p50': p50_tokens,
        'tokens_per_block_p95': p95_tokens
    }
    FROM (
        SELECT count(*) AS blocks, avg(n) AS mean_tokens,
               quantile_cont(n, 0.5) AS p50_tokens, quantile_cont(n, 0.95) AS p95_tokens
        FROM (SELECT p // bs AS b, count(*) AS n FROM (SELECT unnest(pos) AS p) GROUP BY b)
    )
);

-- @macro kvtrace_offset_stats(pos, seq_len)
-- Offset statistics of one position list (see dsa_offsets).
CREATE MACRO kvtrace_offset_stats(pos, seq_len) AS (
    SELECT CASE WHEN count(*) > 0 THEN {
        'offset_min': min(o)::INTEGER,
        'offset_p50': quantile_cont(o, 0.5),
        'offset_p95': quantile_cont(o, 0.95),
        'offset_max': max(o)::INTEGER,
        'offset_mean': avg(o),
        'within_256': avg((o < 256)::INTEGER),
        'within_1024': avg((o < 1024)::INTEGER),
        'within_4096': avg((o < 4096)::INTEGER)
    } END
    FROM (SELECT seq_len - 1 - unnest(pos) AS o)
);

-- @macro kvtrace_prefix_blocks(pos, region_blocks, bs)
-- Distinct blocks of one position list with id < region_blocks, ascending (see dsa_prefix).
CREATE MACRO kvtrace_prefix_blocks(pos, region_blocks, bs) AS
    list_sort(list_distinct(list_transform(
        list_filter(pos, lambda p: p < region_blocks * bs), lambda p: (p // bs)::INTEGER
    )));

-- @macro kvtrace_touched_blocks(pos, bs)
-- The distinct blocks of one ascending position list at block size bs, ascending.
CREATE MACRO kvtrace_touched_blocks(pos, bs) AS
    list_sort(list_distinct(list_transform(pos, lambda p: p // bs)));

-- @macro kvtrace_block_keys(tokens, bs)
-- Content keys of the full blocks of one token list (see dsa_block_keys): the hash of the
-- tokens up to each block's end, by DuckDB's hash here (other values than kvtrace's
-- numbers, equal exactly when kvtrace's are).
CREATE MACRO kvtrace_block_keys(tokens, bs) AS
    list_transform(range(len(tokens) // bs),
                   lambda j: (hash(tokens[1:(j + 1) * bs]) & 4611686018427387903)::BIGINT
                             | 4611686018427387904);

-- @macro kvtrace_prefix_block_keys(prefix_key, blocks)
-- The keys (prefix_key, j) of blocks 0 .. blocks - 1 (see dsa_block_keys), by DuckDB's hash.
CREATE MACRO kvtrace_prefix_block_keys(prefix_key, blocks) AS
    CASE WHEN prefix_key IS NOT NULL THEN
        list_transform(range(greatest(blocks, 0)),
                       lambda j: (hash(prefix_key, j) & 4611686018427387903)::BIGINT
                                 | 4611686018427387904)
    END;

-- >>> generated from kvtrace/analysis/function_specs.py: do not edit by hand

-- @macro kvtrace_hit_curve(bs, policy, granularity, scope, capacities, sharing, sample)
-- Cache simulation needs kvtrace's compiled kernels: not available in a plain shell.
CREATE MACRO kvtrace_hit_curve(bs, policy, granularity, scope, capacities, sharing, sample) AS
    CAST(error('dsa_hit_curve runs cache simulations in Python: use "kvtrace sql" or kvtrace.connect()')
         AS STRUCT(run_id VARCHAR, block_size INTEGER, policy VARCHAR, granularity VARCHAR,
                   scope VARCHAR, sharing VARCHAR, capacity_blocks BIGINT, accesses BIGINT,
                   hits BIGINT, shared_hits BIGINT, hit_rate DOUBLE, missed_blocks BIGINT)[]);

-- @macro kvtrace_reuse(bs, granularity, scope, sharing)
-- Stack distances need kvtrace's compiled kernels: not available in a plain shell.
CREATE MACRO kvtrace_reuse(bs, granularity, scope, sharing) AS
    CAST(error('dsa_reuse runs cache simulations in Python: use "kvtrace sql" or kvtrace.connect()')
         AS STRUCT(run_id VARCHAR, block_size INTEGER, granularity VARCHAR, scope VARCHAR,
                   sharing VARCHAR, distance BIGINT, accesses BIGINT, shared_accesses BIGINT)[]);

-- @macro kvtrace_prefix_hit_curve(policy, capacities, semantics, weight, warmup, capacity_bytes, bytes_per_token, model)
-- Cache simulation needs kvtrace's compiled kernels: not available in a plain shell.
CREATE MACRO kvtrace_prefix_hit_curve(policy, capacities, semantics, weight, warmup,
                                      capacity_bytes, bytes_per_token, model) AS
    CAST(error('workload_prefix_hit_curve runs cache simulations in Python: use "kvtrace sql" or kvtrace.connect()')
         AS STRUCT(run_id VARCHAR, policy VARCHAR, capacity_blocks BIGINT, accesses BIGINT,
                   hits BIGINT, hit_rate DOUBLE, semantics VARCHAR, weight VARCHAR, warmup DOUBLE,
                   capacity_bytes BIGINT, requests BIGINT, hit_tokens BIGINT, tokens BIGINT)[]);

-- @macro kvtrace_prefix_requests(policy, capacities, semantics, warmup, capacity_bytes, bytes_per_token, model, prefill_tok_s, cost_run)
-- Cache simulation needs kvtrace's compiled kernels: not available in a plain shell.
CREATE MACRO kvtrace_prefix_requests(policy, capacities, semantics, warmup, capacity_bytes,
                                     bytes_per_token, model, prefill_tok_s, cost_run) AS
    CAST(error('workload_prefix_requests runs cache simulations in Python: use "kvtrace sql" or kvtrace.connect()')
         AS STRUCT(run_id VARCHAR, policy VARCHAR, semantics VARCHAR, capacity_blocks BIGINT,
                   request_idx BIGINT, counted BOOLEAN, tokens BIGINT, blocks BIGINT,
                   hit_blocks BIGINT, hit_tokens BIGINT, ttft_saved_ms DOUBLE,
                   prefill_source VARCHAR)[]);

-- @macro kvtrace_routing(workers, capacity_blocks, policy, cache, capacity_bytes, bytes_per_token, model, tpot_ms, threshold, overlap_weight)
-- Cache simulation needs kvtrace's compiled kernels: not available in a plain shell.
CREATE MACRO kvtrace_routing(workers, capacity_blocks, policy, cache, capacity_bytes,
                             bytes_per_token, model, tpot_ms, threshold, overlap_weight) AS
    CAST(error('workload_routing runs cache simulations in Python: use "kvtrace sql" or kvtrace.connect()')
         AS STRUCT(run_id VARCHAR, policy VARCHAR, cache VARCHAR, worker BIGINT, workers BIGINT,
                   capacity_blocks BIGINT, requests BIGINT, blocks BIGINT, hit_blocks BIGINT,
                   tokens BIGINT, prefill_tokens_saved BIGINT, hit_rate DOUBLE, mean_load DOUBLE,
                   peak_load BIGINT, request_share DOUBLE, imbalance DOUBLE)[]);

-- @macro kvtrace_routing_requests(workers, capacity_blocks, policy, cache, capacity_bytes, bytes_per_token, model, tpot_ms, threshold, overlap_weight)
-- Cache simulation needs kvtrace's compiled kernels: not available in a plain shell.
CREATE MACRO kvtrace_routing_requests(workers, capacity_blocks, policy, cache, capacity_bytes,
                                      bytes_per_token, model, tpot_ms, threshold,
                                      overlap_weight) AS
    CAST(error('workload_routing_requests runs cache simulations in Python: use "kvtrace sql" or kvtrace.connect()')
         AS STRUCT(run_id VARCHAR, policy VARCHAR, cache VARCHAR, request_idx BIGINT,
                   worker BIGINT, load BIGINT, blocks BIGINT, hit_blocks BIGINT, tokens BIGINT,
                   hit_tokens BIGINT)[]);

-- @macro kvtrace_kv_routing_score(run_id)
-- The workers' caches are replayed in Python: not available in a plain shell.
CREATE MACRO kvtrace_kv_routing_score(run_id) AS
    CAST(error('kv_routing_score replays the caches of the workers in Python: use "kvtrace sql" or kvtrace.connect()')
         AS STRUCT(run_id VARCHAR, request_idx BIGINT, t_s DOUBLE, worker VARCHAR, blocks BIGINT,
                   hit_blocks BIGINT, best_worker VARCHAR, best_hit_blocks BIGINT, agrees BOOLEAN,
                   workers_seen BIGINT)[]);

-- @macro kvtrace_cost_model(source)
-- Least-squares fitting runs in Python: not available in a plain shell.
CREATE MACRO kvtrace_cost_model(source) AS
    CAST(error('timing_cost_model fits in Python: use "kvtrace sql" or kvtrace.connect()')
         AS STRUCT(run_id VARCHAR, source VARCHAR, observations BIGINT, intercept_s DOUBLE,
                   per_prefill_token_s DOUBLE, per_decode_token_s DOUBLE, per_kv_token_s DOUBLE,
                   r2 DOUBLE, residual_p50_s DOUBLE, residual_p90_s DOUBLE, residual_p99_s DOUBLE,
                   per_prefill_sq_token_s DOUBLE, loo_rmse_s DOUBLE, loo_mape DOUBLE)[]);

-- @macro kvtrace_serving_capacity(run, ttft_slo_ms, tpot_slo_ms, percentile, cost_run, model, bytes_per_token, gpu_memory_gib, model_weights_gib, max_batch_size, max_batch_tokens, requests, arrivals, seed)
-- The serving simulation runs in Python: not available in a plain shell.
CREATE MACRO kvtrace_serving_capacity(run, ttft_slo_ms, tpot_slo_ms, percentile, cost_run, model,
                                      bytes_per_token, gpu_memory_gib, model_weights_gib,
                                      max_batch_size, max_batch_tokens, requests, arrivals,
                                      seed) AS
    CAST(error('serving_capacity simulates a server in Python: use "kvtrace sql" or kvtrace.connect()')
         AS STRUCT(run_id VARCHAR, cost_run_id VARCHAR, point VARCHAR, load_level BIGINT,
                   request_rate DOUBLE, requests BIGINT, percentile DOUBLE, ttft_slo_ms DOUBLE,
                   tpot_slo_ms DOUBLE, meets_slo BOOLEAN, predicted_ttft_ms DOUBLE,
                   predicted_tpot_ms DOUBLE, measured_ttft_ms DOUBLE, measured_tpot_ms DOUBLE,
                   peak_kv_tokens BIGINT, peak_kv_gib DOUBLE, kv_bytes_per_token DOUBLE,
                   kv_capacity_tokens BIGINT, memory_limited BOOLEAN)[]);

-- @macro kvtrace_kv_cache_fidelity(policy, capacity_blocks, bucket_s)
-- Cache simulation needs kvtrace's compiled kernels: not available in a plain shell.
CREATE MACRO kvtrace_kv_cache_fidelity(policy, capacity_blocks, bucket_s) AS
    CAST(error('kv_cache_fidelity runs cache simulations in Python: use "kvtrace sql" or kvtrace.connect()')
         AS STRUCT(run_id VARCHAR, worker VARCHAR, t_s DOUBLE, capacity_blocks BIGINT,
                   observed_stored BIGINT, simulated_stored BIGINT, observed_removed BIGINT,
                   simulated_evicted BIGINT, observed_restores BIGINT, simulated_restores BIGINT,
                   observed_resident BIGINT, simulated_resident BIGINT)[]);

-- @macro kvtrace_kernel_sequences(operator, min_pattern_len, top_k)
-- Call stacks are built in Python: not available in a plain shell.
CREATE MACRO kvtrace_kernel_sequences(operator, min_pattern_len, top_k) AS
    CAST(error('timeline_kernel_sequences builds call stacks in Python: use "kvtrace sql" or kvtrace.connect()')
         AS STRUCT(run_id VARCHAR, rank BIGINT, place BIGINT, pattern VARCHAR, kernels BIGINT,
                   count BIGINT, gpu_kernel_us DOUBLE, cpu_op_us DOUBLE)[]);

-- @macro kvtrace_critical_path(annotation, instance, definitions)
-- The critical path is a graph search in Python: not available in a plain shell.
CREATE MACRO kvtrace_critical_path(annotation, instance, definitions) AS
    CAST(error('timeline_critical_path searches a graph in Python: use "kvtrace sql" or kvtrace.connect()')
         AS STRUCT(run_id VARCHAR, rank BIGINT, step BIGINT, edge_type VARCHAR, event_idx BIGINT,
                   name VARCHAR, category VARCHAR, stream BIGINT, bound_by VARCHAR,
                   duration_us DOUBLE)[]);

-- <<< end of generated macros
