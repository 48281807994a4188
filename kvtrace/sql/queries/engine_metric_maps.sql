-- The serving engines' metrics that kvtrace maps, and the pool columns they give.
--
-- Generated from kvtrace/collectors/engine_metric_maps.py: do not edit by hand
-- ('python -m kvtrace.collectors.engine_metric_maps' writes this file again, and a test
-- holds the two equal).  serving_counters.sql reads the map.
--
-- engine_pool_snapshots combines each quantity's series at a scrape as the map says (sum,
-- mean or max over their labels) and evaluates the pool rules over them: the first rule of
-- the engine that gives a value fills the column, truncated or rounded (half to even) to
-- an integer for token and request counts; a rule over a quantity the scrape lacks, or
-- dividing by 0, gives none.  Worked example: a vLLM scrape with cache_config_info
-- {num_gpu_blocks="2048", block_size="16"} and kv_cache_usage_perc 0.25 gives
-- capacity_tokens 2048 x 16 = 32,768 and available_tokens 32,768 x (1 - 0.25) = 24,576.

-- @requires engine_metrics.sql

-- @view engine_metric_map
-- Which engine metric gives which kvtrace quantity
-- (kvtrace/collectors/engine_metric_maps.py).
-- @column engine       vllm, sglang or lmcache
-- @column family       the metric family as the engine names it
-- @column sample       the sample's name as exposed (a counter's ends in _total)
-- @column kind         counter or gauge
-- @column quantity     kvtrace's name for it
-- @column unit         tokens, requests, share (0-1), blocks, bytes, seconds, events
-- @column split_by     the label whose value is the quantity's part (NULL: none)
-- @column combine      how the series of its other labels add up: sum, mean or max
-- @column value_label  the label holding the value (an info gauge's fact), else NULL
-- @column meaning      what it counts
CREATE VIEW engine_metric_map AS
SELECT * FROM (VALUES
    ('vllm', 'vllm:num_requests_running', 'vllm:num_requests_running', 'gauge', 'running_requests', 'requests', NULL, 'sum', NULL, 'requests in the running batch'),
    ('vllm', 'vllm:num_requests_waiting', 'vllm:num_requests_waiting', 'gauge', 'waiting_requests', 'requests', NULL, 'sum', NULL, 'requests waiting to be scheduled'),
    ('vllm', 'vllm:num_requests_waiting_by_reason', 'vllm:num_requests_waiting_by_reason', 'gauge', 'waiting_requests_by_reason', 'requests', 'reason', 'sum', NULL, 'waiting requests by reason: capacity or deferred'),
    ('vllm', 'vllm:num_requests_kv_fetch_by_stage', 'vllm:num_requests_kv_fetch_by_stage', 'gauge', 'kv_fetch_requests', 'requests', 'stage', 'sum', NULL, 'waiting requests by async KV load stage (KV consumers only)'),
    ('vllm', 'vllm:kv_cache_usage_perc', 'vllm:kv_cache_usage_perc', 'gauge', 'kv_usage_share', 'share', NULL, 'mean', NULL, 'share of the GPU KV cache in use'),
    ('vllm', 'vllm:cache_config_info', 'vllm:cache_config_info', 'gauge', 'kv_capacity_blocks', 'blocks', NULL, 'sum', 'num_gpu_blocks', 'GPU KV cache blocks (the num_gpu_blocks label)'),
    ('vllm', 'vllm:cache_config_info', 'vllm:cache_config_info', 'gauge', 'kv_block_size_tokens', 'tokens', NULL, 'max', 'block_size', 'tokens per KV block (the block_size label)'),
    ('vllm', 'vllm:prefix_cache_queries', 'vllm:prefix_cache_queries_total', 'counter', 'prefix_cache_query_tokens', 'tokens', NULL, 'sum', NULL, 'prompt tokens looked up in the prefix cache'),
    ('vllm', 'vllm:prefix_cache_hits', 'vllm:prefix_cache_hits_total', 'counter', 'prefix_cache_hit_tokens', 'tokens', NULL, 'sum', NULL, 'prompt tokens found in the prefix cache'),
    ('vllm', 'vllm:external_prefix_cache_queries', 'vllm:external_prefix_cache_queries_total', 'counter', 'external_prefix_cache_query_tokens', 'tokens', NULL, 'sum', NULL, 'prompt tokens looked up through the KV connector'),
    ('vllm', 'vllm:external_prefix_cache_hits', 'vllm:external_prefix_cache_hits_total', 'counter', 'external_prefix_cache_hit_tokens', 'tokens', NULL, 'sum', NULL, 'prompt tokens the KV connector supplied'),
    ('vllm', 'vllm:prompt_tokens', 'vllm:prompt_tokens_total', 'counter', 'prompt_tokens', 'tokens', NULL, 'sum', NULL, 'prefill tokens processed'),
    ('vllm', 'vllm:prompt_tokens_by_source', 'vllm:prompt_tokens_by_source_total', 'counter', 'prompt_tokens_by_source', 'tokens', 'source', 'sum', NULL, 'prompt tokens by source: computed, local cache hit or external transfer'),
    ('vllm', 'vllm:prompt_tokens_cached', 'vllm:prompt_tokens_cached_total', 'counter', 'cached_prompt_tokens', 'tokens', NULL, 'sum', NULL, 'cached prompt tokens, local and external'),
    ('vllm', 'vllm:prompt_tokens_cached_by_source', 'vllm:prompt_tokens_cached_by_source_total', 'counter', 'cached_prompt_tokens_by_tier', 'tokens', 'source', 'sum', NULL, 'prefix-cache hit tokens by the tier that supplied them: device, host, disk, p2p, external_unspecified'),
    ('vllm', 'vllm:generation_tokens', 'vllm:generation_tokens_total', 'counter', 'generation_tokens', 'tokens', NULL, 'sum', NULL, 'tokens generated'),
    ('vllm', 'vllm:num_preemptions', 'vllm:num_preemptions_total', 'counter', 'preemptions', 'events', NULL, 'sum', NULL, 'requests preempted'),
    ('vllm', 'vllm:kv_offload_load_bytes', 'vllm:kv_offload_load_bytes_total', 'counter', 'offload_load_bytes', 'bytes', NULL, 'sum', NULL, 'bytes loaded from the offload tier into GPU'),
    ('vllm', 'vllm:kv_offload_load_time', 'vllm:kv_offload_load_time_total', 'counter', 'offload_load_seconds', 'seconds', NULL, 'sum', NULL, 'time spent loading from the offload tier'),
    ('vllm', 'vllm:kv_offload_store_bytes', 'vllm:kv_offload_store_bytes_total', 'counter', 'offload_store_bytes', 'bytes', NULL, 'sum', NULL, 'bytes stored from GPU into the offload tier'),
    ('vllm', 'vllm:kv_offload_store_time', 'vllm:kv_offload_store_time_total', 'counter', 'offload_store_seconds', 'seconds', NULL, 'sum', NULL, 'time spent storing into the offload tier'),
    ('vllm', 'vllm:kv_offload_total_bytes', 'vllm:kv_offload_total_bytes_total', 'counter', 'offload_bytes_by_direction', 'bytes', 'transfer_type', 'sum', NULL, 'bytes offloaded by transfer type, GPU_to_CPU or CPU_to_GPU (the older CPU offload metric, beside the load and store ones)'),
    ('vllm', 'vllm:kv_offload_total_time', 'vllm:kv_offload_total_time_total', 'counter', 'offload_seconds_by_direction', 'seconds', 'transfer_type', 'sum', NULL, 'offload transfer time by transfer type (the older CPU offload metric)'),
    ('vllm', 'vllm:kv_offload_allocation_failure', 'vllm:kv_offload_allocation_failure_total', 'counter', 'offload_allocation_failures', 'events', NULL, 'sum', NULL, 'offload store allocations that failed'),
    ('vllm', 'vllm:kv_offload_stores_skipped', 'vllm:kv_offload_stores_skipped_total', 'counter', 'offload_stores_skipped', 'events', NULL, 'sum', NULL, 'offload stores skipped below the reuse threshold'),
    ('vllm', 'vllm:kv_offload_cpu_cache_usage_perc', 'vllm:kv_offload_cpu_cache_usage_perc', 'gauge', 'offload_cpu_pinned_share', 'share', NULL, 'mean', NULL, 'share of the CPU KV cache pinned by transfers in flight'),
    ('vllm', 'vllm:kv_offload_cpu_cache_write_usage_perc', 'vllm:kv_offload_cpu_cache_write_usage_perc', 'gauge', 'offload_cpu_store_pinned_share', 'share', NULL, 'mean', NULL, 'share of the CPU KV cache pinned by stores in flight'),
    ('vllm', 'vllm:kv_offload_cpu_cache_read_usage_perc', 'vllm:kv_offload_cpu_cache_read_usage_perc', 'gauge', 'offload_cpu_load_pinned_share', 'share', NULL, 'mean', NULL, 'share of the CPU KV cache pinned by loads in flight'),
    ('sglang', 'sglang:num_running_reqs', 'sglang:num_running_reqs', 'gauge', 'running_requests', 'requests', NULL, 'sum', NULL, 'requests in the running batch'),
    ('sglang', 'sglang:num_queue_reqs', 'sglang:num_queue_reqs', 'gauge', 'waiting_requests', 'requests', NULL, 'sum', NULL, 'requests in the waiting queue'),
    ('sglang', 'sglang:num_retracted_reqs', 'sglang:num_retracted_reqs', 'gauge', 'retracted_requests', 'requests', NULL, 'sum', NULL, 'requests retracted for lack of KV memory'),
    ('sglang', 'sglang:num_paused_reqs', 'sglang:num_paused_reqs', 'gauge', 'paused_requests', 'requests', NULL, 'sum', NULL, 'requests paused by a weight sync'),
    ('sglang', 'sglang:cache_hit_rate', 'sglang:cache_hit_rate', 'gauge', 'prefix_cache_hit_share', 'share', NULL, 'mean', NULL, 'the prefix cache hit rate'),
    ('sglang', 'sglang:token_usage', 'sglang:token_usage', 'gauge', 'kv_usage_share', 'share', NULL, 'mean', NULL, 'share of the KV pool in use'),
    ('sglang', 'sglang:num_used_tokens', 'sglang:num_used_tokens', 'gauge', 'used_tokens', 'tokens', NULL, 'sum', NULL, 'KV tokens in use'),
    ('sglang', 'sglang:kv_available_tokens', 'sglang:kv_available_tokens', 'gauge', 'kv_available_tokens', 'tokens', NULL, 'sum', NULL, 'free token slots of the KV pool'),
    ('sglang', 'sglang:kv_evictable_tokens', 'sglang:kv_evictable_tokens', 'gauge', 'kv_evictable_tokens', 'tokens', NULL, 'sum', NULL, 'evictable (radix-cached) token slots'),
    ('sglang', 'sglang:kv_used_tokens', 'sglang:kv_used_tokens', 'gauge', 'kv_used_tokens', 'tokens', NULL, 'sum', NULL, 'token slots in active use'),
    ('sglang', 'sglang:max_total_num_tokens', 'sglang:max_total_num_tokens', 'gauge', 'kv_capacity_tokens', 'tokens', NULL, 'sum', NULL, 'the KV pool''s size in tokens'),
    ('sglang', 'sglang:streaming_session_held_tokens', 'sglang:streaming_session_held_tokens', 'gauge', 'session_held_tokens', 'tokens', NULL, 'sum', NULL, 'KV tokens held by streaming session slots'),
    ('sglang', 'sglang:num_streaming_sessions', 'sglang:num_streaming_sessions', 'gauge', 'streaming_sessions', 'sessions', NULL, 'sum', NULL, 'streaming sessions'),
    ('sglang', 'sglang:hicache_host_used_tokens', 'sglang:hicache_host_used_tokens', 'gauge', 'host_used_tokens', 'tokens', NULL, 'sum', NULL, 'tokens in the host (L2) KV cache'),
    ('sglang', 'sglang:hicache_host_total_tokens', 'sglang:hicache_host_total_tokens', 'gauge', 'host_capacity_tokens', 'tokens', NULL, 'sum', NULL, 'the host (L2) KV cache''s size'),
    ('sglang', 'sglang:prompt_tokens', 'sglang:prompt_tokens_total', 'counter', 'prompt_tokens', 'tokens', NULL, 'sum', NULL, 'prefill tokens processed'),
    ('sglang', 'sglang:generation_tokens', 'sglang:generation_tokens_total', 'counter', 'generation_tokens', 'tokens', NULL, 'sum', NULL, 'tokens generated'),
    ('sglang', 'sglang:cached_tokens', 'sglang:cached_tokens_total', 'counter', 'cached_prompt_tokens_by_tier', 'tokens', 'cache_source', 'sum', NULL, 'cached prompt tokens by source: device, host or storage'),
    ('sglang', 'sglang:num_requests', 'sglang:num_requests_total', 'counter', 'finished_requests', 'requests', NULL, 'sum', NULL, 'requests processed'),
    ('sglang', 'sglang:num_retracted_requests', 'sglang:num_retracted_requests_total', 'counter', 'retractions', 'events', NULL, 'sum', NULL, 'requests retracted'),
    ('sglang', 'sglang:evicted_tokens', 'sglang:evicted_tokens_total', 'counter', 'evicted_tokens', 'tokens', NULL, 'sum', NULL, 'device KV token slots freed by eviction'),
    ('sglang', 'sglang:load_back_tokens', 'sglang:load_back_tokens_total', 'counter', 'host_load_tokens', 'tokens', 'pool', 'max', NULL, 'tokens loaded back from host DRAM (L2) to GPU, by host pool (every rank reports the same count)'),
    ('sglang', 'sglang:load_back_bytes', 'sglang:load_back_bytes_total', 'counter', 'host_load_bytes', 'bytes', NULL, 'sum', NULL, 'bytes loaded back from host DRAM (L2) to GPU'),
    ('sglang', 'sglang:hicache_backup_tokens', 'sglang:hicache_backup_tokens_total', 'counter', 'host_backup_tokens', 'tokens', 'pool', 'max', NULL, 'tokens backed up from GPU to host DRAM (L2), by host pool (every rank reports the same count)'),
    ('sglang', 'sglang:hicache_backup_bytes', 'sglang:hicache_backup_bytes_total', 'counter', 'host_backup_bytes', 'bytes', NULL, 'sum', NULL, 'bytes backed up from GPU to host DRAM (L2)'),
    ('sglang', 'sglang:hicache_dropped_tokens', 'sglang:hicache_dropped_tokens_total', 'counter', 'dropped_tokens_by_reason', 'tokens', 'reason', 'sum', NULL, 'device KV tokens destroyed without a host backup, by reason'),
    ('sglang', 'sglang:prefetched_tokens', 'sglang:prefetched_tokens_total', 'counter', 'storage_prefetch_tokens', 'tokens', NULL, 'sum', NULL, 'tokens moved from storage (L3) to host'),
    ('sglang', 'sglang:backuped_tokens', 'sglang:backuped_tokens_total', 'counter', 'storage_backup_tokens', 'tokens', NULL, 'sum', NULL, 'tokens backed up from host to storage (L3)'),
    ('sglang', 'sglang:storage_prefetch_hit_tokens', 'sglang:storage_prefetch_hit_tokens_total', 'counter', 'storage_hit_tokens', 'tokens', NULL, 'sum', NULL, 'storage (L3) hit tokens a query returned'),
    ('sglang', 'sglang:storage_prefetch_unfulfilled_tokens', 'sglang:storage_prefetch_unfulfilled_tokens_total', 'counter', 'storage_unfulfilled_tokens_by_reason', 'tokens', 'reason', 'sum', NULL, 'storage hit tokens that gave no usable prefetch, by reason'),
    ('lmcache', 'lmcache:num_retrieve_requests', 'lmcache:num_retrieve_requests_total', 'counter', 'retrieve_requests', 'requests', NULL, 'sum', NULL, 'retrieve requests sent to LMCache'),
    ('lmcache', 'lmcache:num_store_requests', 'lmcache:num_store_requests_total', 'counter', 'store_requests', 'requests', NULL, 'sum', NULL, 'store requests sent to LMCache'),
    ('lmcache', 'lmcache:num_lookup_requests', 'lmcache:num_lookup_requests_total', 'counter', 'lookup_requests', 'requests', NULL, 'sum', NULL, 'lookup requests sent to LMCache'),
    ('lmcache', 'lmcache:num_requested_tokens', 'lmcache:num_requested_tokens_total', 'counter', 'retrieve_query_tokens', 'tokens', NULL, 'sum', NULL, 'tokens asked of LMCache''s retrieve'),
    ('lmcache', 'lmcache:num_hit_tokens', 'lmcache:num_hit_tokens_total', 'counter', 'retrieve_hit_tokens', 'tokens', NULL, 'sum', NULL, 'tokens LMCache''s retrieve found'),
    ('lmcache', 'lmcache:num_lookup_tokens', 'lmcache:num_lookup_tokens_total', 'counter', 'lookup_query_tokens', 'tokens', NULL, 'sum', NULL, 'tokens asked of LMCache''s lookup'),
    ('lmcache', 'lmcache:num_lookup_hits', 'lmcache:num_lookup_hits_total', 'counter', 'lookup_hit_tokens', 'tokens', NULL, 'sum', NULL, 'tokens LMCache''s lookup found'),
    ('lmcache', 'lmcache:num_stored_tokens', 'lmcache:num_stored_tokens_total', 'counter', 'stored_tokens', 'tokens', NULL, 'sum', NULL, 'tokens stored, evicted ones included'),
    ('lmcache', 'lmcache:num_vllm_hit_tokens', 'lmcache:num_vllm_hit_tokens_total', 'counter', 'engine_hit_tokens', 'tokens', NULL, 'sum', NULL, 'tokens the engine''s own prefix cache hit'),
    ('lmcache', 'lmcache:num_prompt_tokens', 'lmcache:num_prompt_tokens_total', 'counter', 'prompt_tokens', 'tokens', NULL, 'sum', NULL, 'prompt tokens LMCache saw'),
    ('lmcache', 'lmcache:num_remote_read_bytes', 'lmcache:num_remote_read_bytes_total', 'counter', 'remote_read_bytes', 'bytes', NULL, 'sum', NULL, 'bytes read from remote backends'),
    ('lmcache', 'lmcache:num_remote_write_bytes', 'lmcache:num_remote_write_bytes_total', 'counter', 'remote_write_bytes', 'bytes', NULL, 'sum', NULL, 'bytes written to remote backends'),
    ('lmcache', 'lmcache:local_cpu_evict_count', 'lmcache:local_cpu_evict_count_total', 'counter', 'cpu_evictions', 'events', NULL, 'sum', NULL, 'evictions in the local CPU backend'),
    ('lmcache', 'lmcache:local_cpu_evict_failed_count', 'lmcache:local_cpu_evict_failed_count_total', 'counter', 'cpu_eviction_failures', 'events', NULL, 'sum', NULL, 'failed evictions in the local CPU backend'),
    ('lmcache', 'lmcache:forced_unpin_count', 'lmcache:forced_unpin_count_total', 'counter', 'forced_unpins', 'events', NULL, 'sum', NULL, 'objects unpinned on a timeout'),
    ('lmcache', 'lmcache:lookup_0_hit_requests', 'lmcache:lookup_0_hit_requests_total', 'counter', 'zero_hit_lookups', 'requests', NULL, 'sum', NULL, 'lookups that hit nothing'),
    ('lmcache', 'lmcache:remote_ping_errors', 'lmcache:remote_ping_errors_total', 'counter', 'remote_ping_errors', 'events', NULL, 'sum', NULL, 'failed pings of remote backends'),
    ('lmcache', 'lmcache:retrieve_hit_rate', 'lmcache:retrieve_hit_rate', 'gauge', 'retrieve_hit_share', 'share', NULL, 'mean', NULL, 'retrieve hit rate since the last log'),
    ('lmcache', 'lmcache:lookup_hit_rate', 'lmcache:lookup_hit_rate', 'gauge', 'lookup_hit_share', 'share', NULL, 'mean', NULL, 'lookup hit rate since the last log'),
    ('lmcache', 'lmcache:local_cache_usage', 'lmcache:local_cache_usage', 'gauge', 'local_cache_bytes', 'bytes', NULL, 'sum', NULL, 'bytes of LMCache''s local (CPU) cache in use'),
    ('lmcache', 'lmcache:remote_cache_usage', 'lmcache:remote_cache_usage', 'gauge', 'remote_cache_bytes', 'bytes', NULL, 'sum', NULL, 'bytes of the remote cache in use'),
    ('lmcache', 'lmcache:local_storage_usage', 'lmcache:local_storage_usage', 'gauge', 'local_storage_bytes', 'bytes', NULL, 'sum', NULL, 'bytes of local storage (disk) in use'),
    ('lmcache', 'lmcache:active_memory_objs_count', 'lmcache:active_memory_objs_count', 'gauge', 'active_memory_objects', 'objects', NULL, 'sum', NULL, 'memory objects in use'),
    ('lmcache', 'lmcache:pinned_memory_objs_count', 'lmcache:pinned_memory_objs_count', 'gauge', 'pinned_memory_objects', 'objects', NULL, 'sum', NULL, 'memory objects pinned'),
    ('lmcache', 'lmcache:get_blocking_failed_count', 'lmcache:get_blocking_failed_count', 'gauge', 'blocking_get_failures', 'events', NULL, 'sum', NULL, 'blocking gets that failed (a gauge the engine keeps as a running count)'),
    ('lmcache', 'lmcache:put_failed_count', 'lmcache:put_failed_count', 'gauge', 'put_failures', 'events', NULL, 'sum', NULL, 'puts that failed (a gauge the engine keeps as a running count)')
) AS m(engine, family, sample, kind, quantity, unit, split_by, combine, value_label, meaning);

-- @view engine_pool_snapshots
-- pool_snapshots' columns from the engines' own metrics: one row per (run, worker,
-- engine, scrape) that holds a quantity a pool rule reads.  The rules are
-- engine_metric_maps.POOL_RULES (the guide lists them); a column no rule of the
-- engine fills is NULL, never 0.
-- @column run_id                 the run
-- @column experiment             experiment label
-- @column worker_id              the scraped endpoint's name
-- @column engine                 vllm, sglang or lmcache
-- @column t_s                    seconds since the run's first scrape
-- @column ts                     when the scrape was taken (UTC)
-- @column capacity_tokens        KV pool size in tokens
-- @column held_tokens            tokens held by streaming sessions
-- @column available_tokens       free KV tokens
-- @column idle_evictable_tokens  evictable (radix-cached) tokens
-- @column kvcache_mem_gb         KV cache memory in use, GiB (LMCache's local cache)
-- @column running_batch_size     requests in the running batch
CREATE VIEW engine_pool_snapshots AS
WITH series AS (
    SELECT e.run_id, e.experiment, e.worker_id, e.ts, e.t_s, m.engine, m.quantity,
           m.combine, CASE WHEN m.value_label IS NULL THEN e.value
               ELSE TRY_CAST(e.labels->>m.value_label AS DOUBLE) END AS value
    FROM engine_metrics AS e JOIN engine_metric_map AS m ON e.metric = m.sample
    WHERE m.quantity IN ('kv_available_tokens', 'kv_block_size_tokens', 'kv_capacity_blocks', 'kv_evictable_tokens', 'kv_usage_share', 'kv_used_tokens', 'local_cache_bytes', 'running_requests', 'session_held_tokens', 'used_tokens')
), combined AS (
    SELECT run_id, any_value(experiment) AS experiment, worker_id, ts,
           min(t_s) AS t_s, engine, quantity,
           CASE any_value(combine) WHEN 'mean' THEN avg(value)
               WHEN 'max' THEN max(value) ELSE sum(value) END AS value
    FROM series GROUP BY run_id, worker_id, ts, engine, quantity
), quantities AS (
    SELECT run_id, any_value(experiment) AS experiment, worker_id, engine,
           min(t_s) AS t_s, ts,
        max(value) FILTER (WHERE quantity = 'kv_available_tokens') AS "kv_available_tokens",
        max(value) FILTER (WHERE quantity = 'kv_block_size_tokens') AS "kv_block_size_tokens",
        max(value) FILTER (WHERE quantity = 'kv_capacity_blocks') AS "kv_capacity_blocks",
        max(value) FILTER (WHERE quantity = 'kv_evictable_tokens') AS "kv_evictable_tokens",
        max(value) FILTER (WHERE quantity = 'kv_usage_share') AS "kv_usage_share",
        max(value) FILTER (WHERE quantity = 'kv_used_tokens') AS "kv_used_tokens",
        max(value) FILTER (WHERE quantity = 'local_cache_bytes') AS "local_cache_bytes",
        max(value) FILTER (WHERE quantity = 'running_requests') AS "running_requests",
        max(value) FILTER (WHERE quantity = 'session_held_tokens') AS "session_held_tokens",
        max(value) FILTER (WHERE quantity = 'used_tokens') AS "used_tokens"
    FROM combined GROUP BY run_id, worker_id, engine, ts
)
SELECT run_id, experiment, worker_id, engine, t_s, ts,
    CAST(coalesce(
        CASE WHEN engine = 'sglang' THEN trunc(("kv_used_tokens" + "kv_available_tokens")) END,
        CASE WHEN engine = 'sglang' THEN round_even(("used_tokens" / nullif("kv_usage_share", 0)), 0) END,
        CASE WHEN engine = 'vllm' THEN trunc(("kv_capacity_blocks" * "kv_block_size_tokens")) END
    ) AS BIGINT) AS capacity_tokens,
    CAST(coalesce(
        CASE WHEN engine = 'sglang' THEN trunc("session_held_tokens") END
    ) AS BIGINT) AS held_tokens,
    CAST(coalesce(
        CASE WHEN engine = 'sglang' THEN trunc("kv_available_tokens") END,
        CASE WHEN engine = 'vllm' THEN round_even((("kv_capacity_blocks" * "kv_block_size_tokens") * (1.0 - "kv_usage_share")), 0) END
    ) AS BIGINT) AS available_tokens,
    CAST(coalesce(
        CASE WHEN engine = 'sglang' THEN trunc("kv_evictable_tokens") END
    ) AS BIGINT) AS idle_evictable_tokens,
    CAST(coalesce(
        CASE WHEN engine = 'lmcache' THEN ("local_cache_bytes" / nullif(1073741824.0, 0)) END
    ) AS DOUBLE) AS kvcache_mem_gb,
    CAST(coalesce(
        CASE WHEN engine = 'sglang' THEN trunc("running_requests") END,
        CASE WHEN engine = 'vllm' THEN trunc("running_requests") END
    ) AS BIGINT) AS running_batch_size
FROM quantities
ORDER BY run_id, worker_id, engine, ts;
