-- Queries of the serving report over the runs in report_runs (request_metrics).

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
FROM worker_error_rates WHERE run_id IN (SELECT run_id FROM report_runs)
ORDER BY run_id, decode_worker;

-- @query sessions
-- The 30 sessions with the most errors: their requests, errors, decode workers and
-- whether they stayed pinned to one worker.
SELECT run_id, session_id, requests, errors, error_rate, decode_workers, pinned_worker
FROM session_errors WHERE run_id IN (SELECT run_id FROM report_runs) AND errors > 0
ORDER BY errors DESC, run_id, session_id LIMIT 30;

-- @query modes
-- Execution-mode mix: requests, share of the run and errors per mode.
SELECT run_id, coalesce(execution_mode, '(none)') AS execution_mode, requests, share, errors
FROM execution_mode_mix WHERE run_id IN (SELECT run_id FROM report_runs)
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

-- @query latency_summary
-- Latency and TTFT percentiles per execution mode (successful requests, linear).
SELECT run_id, execution_mode, requests, latency_mean_s, latency_p50_s, latency_p90_s,
       latency_p99_s, ttft_p50_s, ttft_p99_s
FROM latency_summary WHERE run_id IN (SELECT run_id FROM report_runs)
ORDER BY ALL;
