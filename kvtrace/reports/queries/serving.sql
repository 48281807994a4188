-- Queries of the serving report over the runs in report_runs (replayed serving
-- requests and serving-benchmark runs).  The SLOs given with --slo are the variables
-- slo_ttft_ms, slo_tpot_ms and slo_e2el_ms (NULL when not given).

-- @query benchmark
-- The serving-benchmark table of the runs, one row per load level, goodput under the
-- SLOs given.
SELECT r.run_name, b.* EXCLUDE (origin)
FROM serving_benchmark_table(ttft_slo_ms := getvariable('slo_ttft_ms'),
                             tpot_slo_ms := getvariable('slo_tpot_ms'),
                             e2e_slo_ms := getvariable('slo_e2el_ms')) AS b
JOIN report_runs AS r USING (run_id)
ORDER BY r.experiment NULLS LAST, r.run_name, b.load_level;

-- @query latency_throughput
-- Latency against request throughput: the median and p99 of TTFT, TPOT and end-to-end
-- latency at each load level, with the SLO of each metric when one was given.
WITH b AS (
    SELECT coalesce(r.experiment, r.run_name) AS series, b.*
    FROM serving_benchmark AS b JOIN report_runs AS r USING (run_id)
), long AS (
    SELECT series, run_id, load_level, request_throughput, 'TTFT' AS metric,
           median_ttft_ms AS median_ms, p99_ttft_ms AS p99_ms,
           getvariable('slo_ttft_ms')::DOUBLE AS slo_ms, 1 AS metric_order FROM b
    UNION ALL
    SELECT series, run_id, load_level, request_throughput, 'TPOT', median_tpot_ms,
           p99_tpot_ms, getvariable('slo_tpot_ms')::DOUBLE, 2 FROM b
    UNION ALL
    SELECT series, run_id, load_level, request_throughput, 'E2E latency', median_e2el_ms,
           p99_e2el_ms, getvariable('slo_e2el_ms')::DOUBLE, 3 FROM b
)
UNPIVOT long ON median_ms AS 'median', p99_ms AS 'p99' INTO NAME statistic VALUE latency_ms
ORDER BY metric_order, series, request_throughput;

-- @query latency_load
-- Latency against load: the median and p99 of TTFT and TPOT at each measured load level
-- with a finite request rate asked for (requests per second), with the SLO of each
-- metric when one was given.
WITH b AS (
    SELECT coalesce(r.experiment, r.run_name) AS series, b.*
    FROM serving_benchmark AS b JOIN report_runs AS r USING (run_id)
    WHERE isfinite(b.request_rate) AND b.request_rate > 0
), long AS (
    SELECT series, run_id, load_level, request_rate, 'TTFT' AS metric,
           median_ttft_ms AS median_ms, p99_ttft_ms AS p99_ms,
           getvariable('slo_ttft_ms')::DOUBLE AS slo_ms, 1 AS metric_order FROM b
    UNION ALL
    SELECT series, run_id, load_level, request_rate, 'TPOT', median_tpot_ms, p99_tpot_ms,
           getvariable('slo_tpot_ms')::DOUBLE, 2 FROM b
)
UNPIVOT long ON median_ms AS 'median', p99_ms AS 'p99' INTO NAME statistic VALUE latency_ms
ORDER BY metric_order, series, request_rate;

-- @query batch_sizes
-- Batch-size distribution of simulated runs (batch_metrics): per run and batch size, the
-- batches of that size, their share of the run's batches and of its execution time.
WITH sizes AS (
    SELECT run_id, batch_size, count(*) AS batches, sum(execution_time_s) AS seconds
    FROM batch_metrics WHERE run_id IN (SELECT run_id FROM report_runs)
    GROUP BY run_id, batch_size
)
SELECT run_id, batch_size, batches,
       batches / sum(batches) OVER (PARTITION BY run_id) AS share,
       seconds / sum(seconds) OVER (PARTITION BY run_id) AS time_share
FROM sizes ORDER BY run_id, batch_size;

-- @query deciles
-- Error rate per decile of the run, with equal-time bins and equal-count bins side by
-- side (a small last equal-time bin can fake a recovery).
SELECT run_id, decile, 'equal time' AS binning, equal_time_requests AS requests,
       equal_time_error_rate AS error_rate
FROM request_error_deciles WHERE run_id IN (SELECT run_id FROM report_runs)
UNION ALL
SELECT run_id, decile, 'equal count', equal_count_requests, equal_count_error_rate
FROM request_error_deciles WHERE run_id IN (SELECT run_id FROM report_runs)
ORDER BY ALL;

-- @query workers
-- Errors per decode worker: requests, errors, error rate and the sessions it served.
SELECT run_id, decode_worker, requests, errors, error_rate, sessions
FROM request_worker_error_rates WHERE run_id IN (SELECT run_id FROM report_runs)
ORDER BY run_id, decode_worker;

-- @query sessions
-- The 30 sessions with the most errors: their requests, errors, decode workers and
-- whether they stayed pinned to one worker.
SELECT run_id, session_id, requests, errors, error_rate, decode_workers, pinned_worker
FROM request_session_errors WHERE run_id IN (SELECT run_id FROM report_runs) AND errors > 0
ORDER BY errors DESC, run_id, _natural_sort_key(session_id) LIMIT 30;

-- @query modes
-- Execution-mode mix: requests, share of the run and errors per mode.
SELECT run_id, coalesce(execution_mode, '(none)') AS execution_mode, requests, share, errors
FROM request_execution_mode_mix WHERE run_id IN (SELECT run_id FROM report_runs)
ORDER BY ALL;

-- @query latency_cdf
-- Latency CDF of successful requests per execution mode (cumulative share at each
-- latency, thinned to 200 steps of the share).
WITH r AS (
    SELECT run_id || ' ' || coalesce(execution_mode, '(none)') AS mode, latency_s,
           cume_dist() OVER (PARTITION BY run_id, execution_mode ORDER BY latency_s) AS share
    FROM request_metrics
    WHERE run_id IN (SELECT run_id FROM report_runs) AND NOT is_error
      AND latency_s IS NOT NULL
)
SELECT mode, max(latency_s) AS latency_s, max(share) AS share
FROM r GROUP BY mode, ceil(share * 200) ORDER BY mode, share;

-- @query request_latency_by_mode
-- Latency and TTFT percentiles per execution mode (successful requests, linear).
SELECT run_id, execution_mode, requests, latency_mean_s, latency_p50_s, latency_p90_s,
       latency_p99_s, ttft_p50_s, ttft_p99_s
FROM request_latency_by_mode WHERE run_id IN (SELECT run_id FROM report_runs)
ORDER BY ALL;

-- @query error_types
-- Failures by error type (seed 001_* section 2.1): their share of the errors, how many
-- had started their P->D transfer (kv_transfer_blocks > 0) and how many reused a session.
SELECT run_id, error_type, errors, share_of_errors, with_kv_transfer,
       with_kv_transfer_share, session_reused, session_reused_share
FROM request_error_types WHERE run_id IN (SELECT run_id FROM report_runs)
ORDER BY run_id, errors DESC;

-- @query turn_profile
-- Failing sessions beside the others: sessions, median highest turn, median first failing
-- turn and mean input tokens of their requests.
SELECT run_id, failing, count(*) AS sessions, median(max_turn_id) AS max_turn_p50,
       median(first_error_turn) AS first_error_turn_p50,
       avg(input_tokens_mean) AS input_tokens_mean
FROM request_session_turns WHERE run_id IN (SELECT run_id FROM report_runs)
GROUP BY ALL ORDER BY run_id, failing DESC;

-- @query recurrence
-- Sessions that failed in more than one run of the same experiment (reruns): a session
-- failing in every rerun points at its workload (seed 001_* hypothesis H3).
SELECT experiment, session_id, runs, runs_with_errors, errors, fails_every_run
FROM request_session_failure_recurrence
WHERE experiment IN (SELECT experiment FROM report_runs) AND runs_with_errors > 1
ORDER BY experiment, runs_with_errors DESC LIMIT 50;

-- @query pool_state
-- Each failure beside its decode worker's last successful poll, when that poll is fresh
-- (at most two poll intervals old); stale polls show only their age.
SELECT run_id, request_id, session_id, decode_worker, error_type, failed_at_s,
       snapshot_age_s, held_tokens, available_tokens, other_tokens, session_count
FROM request_errors_with_pool_state() WHERE run_id IN (SELECT run_id FROM report_runs)
ORDER BY run_id, failed_at_s LIMIT 200;
