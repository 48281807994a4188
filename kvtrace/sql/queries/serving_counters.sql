-- The serving engines' own counters in kvtrace's terms: vLLM's, SGLang's and LMCache's
-- Prometheus metrics (engine_metrics) mapped onto named quantities, their per-scrape
-- increases, the pool columns they give, and a warning when a run met a cache an
-- earlier run of its experiment had warmed.
--
-- engine_metric_map is generated from kvtrace/collectors/engine_metric_maps.py (python -m
-- kvtrace.collectors.engine_metric_maps writes it again; a test holds them equal): each
-- engine metric, as the engine names it, gives a quantity with a unit.  serving_counters
-- has one row per (run, worker, scrape, quantity, part): the series of one quantity are
-- combined over their other labels (model, engine index, ranks) by the map's `combine`
-- (sum; mean for shares; max for a count every rank reports alike), and a label the map
-- names (`split_by`: vLLM's transfer_type, SGLang's cache_source, ...) keeps its values
-- apart as `part`.  A counter's `delta` is the sum of its series' increases since their
-- previous scrape (engine_counter_deltas: a drop is a restart of the engine, the increase
-- is then the new value), so a run's own traffic is the sum of its deltas, whatever the
-- counters held when the run began.
--
-- Worked example (serving_counters): worker w scrapes a vLLM server with two engine cores
-- (label engine="0" and "1") at t = 0, 10 and 20 s.  vllm:prefix_cache_hits_total reads
-- engine 0: 100, 160, 40 (core 0 restarted between 10 and 20 s) and engine 1: 50, 70, 90.
-- prefix_cache_hit_tokens: t = 0: value 150, delta NULL (no earlier scrape); t = 10: value
-- 230, delta 60 + 20 = 80; t = 20: value 130, delta 40 (a reset: 40 < 160) + 20 = 60,
-- reset true.  The run's hits are 80 + 60 = 140.  vllm:kv_cache_usage_perc 0.2 and 0.4
-- at one scrape give kv_usage_share 0.3 (combine mean).
--
-- Worked example (serving_warm_cache_runs): runs A (started 10:00) and B (11:00) of
-- experiment exp1 replayed one trace: B's workload_requests hold prompt-block hashes
-- {1, 2, 3, 4}, A's {1, 2, 3, 9}.  B repeats 3 of its 4 hashes (overlap 0.75).  A's
-- vLLM deltas add up to 300 hit of 1,000 queried tokens (0.30), B's to 800 of 1,000
-- (0.80): a jump of 0.50 >= 0.20 with an overlap >= 0.50, so the row warns that B met a
-- cache A warmed.

-- @requires engine_metrics.sql
-- @requires runs.sql
-- @requires kv_events.sql
-- @requires request.sql
-- @requires timing.sql
-- @requires workload.sql

-- >>> engine_metric_map, generated from kvtrace/collectors/engine_metric_maps.py

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

-- <<< end of engine_metric_map

-- @view serving_counters
-- One row per (run, worker, scrape, quantity, part): an engine metric in kvtrace's terms.
-- @column run_id      the run
-- @column experiment  experiment label
-- @column worker_id   the scraped endpoint's name
-- @column ts          when the scrape was taken (UTC)
-- @column t_s         seconds since the run's first scrape
-- @column engine      vllm, sglang or lmcache
-- @column quantity    kvtrace's name for it (engine_metric_map)
-- @column part        the value of the map's split_by label (e.g. GPU_to_CPU), NULL when none
-- @column unit        tokens, requests, share (0-1), blocks, bytes, seconds, events, ...
-- @column kind        counter or gauge
-- @column value       the value at the scrape, the series combined (a counter's runs from the engine's start)
-- @column delta       counters: the increase since the previous scrape, resets handled (NULL on the first)
-- @column reset       counters: whether a series restarted from 0 since the previous scrape
-- @column series      how many series (label sets) were combined
CREATE VIEW serving_counters AS
WITH mapped AS (
    SELECT e.run_id, e.experiment, e.worker_id, e.ts, e.t_s, m.engine, m.quantity, m.unit,
           m.kind, m.combine,
           CASE WHEN m.split_by IS NOT NULL THEN e.labels->>m.split_by END AS part,
           CASE WHEN m.value_label IS NULL THEN e.value
                ELSE TRY_CAST(e.labels->>m.value_label AS DOUBLE) END AS value,
           d.delta, d.reset
    FROM engine_metrics AS e
    JOIN engine_metric_map AS m ON e.metric = m.sample
    LEFT JOIN engine_counter_deltas AS d
        ON m.kind = 'counter' AND d.run_id = e.run_id AND d.worker_id = e.worker_id
       AND d.metric = e.metric AND d.labels = e.labels AND d.ts = e.ts
)
SELECT run_id, any_value(experiment) AS experiment, worker_id, ts, min(t_s) AS t_s, engine,
       quantity, part, any_value(unit) AS unit, any_value(kind) AS kind,
       CASE any_value(combine)
           WHEN 'mean' THEN avg(value) WHEN 'max' THEN max(value) ELSE sum(value) END AS value,
       CASE any_value(combine) WHEN 'max' THEN max(delta) ELSE sum(delta) END AS delta,
       CASE WHEN any_value(kind) = 'counter' THEN coalesce(bool_or(reset), false) END AS reset,
       count(*) AS series
FROM mapped
GROUP BY run_id, worker_id, ts, engine, quantity, part
ORDER BY run_id, worker_id, ts, engine, quantity, part;

-- >>> engine_pool_snapshots, generated from kvtrace/collectors/engine_metric_maps.py

-- @view engine_pool_snapshots
-- pool_snapshots' columns from the engines' own metrics: one row per (run, worker,
-- engine, scrape) where the engine exposes a mapped quantity.  The rules are
-- engine_metric_maps.POOL_RULES (the guide lists them); a column no rule of the
-- engine fills is NULL, never 0.
-- @column engine                 vllm, sglang or lmcache
-- @column run_id                 the run
-- @column experiment             experiment label
-- @column worker_id              the scraped endpoint's name
-- @column t_s                    seconds since the run's first scrape
-- @column ts                     when the scrape was taken (UTC)
-- @column capacity_tokens        KV pool size in tokens
-- @column held_tokens            tokens held by streaming sessions
-- @column available_tokens       free KV tokens
-- @column idle_evictable_tokens  evictable (radix-cached) tokens
-- @column kvcache_mem_gb         KV cache memory in use, GiB (LMCache's local cache)
-- @column running_batch_size     requests in the running batch
CREATE VIEW engine_pool_snapshots AS
WITH q AS (
    SELECT run_id, experiment, worker_id, engine, t_s, ts,
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
    FROM serving_counters
    WHERE part IS NULL
    GROUP BY ALL
)
SELECT q.engine,
    q.run_id,
    q.experiment,
    q.worker_id,
    q.t_s,
    q.ts,
    CAST(coalesce(
        CASE WHEN q.engine = 'sglang' THEN trunc(("kv_used_tokens" + "kv_available_tokens")) END,
        CASE WHEN q.engine = 'sglang' THEN round_even(("used_tokens" / nullif("kv_usage_share", 0)), 0) END,
        CASE WHEN q.engine = 'vllm' THEN trunc(("kv_capacity_blocks" * "kv_block_size_tokens")) END
    ) AS BIGINT) AS capacity_tokens,
    CAST(coalesce(
        CASE WHEN q.engine = 'sglang' THEN trunc("session_held_tokens") END
    ) AS BIGINT) AS held_tokens,
    CAST(coalesce(
        CASE WHEN q.engine = 'sglang' THEN trunc("kv_available_tokens") END,
        CASE WHEN q.engine = 'vllm' THEN round_even((("kv_capacity_blocks" * "kv_block_size_tokens") * (1.0 - "kv_usage_share")), 0) END
    ) AS BIGINT) AS available_tokens,
    CAST(coalesce(
        CASE WHEN q.engine = 'sglang' THEN trunc("kv_evictable_tokens") END
    ) AS BIGINT) AS idle_evictable_tokens,
    CAST(coalesce(
        CASE WHEN q.engine = 'lmcache' THEN ("local_cache_bytes" / nullif(1073741824.0, 0)) END
    ) AS DOUBLE) AS kvcache_mem_gb,
    CAST(coalesce(
        CASE WHEN q.engine = 'sglang' THEN trunc("running_requests") END,
        CASE WHEN q.engine = 'vllm' THEN trunc("running_requests") END
    ) AS BIGINT) AS running_batch_size
FROM q;

-- <<< end of engine_pool_snapshots

-- @view _serving_run_hit_rates
-- Per run: prompt tokens looked up and found in a prefix cache, from the engines' counter
-- deltas (vLLM: prefix_cache_hit / query tokens; SGLang: cached / prompt tokens; LMCache:
-- retrieve hit / query tokens), else from request_metrics' or request_timings' cached
-- tokens over their input tokens; and when the run began (runs.started_at, else its first
-- scrape; a run whose start is unknown is paired with none).
CREATE VIEW _serving_run_hit_rates AS
WITH per_engine AS (
    SELECT run_id, engine, any_value(experiment) AS experiment,
           sum(delta) FILTER (WHERE quantity = CASE engine
               WHEN 'vllm' THEN 'prefix_cache_hit_tokens'
               WHEN 'sglang' THEN 'cached_prompt_tokens_by_tier'
               ELSE 'retrieve_hit_tokens' END) AS hit_tokens,
           sum(delta) FILTER (WHERE quantity = CASE engine
               WHEN 'vllm' THEN 'prefix_cache_query_tokens'
               WHEN 'sglang' THEN 'prompt_tokens'
               ELSE 'retrieve_query_tokens' END) AS query_tokens
    FROM serving_counters
    WHERE kind = 'counter'
    GROUP BY run_id, engine
), counted AS (  -- the serving engine's own cache first: vLLM, SGLang, then LMCache
    SELECT run_id, any_value(experiment) AS experiment,
           arg_min(hit_tokens / query_tokens, CASE engine WHEN 'vllm' THEN 0
               WHEN 'sglang' THEN 1 ELSE 2 END) FILTER (WHERE query_tokens > 0) AS hit_rate
    FROM per_engine
    GROUP BY run_id
), requested AS (
    SELECT run_id, any_value(experiment) AS experiment, sum(cached_tokens) AS hit_tokens,
           sum(input_tokens) FILTER (WHERE cached_tokens IS NOT NULL) AS query_tokens
    FROM request_metrics GROUP BY run_id
    UNION ALL
    SELECT run_id, NULL, sum(cached_tokens),
           sum(input_tokens) FILTER (WHERE cached_tokens IS NOT NULL)
    FROM request_timings GROUP BY run_id
), recorded AS (
    SELECT run_id, any_value(experiment) AS experiment,
           sum(hit_tokens) / nullif(sum(query_tokens), 0) AS hit_rate
    FROM requested GROUP BY run_id
), scraped AS (
    SELECT run_id, min(ts) AS began FROM engine_metrics GROUP BY run_id
), run_ids AS (
    SELECT run_id FROM counted UNION SELECT run_id FROM recorded
)
SELECT i.run_id,
       coalesce(c.experiment, q.experiment, r.collector_config->>'experiment', r.run_name)
           AS experiment,
       coalesce(r.started_at, e.began) AS began,
       CASE WHEN c.hit_rate IS NOT NULL THEN 'engine counters'
            WHEN q.hit_rate IS NOT NULL THEN 'request records' END AS source,
       coalesce(c.hit_rate, q.hit_rate) AS hit_rate
FROM run_ids AS i
LEFT JOIN counted AS c USING (run_id)
LEFT JOIN recorded AS q USING (run_id)
LEFT JOIN scraped AS e USING (run_id)
LEFT JOIN runs AS r USING (run_id);

-- @view _serving_run_prompt_hashes
-- Per run, the distinct prompt fingerprints it saw: the prefix-block hashes of its
-- workload_requests, the block hashes its engines stored (kv_events), the prefix keys of
-- its requests; each kept apart by its source, so only like compares with like.
CREATE VIEW _serving_run_prompt_hashes AS
SELECT DISTINCT run_id, 'workload:' || CAST(unnest(hash_ids) AS VARCHAR) AS fingerprint
FROM workload_requests WHERE hash_ids IS NOT NULL
UNION
SELECT DISTINCT run_id, 'kv:' || block_hash
FROM kv_events WHERE kind = 'stored' AND block_hash IS NOT NULL
UNION
SELECT DISTINCT run_id, 'prefix:' || prefix_key FROM requests WHERE prefix_key IS NOT NULL;

-- @macro serving_warm_cache(min_overlap, min_jump)
-- Every pair of runs of one experiment, the later one beside each earlier one: the share
-- of the later run's prompt fingerprints (prefix-block hashes, stored KV block hashes or
-- prompt prefix keys) the earlier run saw, both runs' prefix-cache hit rates, and a
-- warning when the later run repeats at least `min_overlap` (default 0.5) of them and its
-- hit rate exceeds the earlier run's by at least `min_jump` (default 0.2): it most likely
-- met a cache the earlier run had warmed (restart the server or reset its prefix cache
-- between runs, e.g. vLLM's POST /reset_prefix_cache, SGLang's /flush_cache).
-- @column experiment           the experiment both runs belong to
-- @column earlier_run          the run that began first
-- @column later_run            the run that began after it
-- @column later_fingerprints   distinct prompt fingerprints of the later run (NULL: none recorded)
-- @column overlap_share        share of them the earlier run saw too (NULL: no fingerprints)
-- @column earlier_hit_rate     the earlier run's prefix-cache hit rate (0-1)
-- @column later_hit_rate       the later run's prefix-cache hit rate (0-1)
-- @column hit_rate_jump        later - earlier hit rate
-- @column hit_rate_source      engine counters or request records (the later run's)
-- @column warning              a sentence when both thresholds are met, else NULL
CREATE MACRO serving_warm_cache(min_overlap := 0.5, min_jump := 0.2) AS TABLE
WITH pairs AS (
    SELECT a.experiment, a.run_id AS earlier_run, b.run_id AS later_run,
           a.hit_rate AS earlier_hit_rate, b.hit_rate AS later_hit_rate,
           b.source AS hit_rate_source
    FROM _serving_run_hit_rates AS a
    JOIN _serving_run_hit_rates AS b
      ON a.experiment = b.experiment
     AND (a.began < b.began OR (a.began = b.began AND a.run_id < b.run_id))
), shared AS (
    SELECT p.earlier_run, p.later_run, count(*) AS later_fingerprints,
           count(e.fingerprint) AS repeated
    FROM pairs AS p
    JOIN _serving_run_prompt_hashes AS l ON l.run_id = p.later_run
    LEFT JOIN _serving_run_prompt_hashes AS e
      ON e.run_id = p.earlier_run AND e.fingerprint = l.fingerprint
    GROUP BY p.earlier_run, p.later_run
), judged AS (
    SELECT p.experiment, p.earlier_run, p.later_run, s.later_fingerprints,
           s.repeated / s.later_fingerprints AS overlap_share, p.earlier_hit_rate,
           p.later_hit_rate, p.later_hit_rate - p.earlier_hit_rate AS hit_rate_jump,
           p.hit_rate_source
    FROM pairs AS p LEFT JOIN shared AS s USING (earlier_run, later_run)
)
SELECT *,
       CASE WHEN overlap_share >= min_overlap AND hit_rate_jump >= min_jump THEN printf(
           'run %s repeats %.0f%% of the prompt blocks of run %s and its prefix-cache hit '
           || 'rate rose from %.0f%% to %.0f%%: it likely met a cache the earlier run warmed; '
           || 'reset the prefix cache or restart the server between runs',
           later_run, 100 * overlap_share, earlier_run, 100 * earlier_hit_rate,
           100 * later_hit_rate) END AS warning
FROM judged
ORDER BY experiment, later_run, earlier_run;

-- @view serving_warm_cache_runs
-- serving_warm_cache with its defaults (overlap 0.5, jump 0.2).
-- @columns_of serving_warm_cache
CREATE VIEW serving_warm_cache_runs AS SELECT * FROM serving_warm_cache();
