-- Run-to-run comparison that says how much stands behind it.
--
-- Each side is an experiment label; every run carrying it counts.  Metrics are computed
-- per run, then averaged per side with their sample standard deviation (NULL for one
-- run).  A single run on either side is flagged: its difference is within single-run
-- variance and is no evidence of an improvement.
--
-- @requires pool.sql
-- @requires request.sql
-- @requires runs.sql

-- @macro run_compare(left_experiment, right_experiment, warmup_fraction)
-- Per metric: both sides, the runs behind each, the difference right - left.  Decode
-- pool percentiles drop the same warm-up as pool_worker_stats (default 0.1).
-- @column metric       requests, errors, error_rate, latency_mean_s, latency_p50_s, latency_p90_s, latency_p99_s, decode_other_p50_tokens, decode_other_p90_tokens
-- @column left_mean    mean over the left side's runs
-- @column left_std     sample standard deviation over them (NULL for one run)
-- @column left_runs    runs behind the left side
-- @column right_mean   mean over the right side's runs
-- @column right_std    sample standard deviation over them (NULL for one run)
-- @column right_runs   runs behind the right side
-- @column delta        right_mean - left_mean
-- @column delta_rel    delta / left_mean
-- @column single_run   true when either side rests on a single run
CREATE MACRO run_compare(left_experiment, right_experiment, warmup_fraction := 0.1) AS TABLE
WITH requests_per_run AS (
    SELECT
        experiment, run_id,
        count(*)::DOUBLE AS requests,
        count(*) FILTER (WHERE is_error)::DOUBLE AS errors,
        avg(is_error::INTEGER)::DOUBLE AS error_rate,
        avg(latency_s) FILTER (WHERE NOT is_error) AS latency_mean_s,
        quantile_cont(latency_s, 0.5) FILTER (WHERE NOT is_error) AS latency_p50_s,
        quantile_cont(latency_s, 0.9) FILTER (WHERE NOT is_error) AS latency_p90_s,
        quantile_cont(latency_s, 0.99) FILTER (WHERE NOT is_error) AS latency_p99_s
    FROM request_metrics
    WHERE experiment IN (left_experiment, right_experiment)
    GROUP BY ALL
), pool_per_run AS (
    SELECT
        experiment, run_id,
        quantile_cont(other_tokens, 0.5)::DOUBLE AS decode_other_p50_tokens,
        quantile_cont(other_tokens, 0.9)::DOUBLE AS decode_other_p90_tokens
    FROM _pool_kept(warmup_fraction)
    WHERE worker_role = 'decode' AND experiment IN (left_experiment, right_experiment)
    GROUP BY ALL
), per_run AS (
    SELECT * FROM requests_per_run FULL JOIN pool_per_run USING (experiment, run_id)
), long AS (
    UNPIVOT per_run
    ON requests, errors, error_rate, latency_mean_s, latency_p50_s, latency_p90_s,
       latency_p99_s, decode_other_p50_tokens, decode_other_p90_tokens
    INTO NAME metric VALUE value
), sides AS (
    SELECT metric, experiment, avg(value) AS mean, stddev_samp(value) AS std,
           count(*) AS runs
    FROM long
    GROUP BY ALL
)
SELECT
    l.metric,
    l.mean AS left_mean, l.std AS left_std, l.runs AS left_runs,
    r.mean AS right_mean, r.std AS right_std, r.runs AS right_runs,
    r.mean - l.mean AS delta,
    (r.mean - l.mean) / nullif(l.mean, 0) AS delta_rel,
    l.runs = 1 OR r.runs = 1 AS single_run
FROM sides AS l
JOIN sides AS r ON l.metric = r.metric
WHERE l.experiment = left_experiment AND r.experiment = right_experiment
ORDER BY l.metric;
