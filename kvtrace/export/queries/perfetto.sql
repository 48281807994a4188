-- Queries of `kvtrace export perfetto`: the rows of one run that become trace events.
--
-- Each query reads the run named by the parameter $run (a run id) and nothing else;
-- kvtrace turns its rows into Chrome trace events (`kvtrace.export.perfetto`).  Times
-- come out in microseconds: profiler rows on the profiler's own clock, as recorded;
-- wall-clock rows from 0 at their run's start, each table as it counts its run's time
-- (the t_s of pool snapshots, engine metrics and serving counters, KV events from the
-- run's first batch, DSA steps from the run's first traced step, requests from their
-- arrival_s).
--
-- Worked example (dsa_layer_steps): a run whose batched decode step 0 starts at
-- ts_us 5,000,000 and takes 800 us for requests 1 and 2, each selecting 3 blocks of
-- layer 0 at block size 64 and reading 3 x 8,192 bytes from HBM, and whose step 1 starts
-- at 5,001,000: layer 0 gets two rows, t_us 0 (dur 800, requests 2, unique_blocks 6,
-- fetch_bytes 49,152) and t_us 1,000.

-- @query source_rows
-- How many rows with a time the run has for each source (its column), so that a run
-- with nothing to draw is told before anything is written.
-- Columns: profiler, counters, dsa, pool, engine, serving, kv, requests.
SELECT
    (SELECT count(*) FROM _timeline_events_files WHERE run_id = $run) AS profiler,
    (SELECT count(*) FROM timeline_counters WHERE run_id = $run AND value IS NOT NULL)
        AS counters,
    (SELECT count(ts_us) FROM dsa_steps WHERE run_id = $run) AS dsa,
    (SELECT count(*) FROM pool_snapshots WHERE run_id = $run AND t_s IS NOT NULL) AS pool,
    (SELECT count(*) FROM engine_metrics  -- the samples engine_samples draws
     WHERE run_id = $run AND value IS NOT NULL AND t_s IS NOT NULL
       AND (type IN ('counter', 'gauge', 'unknown')
            OR (type IN ('histogram', 'summary', 'gaugehistogram')
                AND (suffix(metric, '_sum') OR suffix(metric, '_count'))))) AS engine,
    (SELECT count(*) FROM serving_counters WHERE run_id = $run AND t_s IS NOT NULL)
        AS serving,
    (SELECT count(*) FROM kv_events WHERE run_id = $run AND kind IN ('stored', 'removed'))
        AS kv,
    (SELECT count(*) FROM request_timings WHERE run_id = $run AND arrival_s IS NOT NULL)
    + (SELECT count(*) FROM request_metrics WHERE run_id = $run AND arrival_s IS NOT NULL)
    + (SELECT count(*) FROM requests WHERE run_id = $run AND arrival_s IS NOT NULL)
        AS requests;

-- @query profiler_processes
-- The processes of the run's profiler traces, one per (rank, pid), from the events and
-- the counters both.
-- Columns: rank, pid.
SELECT rank, pid
FROM (
    SELECT rank, pid FROM _timeline_events_files WHERE run_id = $run
    UNION
    SELECT rank, pid FROM timeline_counters WHERE run_id = $run
)
ORDER BY rank NULLS FIRST, TRY_CAST(pid AS BIGINT) NULLS LAST, pid;

-- @query profiler_streams
-- The threads of GPU events and the CUDA stream each ran on (named after it).
-- Columns: rank, pid, tid, stream.
SELECT rank, pid, tid, min(stream) AS stream
FROM _timeline_events_files
WHERE run_id = $run AND stream IS NOT NULL
GROUP BY rank, pid, tid
ORDER BY rank NULLS FIRST, pid, tid;

-- @query profiler_events
-- Every complete event of the run's profiler traces, as stored, in file order.
-- Columns: rank, pid, tid, category, name, ts_us, dur_us and the ids, stream, device,
-- bytes and bandwidth Kineto writes in args.
SELECT rank, pid, tid, category, name, ts_us, dur_us, stream, device, correlation,
       external_id, bytes, wait_on_stream, wait_on_correlation, memory_bw_gbps
FROM _timeline_events_files
WHERE run_id = $run;

-- @query profiler_counters
-- The run's profiler counter values (timeline_counters) with a value, in file order:
-- one row per (counter event, series).
-- Columns: rank, pid, counter, series, labels, ts_us, value, event_idx.
SELECT rank, pid, counter, series, labels, ts_us, value, event_idx
FROM timeline_counters
WHERE run_id = $run AND value IS NOT NULL
ORDER BY rank NULLS FIRST, event_idx, ts_us, series;

-- @query dsa_block_sizes
-- The block sizes the run's DSA steps are stored at, with how many rows have a step
-- time (ts_us) and how many have none.
-- Columns: block_size, timed, untimed.
SELECT block_size, count(ts_us) AS timed, count(*) - count(ts_us) AS untimed
FROM dsa_steps
WHERE run_id = $run
GROUP BY block_size
ORDER BY block_size;

-- @query dsa_layer_steps
-- One row per (step, layer): the decode rows at block size
-- getvariable('kvtrace_export_block_size') and the prefill chunks (dsa_prefill) of each
-- step, the requests of a batched step summed (a step that mixes both gives a row of
-- each).  t_us counts from the run's first traced step, decode or prefill; dur_us is the
-- step's wall time (all layers; NULL when not measured).
-- Columns: phase (decode or prefill), layer_id, t_us, dur_us, batch_step, requests,
-- unique_blocks, hbm_bytes, local_pool_bytes, remote_pool_bytes, fetch_bytes (their sum;
-- NULL when no tier read), query_tokens (prefill: the chunks' query tokens).
WITH decode AS (
    SELECT 'decode' AS phase, ts_us, layer_id, min(batch_step) AS batch_step,
           max(step_latency_us) AS dur_us, count(*) AS requests,
           sum(unique_blocks)::BIGINT AS unique_blocks,
           sum(hbm_bytes_read)::BIGINT AS hbm_bytes,
           sum(local_pool_bytes_read)::BIGINT AS local_pool_bytes,
           sum(remote_pool_bytes_read)::BIGINT AS remote_pool_bytes,
           NULL::BIGINT AS query_tokens
    FROM dsa_steps
    WHERE run_id = $run AND block_size = getvariable('kvtrace_export_block_size')
      AND ts_us IS NOT NULL
    GROUP BY ts_us, layer_id
), prefill AS (
    SELECT 'prefill', ts_us, layer_id, min(batch_step), max(step_latency_us), count(*),
           NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT,
           sum(query_end - query_start)::BIGINT
    FROM dsa_prefill
    WHERE run_id = $run AND ts_us IS NOT NULL
    GROUP BY ts_us, layer_id
), steps AS (
    SELECT * FROM decode UNION ALL SELECT * FROM prefill
)
SELECT phase, layer_id, ts_us - min(ts_us) OVER () AS t_us, dur_us, batch_step, requests,
       unique_blocks, hbm_bytes, local_pool_bytes, remote_pool_bytes,
       CASE WHEN hbm_bytes IS NULL AND local_pool_bytes IS NULL AND remote_pool_bytes IS NULL
            THEN NULL
            ELSE coalesce(hbm_bytes, 0) + coalesce(local_pool_bytes, 0)
                 + coalesce(remote_pool_bytes, 0)
       END AS fetch_bytes,
       query_tokens
FROM steps
ORDER BY t_us, layer_id, phase DESC;

-- @query pool_ticks
-- The run's pool snapshots per worker and tick, with other = capacity - held -
-- available (NULL when a counter is missing) and the poll error of a failed tick.
-- Columns: worker_id, t_s, capacity_tokens, held_tokens, available_tokens,
-- other_tokens, idle_evictable_tokens, session_count, running_batch_size, poll_error.
SELECT worker_id, t_s, capacity_tokens, held_tokens, available_tokens,
       capacity_tokens - held_tokens - available_tokens AS other_tokens,
       idle_evictable_tokens, session_count, running_batch_size, poll_error
FROM pool_snapshots
WHERE run_id = $run AND t_s IS NOT NULL
ORDER BY worker_id, t_s;

-- @query engine_samples
-- The run's scraped samples that draw as counters: counters, gauges and untyped
-- samples, and the _sum and _count of histograms and summaries (their buckets and
-- quantiles are left out), with a value.
-- Columns: worker_id, t_s, metric, labels, value.
SELECT worker_id, t_s, metric, labels, value
FROM engine_metrics
WHERE run_id = $run AND value IS NOT NULL AND t_s IS NOT NULL
  AND (type IN ('counter', 'gauge', 'unknown')
       OR (type IN ('histogram', 'summary', 'gaugehistogram')
           AND (suffix(metric, '_sum') OR suffix(metric, '_count'))))
ORDER BY worker_id, t_s, metric, labels;

-- @query serving_quantities
-- The run's engine counters in kvtrace's terms (serving_counters): per worker, scrape and
-- quantity (and part), a gauge's value, and for a counter the run's own traffic so far
-- (its per-scrape increases summed from 0 at the run's first scrape, resets handled).
-- Columns: worker_id, t_s, quantity, part, value.
SELECT worker_id, t_s, quantity, part, value
FROM (
    SELECT worker_id, t_s, quantity, part,
           CASE WHEN kind = 'counter'
                THEN sum(coalesce(delta, 0)) OVER (
                    PARTITION BY worker_id, quantity, part ORDER BY ts
                    ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
                ELSE value
           END AS value
    FROM serving_counters
    WHERE run_id = $run AND t_s IS NOT NULL
)
WHERE value IS NOT NULL
ORDER BY worker_id, t_s, quantity, part NULLS FIRST;

-- @query kv_residency
-- Blocks resident in each worker's pool per medium, per bucket of
-- getvariable('kvtrace_export_bucket_s') seconds (kv_pool_residency: the blocks held at
-- the bucket's end), t_s from the run's first batch.
-- Columns: worker, medium, t_s, resident_blocks.
SELECT worker, medium, t_s, resident_blocks::BIGINT AS resident_blocks
FROM kv_pool_residency(getvariable('kvtrace_export_bucket_s'))
WHERE run_id = $run
ORDER BY worker, medium NULLS FIRST, t_s;

-- @query request_spans
-- The run's requests with an arrival time, from benchmarks (request_timings, per load
-- level), replayed serving requests (request_metrics) and traced runs (requests), in
-- arrival order.  latency_s is NULL when the request never finished.
-- Columns: origin (the table), load_level, levels (whether the table holds several load
-- levels of the run), request, arrival_s, ttft_s, latency_s, input_tokens, output_tokens,
-- error.
SELECT origin, load_level,
       max(load_level) OVER same_table > min(load_level) OVER same_table AS levels,
       request, arrival_s, ttft_s, latency_s, input_tokens, output_tokens, error
FROM (
    SELECT 'request_timings' AS origin, load_level, CAST(request_idx AS VARCHAR) AS request,
           request_idx AS place, arrival_s, ttft_s, e2e_s AS latency_s, input_tokens,
           output_tokens, error
    FROM request_timings
    WHERE run_id = $run AND arrival_s IS NOT NULL
    UNION ALL
    SELECT 'request_metrics', 0, request_id, NULL, arrival_s, ttft_s, latency_s, input_tokens,
           output_tokens, CASE WHEN is_error THEN coalesce(error_type, 'error') END
    FROM request_metrics
    WHERE run_id = $run AND arrival_s IS NOT NULL
    UNION ALL
    SELECT 'requests', 0, CAST(request_id AS VARCHAR), request_id, arrival_s, NULL,
           coalesce(finish_s - arrival_s, latency_ms / 1e3), prompt_tokens, new_tokens,
           CASE WHEN status = 'error' THEN status END
    FROM requests
    WHERE run_id = $run AND arrival_s IS NOT NULL
)
WINDOW same_table AS (PARTITION BY origin)
ORDER BY origin, load_level, arrival_s, place, request;

-- @query untimed_requests
-- The run's requests without an arrival time, which draw nowhere.
-- Columns: requests.
SELECT (SELECT count(*) FROM request_timings WHERE run_id = $run AND arrival_s IS NULL)
     + (SELECT count(*) FROM request_metrics WHERE run_id = $run AND arrival_s IS NULL)
     + (SELECT count(*) FROM requests WHERE run_id = $run AND arrival_s IS NULL
                                        AND latency_ms IS NOT NULL) AS requests;
