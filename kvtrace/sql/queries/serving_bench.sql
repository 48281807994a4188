-- The serving-benchmark table: one row per run and load level, in the layout serving
-- benchmarks print (vLLM's `vllm bench serve`, SGLang's bench_serving, AIPerf,
-- GenAI-Perf), over every run that recorded requests: benchmark and simulator results
-- (request_timings), replayed serving requests (request_metrics) and the requests of
-- collected DSA runs (requests, end-to-end latency only).
--
-- Where the tool's own file holds its summary (vLLM's result JSON, SGLang's bench_serving
-- lines, AIPerf's profile_export_aiperf.json, GenAI-Perf's profile_export_genai_perf.json:
-- the benchmark_summaries table), a number it printed is the number shown; what it did not
-- print (a percentile it was not asked for, SGLang's p90, goodput under your SLOs) is
-- computed from the per-request records when the file has them.  `source` says which:
-- requests, summary, or summary+requests.
--
-- Definitions, as the tools compute them from their per-request records (vLLM's
-- calculate_metrics in vllm/benchmarks/serve.py, SGLang's bench_serving, AIPerf's):
--   completed / failed: requests without / with an error (a vLLM request with an empty
--     error but a TTFT of 0 failed: vLLM writes no text for an HTTP error without one);
--   duration: the benchmark's recorded duration (vLLM's `duration`, SGLang's), else from
--     the first arrival to the last completion;
--   throughputs: completed requests, input tokens of completed requests, their output
--     tokens, and both together, per second of the duration;
--   TTFT and E2EL: per completed request; E2EL is the client's end-to-end latency
--     (vLLM's `latencies`; for a file without them, TTFT plus the chunk gaps);
--   TPOT: per completed request with more than one output token,
--     (e2e - ttft) / (output_tokens - 1): the decode time spread over the tokens after
--     the first.  vLLM and SGLang call it TPOT; AIPerf and GenAI-Perf call the same
--     number "inter token latency", and their tpot columns here hold it;
--   ITL: every gap between streamed chunks of every completed request, pooled (vLLM,
--     SGLang; AIPerf's "inter chunk latency").  A chunk may hold several tokens, so the
--     mean ITL is not the mean TPOT.  GenAI-Perf reports no chunk gaps: its ITL columns
--     are NULL;
--   an SGLang file keeps no per-request end-to-end latency: computed, it is TTFT plus the
--     request's chunk gaps (the tool's own adds the wait for the stream's end marker),
--     which is why its printed E2E and TPOT are the ones shown;
--   mean, median, std (population, as numpy's) and p90 / p99 (linear interpolation, as
--     numpy's percentile), in milliseconds.  A statistic of no values is NULL, where
--     vLLM prints 0 (TPOT when every output was one token, TTFT when every request
--     failed): coalesce(mean_tpot_ms, 0) is vLLM's number;
--   goodput: completed requests meeting every SLO given (milliseconds, compared as vLLM
--     compares them: the value in seconds against the SLO / 1000; a request with one
--     output token has TPOT 0, as vLLM counts it) per second of the duration;
--   prefix_hit_rate: cached prompt tokens over the prompt tokens of completed requests,
--     where the run recorded them: SGLang's bench_serving with --cache-report (its
--     cache_report, and per request with --output-details), AIPerf's usage cache reads
--     (profile_export_aiperf.json's overall_usage_prompt_cache_read_pct, over the prompt
--     tokens the server reported; per record usage_prompt_cache_read_tokens, over the
--     record's input_sequence_length), replayed serving requests and collected DSA
--     runs.  vLLM's `vllm bench serve` and GenAI-Perf record no cached tokens: NULL;
--   device_hit_rate, host_hit_rate, storage_hit_rate: the same for the tokens each tier
--     held (SGLang's cached_tokens_details: GPU memory, host memory, the L3 storage
--     backend), over the same prompt tokens, so the three add up to prefix_hit_rate; NULL
--     where no request names the tier (storage without a storage backend; every tier
--     for tools that give no split).  A request with nothing cached counts 0 on the
--     device and host tiers, as SGLang counts it.
--
-- Worked example of the cache columns: an SGLang load level of three completed requests
-- of 1,000 prompt tokens each, cached 600 (device 600, host 0), 300 (device 100, host
-- 200) and 0 (no details: nothing cached): total_cached_tokens 900, prefix_hit_rate
-- 900 / 3,000 = 0.30, device_hit_rate 700 / 3,000 = 0.2333, host_hit_rate 200 / 3,000 =
-- 0.0667, storage_hit_rate NULL (no storage backend named).
--
-- Worked example: two completed requests over a 2 s benchmark, (ttft 0.1 s, e2e 0.5 s,
-- 5 output tokens, ITL [0.1, 0.1, 0.1, 0.1]) and (ttft 0.3 s, e2e 0.3 s, 1 output
-- token): request throughput 1/s, TTFT mean 200 ms, median 200 ms, std 100 ms; TPOT only
-- of the first, (0.5 - 0.1) / 4 = 100 ms; goodput with tpot_slo_ms := 50 is 0.5/s (the
-- second request's TPOT counts as 0).
--
-- @requires runs.sql
-- @requires timing.sql

-- @macro _serving_computed(ttft_slo_ms, tpot_slo_ms, e2e_slo_ms)
-- The benchmark table's numbers computed from the per-request records.
CREATE MACRO _serving_computed(ttft_slo_ms, tpot_slo_ms, e2e_slo_ms) AS TABLE
WITH requests AS (
    SELECT *, CASE WHEN output_tokens > 1 THEN (e2e_s - ttft_s) / (output_tokens - 1) END
                  AS tpot_s
    FROM _serving_requests
), spans AS (
    SELECT run_id, load_level, span_s AS duration_s FROM _timing_spans
), gaps AS (
    SELECT run_id, load_level, unnest(itl_s) AS itl_s FROM requests WHERE ok
), itl AS (
    SELECT run_id, load_level, avg(itl_s) * 1e3 AS mean_itl_ms,
           quantile_cont(itl_s, 0.5) * 1e3 AS median_itl_ms,
           stddev_pop(itl_s) * 1e3 AS std_itl_ms,
           quantile_cont(itl_s, 0.9) * 1e3 AS p90_itl_ms,
           quantile_cont(itl_s, 0.99) * 1e3 AS p99_itl_ms
    FROM gaps GROUP BY run_id, load_level
), counted AS (
    SELECT run_id, load_level, any_value(origin) AS origin,
           count(*) FILTER (WHERE ok) AS completed,
           count(*) FILTER (WHERE NOT ok) AS failed,
           coalesce(sum(input_tokens) FILTER (WHERE ok), 0)::BIGINT AS total_input_tokens,
           coalesce(sum(output_tokens) FILTER (WHERE ok), 0)::BIGINT AS total_output_tokens,
           sum(cached_tokens) FILTER (WHERE ok) AS total_cached_tokens,
           sum(device_cached_tokens) FILTER (WHERE ok) AS device_cached_tokens,
           sum(host_cached_tokens) FILTER (WHERE ok) AS host_cached_tokens,
           sum(storage_cached_tokens) FILTER (WHERE ok) AS storage_cached_tokens,
           nullif(sum(input_tokens) FILTER (WHERE ok AND cached_tokens IS NOT NULL), 0)
               AS _cache_prompt_tokens,
           count(*) FILTER (
               WHERE ok
               AND (ttft_slo_ms IS NULL OR ttft_s <= ttft_slo_ms::DOUBLE / 1000)
               AND (tpot_slo_ms IS NULL OR coalesce(tpot_s, 0) <= tpot_slo_ms::DOUBLE / 1000)
               AND (e2e_slo_ms IS NULL OR e2e_s <= e2e_slo_ms::DOUBLE / 1000)
           ) AS good,
           avg(ttft_s) FILTER (WHERE ok) * 1e3 AS mean_ttft_ms,
           quantile_cont(ttft_s, 0.5) FILTER (WHERE ok) * 1e3 AS median_ttft_ms,
           stddev_pop(ttft_s) FILTER (WHERE ok) * 1e3 AS std_ttft_ms,
           quantile_cont(ttft_s, 0.9) FILTER (WHERE ok) * 1e3 AS p90_ttft_ms,
           quantile_cont(ttft_s, 0.99) FILTER (WHERE ok) * 1e3 AS p99_ttft_ms,
           avg(tpot_s) FILTER (WHERE ok) * 1e3 AS mean_tpot_ms,
           quantile_cont(tpot_s, 0.5) FILTER (WHERE ok) * 1e3 AS median_tpot_ms,
           stddev_pop(tpot_s) FILTER (WHERE ok) * 1e3 AS std_tpot_ms,
           quantile_cont(tpot_s, 0.9) FILTER (WHERE ok) * 1e3 AS p90_tpot_ms,
           quantile_cont(tpot_s, 0.99) FILTER (WHERE ok) * 1e3 AS p99_tpot_ms,
           avg(e2e_s) FILTER (WHERE ok) * 1e3 AS mean_e2el_ms,
           quantile_cont(e2e_s, 0.5) FILTER (WHERE ok) * 1e3 AS median_e2el_ms,
           stddev_pop(e2e_s) FILTER (WHERE ok) * 1e3 AS std_e2el_ms,
           quantile_cont(e2e_s, 0.9) FILTER (WHERE ok) * 1e3 AS p90_e2el_ms,
           quantile_cont(e2e_s, 0.99) FILTER (WHERE ok) * 1e3 AS p99_e2el_ms
    FROM requests GROUP BY run_id, load_level
)
SELECT c.* EXCLUDE (_cache_prompt_tokens),
       c.total_cached_tokens / c._cache_prompt_tokens AS prefix_hit_rate,
       c.device_cached_tokens / c._cache_prompt_tokens AS device_hit_rate,
       c.host_cached_tokens / c._cache_prompt_tokens AS host_hit_rate,
       c.storage_cached_tokens / c._cache_prompt_tokens AS storage_hit_rate,
       s.duration_s, i.* EXCLUDE (run_id, load_level)
FROM counted AS c
JOIN spans AS s USING (run_id, load_level)
LEFT JOIN itl AS i USING (run_id, load_level);

-- @macro serving_benchmark_table(ttft_slo_ms, tpot_slo_ms, e2e_slo_ms)
-- One row per run and load level, in the column layout of serving benchmarks (see the
-- definitions above); goodput is NULL without an SLO or without per-request records.
-- @column run_id                     the run
-- @column load_level                 the load level within the run (0 for one-level formats)
-- @column origin                     measured or simulated
-- @column source                     requests, summary (the tool's printed numbers) or both
-- @column request_rate               the request rate asked for (inf: all at once), when recorded
-- @column max_concurrency            the concurrency limit, when recorded
-- @column completed                  requests without an error
-- @column failed                     requests with an error
-- @column duration_s                 the benchmark's duration
-- @column total_input_tokens         input tokens of completed requests
-- @column total_output_tokens        output tokens of completed requests
-- @column request_throughput         completed requests per second
-- @column request_goodput            completed requests meeting every SLO per second
-- @column input_throughput           input tokens per second
-- @column output_throughput          output tokens per second
-- @column total_token_throughput     input and output tokens per second
-- @column mean_ttft_ms               time to first token: mean
-- @column median_ttft_ms             median
-- @column std_ttft_ms                standard deviation
-- @column p90_ttft_ms                90th percentile
-- @column p99_ttft_ms                99th percentile
-- @column mean_tpot_ms               time per output token after the first: mean
-- @column median_tpot_ms             median
-- @column std_tpot_ms                standard deviation
-- @column p90_tpot_ms                90th percentile
-- @column p99_tpot_ms                99th percentile
-- @column mean_itl_ms                inter-token (chunk) latency: mean
-- @column median_itl_ms              median
-- @column std_itl_ms                 standard deviation
-- @column p90_itl_ms                 90th percentile
-- @column p99_itl_ms                 99th percentile
-- @column mean_e2el_ms               end-to-end latency: mean
-- @column median_e2el_ms             median
-- @column std_e2el_ms                standard deviation
-- @column p90_e2el_ms                90th percentile
-- @column p99_e2el_ms                99th percentile
-- @column prefix_hit_rate            cached prompt tokens / prompt tokens, where recorded
-- @column device_hit_rate            tokens the GPU's cache held / prompt tokens (SGLang)
-- @column host_hit_rate              tokens the host-memory tier held / prompt tokens (SGLang)
-- @column storage_hit_rate           tokens the L3 storage backend held / prompt tokens (SGLang)
-- @column total_cached_tokens        cached prompt tokens of completed requests, where recorded
-- @column device_cached_tokens       of them, held by the GPU's cache (SGLang)
-- @column host_cached_tokens         of them, held by the host-memory tier (SGLang)
-- @column storage_cached_tokens      of them, held by the L3 storage backend (SGLang)
CREATE MACRO serving_benchmark_table(ttft_slo_ms := NULL, tpot_slo_ms := NULL,
                                     e2e_slo_ms := NULL) AS TABLE
WITH c AS (
    SELECT * FROM _serving_computed(ttft_slo_ms, tpot_slo_ms, e2e_slo_ms)
), t AS (
    SELECT * FROM benchmark_summaries
), joined AS (
    SELECT coalesce(c.run_id, t.run_id) AS run_id,
           coalesce(c.load_level, t.load_level) AS load_level,
           c.run_id IS NOT NULL AS has_requests, t.run_id IS NOT NULL AS has_summary,
           c.origin, c.good,
           coalesce(t.prefix_hit_rate, c.prefix_hit_rate) AS prefix_hit_rate,
           coalesce(t.device_hit_rate, c.device_hit_rate) AS device_hit_rate,
           coalesce(t.host_hit_rate, c.host_hit_rate) AS host_hit_rate,
           coalesce(t.storage_hit_rate, c.storage_hit_rate) AS storage_hit_rate,
           coalesce(t.total_cached_tokens, c.total_cached_tokens) AS total_cached_tokens,
           coalesce(t.device_cached_tokens, c.device_cached_tokens) AS device_cached_tokens,
           coalesce(t.host_cached_tokens, c.host_cached_tokens) AS host_cached_tokens,
           coalesce(t.storage_cached_tokens, c.storage_cached_tokens)
               AS storage_cached_tokens,
           coalesce(t.completed, c.completed) AS completed,
           coalesce(t.failed, c.failed) AS failed,
           coalesce(t.duration_s, c.duration_s) AS duration_s,
           coalesce(t.total_input_tokens, c.total_input_tokens) AS total_input_tokens,
           coalesce(t.total_output_tokens, c.total_output_tokens) AS total_output_tokens,
           t.request_rate, t.max_concurrency, t.request_throughput, t.input_throughput,
           t.output_throughput, t.total_token_throughput,
           coalesce(t.mean_ttft_ms, c.mean_ttft_ms) AS mean_ttft_ms,
           coalesce(t.median_ttft_ms, c.median_ttft_ms) AS median_ttft_ms,
           coalesce(t.std_ttft_ms, c.std_ttft_ms) AS std_ttft_ms,
           coalesce(t.p90_ttft_ms, c.p90_ttft_ms) AS p90_ttft_ms,
           coalesce(t.p99_ttft_ms, c.p99_ttft_ms) AS p99_ttft_ms,
           coalesce(t.mean_tpot_ms, c.mean_tpot_ms) AS mean_tpot_ms,
           coalesce(t.median_tpot_ms, c.median_tpot_ms) AS median_tpot_ms,
           coalesce(t.std_tpot_ms, c.std_tpot_ms) AS std_tpot_ms,
           coalesce(t.p90_tpot_ms, c.p90_tpot_ms) AS p90_tpot_ms,
           coalesce(t.p99_tpot_ms, c.p99_tpot_ms) AS p99_tpot_ms,
           coalesce(t.mean_itl_ms, c.mean_itl_ms) AS mean_itl_ms,
           coalesce(t.median_itl_ms, c.median_itl_ms) AS median_itl_ms,
           coalesce(t.std_itl_ms, c.std_itl_ms) AS std_itl_ms,
           coalesce(t.p90_itl_ms, c.p90_itl_ms) AS p90_itl_ms,
           coalesce(t.p99_itl_ms, c.p99_itl_ms) AS p99_itl_ms,
           coalesce(t.mean_e2el_ms, c.mean_e2el_ms) AS mean_e2el_ms,
           coalesce(t.median_e2el_ms, c.median_e2el_ms) AS median_e2el_ms,
           coalesce(t.std_e2el_ms, c.std_e2el_ms) AS std_e2el_ms,
           coalesce(t.p90_e2el_ms, c.p90_e2el_ms) AS p90_e2el_ms,
           coalesce(t.p99_e2el_ms, c.p99_e2el_ms) AS p99_e2el_ms
    FROM c FULL JOIN t USING (run_id, load_level)
)
SELECT j.run_id, j.load_level, coalesce(j.origin, 'measured') AS origin,
       CASE WHEN j.has_requests AND j.has_summary THEN 'summary+requests'
            WHEN j.has_summary THEN 'summary' ELSE 'requests' END AS source,
       coalesce(j.request_rate,
                try_cast(json_extract_string(r.collector_config, '$.request_rate') AS DOUBLE))
           AS request_rate,
       coalesce(j.max_concurrency,
                try_cast(json_extract_string(r.collector_config, '$.max_concurrency')
                         AS BIGINT)) AS max_concurrency,
       j.completed, j.failed, j.duration_s, j.total_input_tokens, j.total_output_tokens,
       coalesce(j.request_throughput, j.completed / j.duration_s) AS request_throughput,
       CASE WHEN ttft_slo_ms IS NOT NULL OR tpot_slo_ms IS NOT NULL
                 OR e2e_slo_ms IS NOT NULL
            THEN j.good / j.duration_s END AS request_goodput,
       coalesce(j.input_throughput, j.total_input_tokens / j.duration_s) AS input_throughput,
       coalesce(j.output_throughput, j.total_output_tokens / j.duration_s)
           AS output_throughput,
       coalesce(j.total_token_throughput,
                (j.total_input_tokens + j.total_output_tokens) / j.duration_s)
           AS total_token_throughput,
       j.* EXCLUDE (run_id, load_level, has_requests, has_summary, origin, good,
                    prefix_hit_rate, device_hit_rate, host_hit_rate, storage_hit_rate,
                    total_cached_tokens, device_cached_tokens, host_cached_tokens,
                    storage_cached_tokens, completed, failed, duration_s,
                    total_input_tokens, total_output_tokens, request_rate, max_concurrency,
                    request_throughput, input_throughput, output_throughput,
                    total_token_throughput),
       j.prefix_hit_rate, j.device_hit_rate, j.host_hit_rate, j.storage_hit_rate,
       j.total_cached_tokens, j.device_cached_tokens, j.host_cached_tokens,
       j.storage_cached_tokens
FROM joined AS j
LEFT JOIN runs AS r USING (run_id)
ORDER BY j.run_id, j.load_level;

-- @view serving_benchmark
-- @alias latency_summary
-- @alias request_latency_summary
-- @alias timing_latency_summary
-- serving_benchmark_table() without SLOs: every run's benchmark rows.
-- @columns_of serving_benchmark_table
CREATE VIEW serving_benchmark AS
SELECT * FROM serving_benchmark_table();
