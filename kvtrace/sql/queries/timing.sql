-- Per-request latencies of benchmarks and simulators: percentiles, SLOs, fidelity.
--
-- request_timings holds measured runs (vLLM's `vllm bench serve` results, SGLang's
-- bench_serving details, AIPerf's records) and simulated ones (Vidur's request metrics)
-- in one shape: TTFT, time per output token (TPOT: the decode time over the output
-- tokens after the first, (e2e - ttft) / (output tokens - 1), as vLLM computes it; the
-- tool's own number for AIPerf and Vidur), e2e latency, scheduling delay and
-- preemptions, in seconds.  Percentiles are linear-interpolated and leave out
-- failed requests.  SLO attainment counts the requests that meet every SLO given (a NULL
-- SLO is not checked; a failed request meets none; a request without a TPOT, of one
-- output token, has TPOT 0 as vLLM counts it); goodput is those requests per second
-- of the run, its span being the benchmark's duration when the run records one, else
-- from the first arrival to the last completion.
--
-- Worked example of fidelity: a measured TTFT p50 of 0.20 s against a simulated 0.25 s
-- is a relative error of (0.25 - 0.20) / 0.20 = +25 %.
--
-- @requires eval.sql
-- @requires request.sql
-- @requires runs.sql

-- @view request_timings
-- One row per request of a benchmark or simulator run.
-- @column run_id              the run
-- @column load_level          the load level within the run (a line of an SGLang
--                             bench_serving file), 0 for one-level formats
-- @column request_idx         the request's index in the result file
-- @column origin              measured or simulated
-- @column arrival_s           arrival time, when the source records it
-- @column input_tokens        prompt tokens
-- @column output_tokens       generated tokens
-- @column ttft_s              time to first token
-- @column itl_s               inter-token latencies, when recorded
-- @column tpot_s              time per output token after the first (NULL for one token)
-- @column e2e_s               end-to-end latency
-- @column scheduling_delay_s  time from arrival to first scheduling (simulators)
-- @column preemptions         restarts of the request (simulators)
-- @column error               the error of a failed request, else NULL
-- @column cached_tokens        prompt tokens the server found cached, where the tool
--                              recorded them (SGLang --cache-report, AIPerf's
--                              usage_prompt_cache_read_tokens), else NULL
-- @column device_cached_tokens of them, tokens the GPU's cache held (SGLang's
--                              cached_tokens_details), else NULL
-- @column host_cached_tokens   of them, tokens the host-memory tier held (SGLang)
-- @column storage_cached_tokens of them, tokens the L3 storage backend held (SGLang,
--                              with a storage backend)
CREATE VIEW request_timings AS
SELECT * EXCLUDE (_row) REPLACE (coalesce(load_level, 0) AS load_level)
FROM (
    SELECT *, row_number() OVER (
        PARTITION BY run_id, coalesce(load_level, 0), request_idx
    ) AS _row
    FROM _request_timings_files
)
WHERE _row = 1;

-- @view benchmark_summaries
-- What a serving benchmark printed for a load level, when its file holds its summary
-- (vLLM's result JSON, SGLang's bench_serving lines, AIPerf's and GenAI-Perf's JSON
-- exports), in the column names of serving_benchmark_table; NULL where the tool does not
-- report a number.
-- @column run_id                  the run
-- @column load_level              the load level within the run, as in request_timings
-- @column tool                    vllm, sglang, aiperf or genai-perf
-- @column request_rate            the request rate asked for (inf: all at once)
-- @column max_concurrency         the concurrency limit
-- @column completed               completed requests
-- @column failed                  failed requests
-- @column duration_s              the benchmark's duration
-- @column total_input_tokens      input tokens of completed requests
-- @column total_output_tokens     output tokens of completed requests
-- @column request_throughput      requests per second
-- @column input_throughput        input tokens per second
-- @column output_throughput       output tokens per second
-- @column total_token_throughput  input and output tokens per second
-- @column mean_ttft_ms            TTFT: mean
-- @column median_ttft_ms          median
-- @column std_ttft_ms             standard deviation
-- @column p90_ttft_ms             90th percentile
-- @column p99_ttft_ms             99th percentile
-- @column mean_tpot_ms            TPOT: mean
-- @column median_tpot_ms          median
-- @column std_tpot_ms             standard deviation
-- @column p90_tpot_ms             90th percentile
-- @column p99_tpot_ms             99th percentile
-- @column mean_itl_ms             ITL: mean
-- @column median_itl_ms           median
-- @column std_itl_ms              standard deviation
-- @column p90_itl_ms              90th percentile
-- @column p99_itl_ms              99th percentile
-- @column mean_e2el_ms            end-to-end latency: mean
-- @column median_e2el_ms          median
-- @column std_e2el_ms             standard deviation
-- @column p90_e2el_ms             90th percentile
-- @column p99_e2el_ms             99th percentile
-- @column total_cached_tokens     cached prompt tokens the tool counted (SGLang
--                                 --cache-report, AIPerf), else NULL
-- @column device_cached_tokens    of them, held by the GPU's cache (SGLang)
-- @column host_cached_tokens      of them, held by the host-memory tier (SGLang)
-- @column storage_cached_tokens   of them, held by the L3 storage backend (SGLang)
-- @column prefix_hit_rate         cached prompt tokens / the prompt tokens the tool
--                                 counted them against
-- @column device_hit_rate         device-tier cached tokens / those prompt tokens
-- @column host_hit_rate           host-tier cached tokens / those prompt tokens
-- @column storage_hit_rate        storage-tier cached tokens / those prompt tokens
CREATE VIEW benchmark_summaries AS
SELECT * EXCLUDE (_row)
FROM (
    SELECT *, row_number() OVER (PARTITION BY run_id, load_level) AS _row
    FROM _benchmark_summaries_files
)
WHERE _row = 1;

-- @view batch_metrics
-- One row per batch a simulator scheduled.
-- @column run_id            the run
-- @column batch_idx         the batch's index in the file
-- @column batch_size        requests in the batch
-- @column prefill_tokens    prefill tokens in the batch
-- @column decode_tokens     decode tokens in the batch
-- @column execution_time_s  the batch's execution time
CREATE VIEW batch_metrics AS
SELECT DISTINCT * FROM _batch_metrics_files;

-- @view _timing_long
-- Every successful request's latencies, one row per (request, metric).
CREATE VIEW _timing_long AS
UNPIVOT (SELECT run_id, load_level, request_idx, ttft_s AS ttft, tpot_s AS tpot, e2e_s AS e2e
         FROM request_timings WHERE error IS NULL)
ON ttft, tpot, e2e INTO NAME metric VALUE seconds;

-- @view _serving_requests
-- Every request of every run that recorded requests, in one shape: benchmark and
-- simulator results, replayed serving requests and the requests of collected DSA runs,
-- with their cached prompt tokens where recorded (by tier: benchmark results only).
CREATE VIEW _serving_requests AS
SELECT run_id, load_level, origin, arrival_s, input_tokens, output_tokens, itl_s,
       error IS NULL AS ok, ttft_s, e2e_s, cached_tokens, device_cached_tokens,
       host_cached_tokens, storage_cached_tokens
FROM request_timings
UNION ALL
SELECT run_id, 0, 'measured', arrival_s, input_tokens, output_tokens, NULL, NOT is_error,
       ttft_s, latency_s, cached_tokens, NULL, NULL, NULL
FROM request_metrics
UNION ALL
SELECT run_id, 0, 'measured', arrival_s, prompt_tokens, new_tokens, NULL,
       status IS DISTINCT FROM 'error', NULL, latency_ms / 1e3, prefix_cached_tokens,
       NULL, NULL, NULL
FROM requests
WHERE latency_ms IS NOT NULL;

-- @view _timing_spans
-- Per run and load level of every run with requests: its span, the benchmark's recorded
-- duration when a one-level run has one, else from the first arrival to the last
-- completion.
CREATE VIEW _timing_spans AS
SELECT q.run_id, q.load_level,
       coalesce(CASE WHEN q.load_level = 0
                     THEN try_cast(json_extract_string(any_value(r.collector_config),
                                                       '$.duration_s') AS DOUBLE) END,
                max(q.arrival_s + q.e2e_s) - min(q.arrival_s)) AS span_s
FROM _serving_requests AS q
LEFT JOIN runs AS r USING (run_id)
GROUP BY q.run_id, q.load_level;

-- @view _timing_percentiles
-- Latency percentiles per run and metric of successful requests (the fidelity table's
-- input; serving_benchmark has them in the layout benchmarks print).
CREATE VIEW _timing_percentiles AS
SELECT run_id, metric, quantile_cont(seconds, 0.5) AS p50_s,
       quantile_cont(seconds, 0.9) AS p90_s, quantile_cont(seconds, 0.99) AS p99_s
FROM _timing_long
GROUP BY run_id, metric;

-- @macro timing_slo_attainment(ttft_slo_s, tpot_slo_s, e2e_slo_s)
-- @alias slo_attainment
-- Per run and load level: the share of requests meeting every given SLO (seconds; NULL
-- skips one) and goodput, those requests per second of the run.
-- @column run_id        the run
-- @column load_level    the load level within the run
-- @column requests      requests, failed ones included
-- @column failed        failed requests
-- @column met           requests meeting every SLO
-- @column attainment    met / requests
-- @column span_s        the run's span: its recorded duration, else first arrival to last completion
-- @column goodput_per_s met / span_s
CREATE MACRO timing_slo_attainment(ttft_slo_s := NULL, tpot_slo_s := NULL, e2e_slo_s := NULL)
AS TABLE
WITH judged AS (
    SELECT run_id, load_level, arrival_s, e2e_s, error IS NOT NULL AS failed,
           error IS NULL
           AND (ttft_slo_s IS NULL OR ttft_s <= ttft_slo_s)
           AND (tpot_slo_s IS NULL OR coalesce(tpot_s, 0) <= tpot_slo_s)
           AND (e2e_slo_s IS NULL OR e2e_s <= e2e_slo_s) AS met
    FROM request_timings
)
SELECT j.run_id, j.load_level, count(*) AS requests, count(*) FILTER (WHERE j.failed) AS failed,
       count(*) FILTER (WHERE j.met) AS met,
       count(*) FILTER (WHERE j.met) / count(*) AS attainment,
       any_value(s.span_s) AS span_s,
       count(*) FILTER (WHERE j.met) / nullif(any_value(s.span_s), 0) AS goodput_per_s
FROM judged AS j
JOIN _timing_spans AS s USING (run_id, load_level)
GROUP BY j.run_id, j.load_level
ORDER BY j.run_id, j.load_level;

-- @macro timing_fidelity(measured, simulated)
-- A simulated run against a measured one (runs by name or id), percentile by percentile:
-- the fidelity table of simulator papers.
-- @column metric       ttft, tpot or e2e
-- @column percentile   p50, p90 or p99
-- @column measured_s   the measured run's value
-- @column simulated_s  the simulated run's value
-- @column rel_error    (simulated - measured) / measured
CREATE MACRO timing_fidelity(measured, simulated) AS TABLE
WITH picked AS (
    SELECT 'measured' AS side, * FROM _timing_percentiles
    WHERE run_id = _eval_run(measured)
    UNION ALL
    SELECT 'simulated' AS side, * FROM _timing_percentiles
    WHERE run_id = _eval_run(simulated)
), long AS (
    UNPIVOT (SELECT side, metric, p50_s AS p50, p90_s AS p90, p99_s AS p99 FROM picked)
    ON p50, p90, p99 INTO NAME percentile VALUE seconds
)
SELECT m.metric, m.percentile, m.seconds AS measured_s, s.seconds AS simulated_s,
       (s.seconds - m.seconds) / nullif(m.seconds, 0) AS rel_error
FROM long AS m
JOIN long AS s USING (metric, percentile)
WHERE m.side = 'measured' AND s.side = 'simulated'
ORDER BY m.metric, m.percentile;

-- @macro timing_cost_model(source)
-- @alias batch_cost_model
-- Per run: batch (or step) time fitted by least squares on the work it did, as
-- intercept + per-token costs + a quadratic prefill-attention term
-- (kvtrace/analysis/cost_model.py).  source 'batches' (the default) fits simulator
-- batches on prefill and decode tokens and the sum of squared prompt lengths of the
-- batch's prefill requests; 'dsa' fits traced DSA decode steps on their requests and the
-- KV tokens their selections read.  A term without variation in a run is NULL.  The
-- squared term needs each prefill request's length: batch_metrics holds batch totals, so
-- it is known for a batch of at most one prefill request (batch_size - decode_tokens),
-- as prefill_tokens^2; a run with a batch of several prefill requests has it NULL.
-- Leave-one-out errors are exact (residual / (1 - leverage), no refitting).
-- Example: batches (prefill, decode, seconds) (100, 0, 0.010), (0, 4, 0.0028),
-- (200, 0, 0.030), (0, 8, 0.0036), (300, 0, 0.062), each with one prefill request, of
-- 0.002 + 2e-5 x prefill + 2e-4 x decode + 6e-7 x prefill^2 s: the fit finds those
-- four numbers and r2 = 1, LOO errors 0.
-- @column run_id               the run
-- @column source               batches or dsa
-- @column observations         batches or steps fitted
-- @column intercept_s          fixed cost per batch
-- @column per_prefill_token_s  cost of one prefill token
-- @column per_decode_token_s   cost of one decode token (one request's step)
-- @column per_kv_token_s       cost of one KV token read
-- @column r2                   share of the variance the model explains
-- @column residual_p50_s       median residual (observed - fitted)
-- @column residual_p90_s       90th percentile of the residuals
-- @column residual_p99_s       99th percentile of the residuals
-- @column per_prefill_sq_token_s  cost per squared prompt token (sum of the batch's
--                             prefill requests' squared lengths); NULL without them
-- @column loo_rmse_s           leave-one-out RMSE: each batch predicted by the fit of
--                             the others
-- @column loo_mape             leave-one-out mean absolute percentage error, a fraction
CREATE MACRO timing_cost_model(source := 'batches') AS TABLE
SELECT unnest(kvtrace_cost_model(source), recursive := true);
