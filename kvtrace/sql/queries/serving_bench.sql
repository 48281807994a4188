-- The serving-benchmark table: one row per run (a load level), in the layout serving
-- benchmarks print (vLLM's `vllm bench serve`, SGLang's bench_serving, AIPerf).
--
-- Definitions, as those tools compute them from their per-request records:
--   completed / failed: requests without / with an error;
--   duration: the benchmark's recorded duration (vLLM's `duration`), else from the first
--     arrival to the last completion;
--   throughputs: completed requests, input tokens of completed requests, their output
--     tokens, and both together, per second of the duration;
--   TTFT and E2EL: per completed request;
--   TPOT: per completed request with more than one output token,
--     (e2e - ttft) / (output_tokens - 1): the decode time spread over the tokens after
--     the first (vLLM's, SGLang's and AIPerf's "inter token latency");
--   ITL: every gap between streamed chunks of every completed request, pooled (vLLM,
--     SGLang; AIPerf's "inter chunk latency").  A chunk may hold several tokens, so the
--     mean ITL is not the mean TPOT; kvtrace's request_timings.tpot_s of a vLLM file is
--     the request's mean ITL, and this table does not use it;
--   mean, median, std (population, as numpy's) and p90 / p99 (linear interpolation, as
--     numpy's percentile), in milliseconds;
--   goodput: completed requests meeting every SLO given (milliseconds; a request with
--     one output token has TPOT 0, as vLLM counts it) per second of the duration.
--
-- Worked example: two completed requests over a 2 s benchmark, (ttft 0.1 s, e2e 0.5 s,
-- 5 output tokens, ITL [0.1, 0.1, 0.1, 0.1]) and (ttft 0.3 s, e2e 0.3 s, 1 output
-- token): request throughput 1/s, TTFT mean 200 ms, median 200 ms, std 100 ms; TPOT only
-- of the first, (0.5 - 0.1) / 4 = 100 ms; goodput with tpot_slo_ms := 50 is 0.5/s (the
-- second request's TPOT counts as 0).
--
-- @requires tables.sql
-- @requires timings.sql

-- @macro serving_benchmark_table(ttft_slo_ms, tpot_slo_ms, e2e_slo_ms)
-- One row per benchmark or simulator run of request_timings, in the column layout of
-- serving benchmarks (see the definitions above); goodput is NULL without an SLO.
-- @column run_id                     the run
-- @column origin                     measured or simulated
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
CREATE MACRO serving_benchmark_table(ttft_slo_ms := NULL, tpot_slo_ms := NULL,
                                     e2e_slo_ms := NULL) AS TABLE
WITH requests AS (
    SELECT run_id, origin, request_idx, arrival_s, input_tokens, output_tokens, itl_s,
           error IS NULL AS ok, ttft_s, e2e_s,
           CASE WHEN output_tokens > 1 THEN (e2e_s - ttft_s) / (output_tokens - 1) END
               AS tpot_s
    FROM request_timings
), spans AS (
    SELECT run_id, span_s AS duration_s FROM _timing_spans
), gaps AS (
    SELECT run_id, unnest(itl_s) AS itl_s FROM requests WHERE ok
), itl AS (
    SELECT run_id, avg(itl_s) * 1e3 AS mean_itl_ms,
           quantile_cont(itl_s, 0.5) * 1e3 AS median_itl_ms,
           stddev_pop(itl_s) * 1e3 AS std_itl_ms,
           quantile_cont(itl_s, 0.9) * 1e3 AS p90_itl_ms,
           quantile_cont(itl_s, 0.99) * 1e3 AS p99_itl_ms
    FROM gaps GROUP BY run_id
), counted AS (
    SELECT run_id, any_value(origin) AS origin,
           count(*) FILTER (WHERE ok) AS completed,
           count(*) FILTER (WHERE NOT ok) AS failed,
           coalesce(sum(input_tokens) FILTER (WHERE ok), 0) AS total_input_tokens,
           coalesce(sum(output_tokens) FILTER (WHERE ok), 0) AS total_output_tokens,
           count(*) FILTER (
               WHERE ok
               AND (ttft_slo_ms IS NOT NULL OR tpot_slo_ms IS NOT NULL
                    OR e2e_slo_ms IS NOT NULL)
               AND (ttft_slo_ms IS NULL OR ttft_s * 1e3 <= ttft_slo_ms)
               AND (tpot_slo_ms IS NULL OR coalesce(tpot_s, 0) * 1e3 <= tpot_slo_ms)
               AND (e2e_slo_ms IS NULL OR e2e_s * 1e3 <= e2e_slo_ms)
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
    FROM requests GROUP BY run_id
)
SELECT c.run_id, c.origin, c.completed, c.failed, s.duration_s, c.total_input_tokens,
       c.total_output_tokens, c.completed / s.duration_s AS request_throughput,
       CASE WHEN ttft_slo_ms IS NOT NULL OR tpot_slo_ms IS NOT NULL
                 OR e2e_slo_ms IS NOT NULL
            THEN c.good / s.duration_s END AS request_goodput,
       c.total_input_tokens / s.duration_s AS input_throughput,
       c.total_output_tokens / s.duration_s AS output_throughput,
       (c.total_input_tokens + c.total_output_tokens) / s.duration_s
           AS total_token_throughput,
       c.mean_ttft_ms, c.median_ttft_ms, c.std_ttft_ms, c.p90_ttft_ms, c.p99_ttft_ms,
       c.mean_tpot_ms, c.median_tpot_ms, c.std_tpot_ms, c.p90_tpot_ms, c.p99_tpot_ms,
       i.mean_itl_ms, i.median_itl_ms, i.std_itl_ms, i.p90_itl_ms, i.p99_itl_ms,
       c.mean_e2el_ms, c.median_e2el_ms, c.std_e2el_ms, c.p90_e2el_ms, c.p99_e2el_ms
FROM counted AS c
JOIN spans AS s USING (run_id)
LEFT JOIN itl AS i USING (run_id)
ORDER BY c.run_id;
