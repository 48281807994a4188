-- Where serving errors cluster: per-request metrics of a replay.
--
-- A request is an error when its status is error (ingest maps failed/failure/fail to it,
-- and a request with an error_type but no status to it).  Time-bucketed error rates are
-- always shown with equal-time and equal-count bins side by side: a small last
-- equal-time bin can fake a "recovery".  Percentiles are linear-interpolated.
--
-- @requires pool.sql
-- @requires stats.sql
-- @requires runs.sql

-- @view request_metrics
-- One row per replayed request.
-- @column run_id              the run
-- @column experiment          experiment label
-- @column request_id          request id from the source
-- @column session_id          session (conversation) the request belongs to
-- @column turn_id             turn within the session
-- @column prefill_worker      prefill worker that served it
-- @column decode_worker       decode worker that served it
-- @column execution_mode      the serving path taken (direct-to-D, session-cap fallback, ...)
-- @column status              ok or error (or the source's own status)
-- @column error_type          exception type of a failure
-- @column error_message       failure message
-- @column kv_transfer_blocks  KV blocks transferred P->D
-- @column session_reused      whether an existing session was appended to
-- @column cached_tokens       prompt tokens served from cache
-- @column input_tokens        prompt tokens
-- @column output_tokens       generated tokens
-- @column arrival_s           arrival, seconds since run start
-- @column ttft_s              time to first token, seconds
-- @column latency_s           end-to-end latency, seconds
-- @column truncated           whether the output was truncated
-- @column is_error            status = 'error'
CREATE VIEW request_metrics AS
SELECT *, status = 'error' AS is_error FROM _request_metrics_files;

-- @view request_error_deciles
-- Error counts and rates per tenth of each run, by arrival: equal-time bins (the run's
-- arrival span cut in ten equal lengths) beside equal-count bins (DuckDB ntile(10) over
-- arrival order: sizes differ by at most one, larger bins first).
-- @column run_id                 the run
-- @column experiment             experiment label
-- @column decile                 1 (first tenth) to 10
-- @column equal_time_requests    requests arriving in this tenth of the time span
-- @column equal_time_errors      errors among them
-- @column equal_time_error_rate  equal_time_errors / equal_time_requests (NULL for an empty bin)
-- @column equal_count_requests   requests in this tenth of the arrival order
-- @column equal_count_errors     errors among them
-- @column equal_count_error_rate equal_count_errors / equal_count_requests
CREATE VIEW request_error_deciles AS
WITH binned AS (
    SELECT
        run_id, experiment, is_error,
        ntile(10) OVER (PARTITION BY run_id ORDER BY arrival_s, request_id) AS count_bin,
        CASE WHEN max(arrival_s) OVER w > min(arrival_s) OVER w
             THEN least(floor((arrival_s - min(arrival_s) OVER w)
                              / (max(arrival_s) OVER w - min(arrival_s) OVER w) * 10), 9) + 1
             ELSE 1 END::INTEGER AS time_bin
    FROM request_metrics
    WHERE arrival_s IS NOT NULL
    WINDOW w AS (PARTITION BY run_id)
), bins AS (
    SELECT DISTINCT run_id, experiment, range::INTEGER AS decile
    FROM binned, range(1, 11)
), by_time AS (
    SELECT run_id, time_bin AS decile, count(*) AS n, count(*) FILTER (WHERE is_error) AS e
    FROM binned GROUP BY ALL
), by_count AS (
    SELECT run_id, count_bin AS decile, count(*) AS n, count(*) FILTER (WHERE is_error) AS e
    FROM binned GROUP BY ALL
)
SELECT
    b.run_id, b.experiment, b.decile,
    coalesce(t.n, 0) AS equal_time_requests,
    coalesce(t.e, 0) AS equal_time_errors,
    t.e / t.n AS equal_time_error_rate,
    coalesce(c.n, 0) AS equal_count_requests,
    coalesce(c.e, 0) AS equal_count_errors,
    c.e / c.n AS equal_count_error_rate
FROM bins AS b
LEFT JOIN by_time AS t USING (run_id, decile)
LEFT JOIN by_count AS c USING (run_id, decile)
ORDER BY b.run_id, b.decile;

-- @view request_worker_error_rates
-- @alias worker_error_rates
-- Errors per decode worker.  Sessions are pinned to one worker, so a worker's rate mostly
-- says where the failing sessions were routed; read it with request_session_errors.
-- @column run_id         the run
-- @column experiment     experiment label
-- @column decode_worker  decode worker
-- @column requests       requests it served
-- @column errors         errors among them
-- @column error_rate     errors / requests
-- @column sessions       distinct sessions it served
CREATE VIEW request_worker_error_rates AS
SELECT
    run_id, experiment, decode_worker,
    count(*) AS requests,
    count(*) FILTER (WHERE is_error) AS errors,
    count(*) FILTER (WHERE is_error) / count(*) AS error_rate,
    count(DISTINCT session_id) AS sessions
FROM request_metrics
GROUP BY ALL
ORDER BY run_id, decode_worker;

-- @view request_session_errors
-- @alias session_errors
-- Errors per session and the decode worker(s) it was pinned to, most errors first.
-- @column run_id          the run
-- @column experiment      experiment label
-- @column session_id      session
-- @column requests        requests of the session
-- @column errors          errors among them
-- @column error_rate      errors / requests
-- @column decode_workers  distinct decode workers that served it, sorted
-- @column pinned_worker   the one decode worker when there was exactly one, else NULL
-- @column max_turn_id     highest turn of the session
CREATE VIEW request_session_errors AS
SELECT
    run_id, experiment, session_id,
    count(*) AS requests,
    count(*) FILTER (WHERE is_error) AS errors,
    count(*) FILTER (WHERE is_error) / count(*) AS error_rate,
    list_sort(list(DISTINCT decode_worker)) AS decode_workers,
    CASE WHEN count(DISTINCT decode_worker) = 1 THEN min(decode_worker) END AS pinned_worker,
    max(turn_id) AS max_turn_id
FROM request_metrics
GROUP BY run_id, experiment, session_id
ORDER BY run_id, errors DESC, _natural_sort_key(session_id);

-- @view request_execution_mode_mix
-- @alias execution_mode_mix
-- How requests were served: share of each execution mode, with its errors.
-- @column run_id          the run
-- @column experiment      experiment label
-- @column execution_mode  serving path
-- @column requests        requests served that way
-- @column share           requests / all requests of the run
-- @column errors          errors among them
CREATE VIEW request_execution_mode_mix AS
SELECT
    run_id, experiment, execution_mode,
    count(*) AS requests,
    count(*) / sum(count(*)) OVER (PARTITION BY run_id) AS share,
    count(*) FILTER (WHERE is_error) AS errors
FROM request_metrics
GROUP BY run_id, experiment, execution_mode
ORDER BY run_id, requests DESC;

-- @view request_latency_by_mode
-- Latency and time to first token of successful requests per run and execution mode
-- (execution_mode NULL: all modes): the breakdown serving_benchmark, which has a run's
-- other numbers, cannot express.  Failed requests are left out: they end early and
-- would make a run that fails more look faster.
-- @column run_id          the run
-- @column experiment      experiment label
-- @column execution_mode  serving path, or NULL for all
-- @column requests        successful requests with a latency
-- @column latency_mean_s  mean latency, seconds
-- @column latency_p50_s   median latency, seconds
-- @column latency_p90_s   90th percentile latency, seconds
-- @column latency_p99_s   99th percentile latency, seconds
-- @column ttft_p50_s      median time to first token, seconds
-- @column ttft_p99_s      99th percentile time to first token, seconds
CREATE VIEW request_latency_by_mode AS
SELECT
    run_id, experiment, execution_mode,
    count(*) AS requests,
    avg(latency_s) AS latency_mean_s,
    quantile_cont(latency_s, 0.5) AS latency_p50_s,
    quantile_cont(latency_s, 0.9) AS latency_p90_s,
    quantile_cont(latency_s, 0.99) AS latency_p99_s,
    quantile_cont(ttft_s, 0.5) AS ttft_p50_s,
    quantile_cont(ttft_s, 0.99) AS ttft_p99_s
FROM request_metrics
WHERE NOT is_error AND latency_s IS NOT NULL
GROUP BY GROUPING SETS ((run_id, experiment, execution_mode), (run_id, experiment))
ORDER BY run_id, execution_mode NULLS FIRST;

-- @macro request_errors_with_pool_state(max_age_s)
-- @alias errors_with_pool_state
-- Each failed request beside the last *successful* poll of its decode worker at the
-- moment it failed (arrival_s + latency_s, or + ttft_s, or arrival_s).  Pool and request
-- files join by experiment (they may have been ingested as separate runs; without an
-- experiment label, by run), so their times must share an origin.  A poll older than
-- `max_age_s` (default NULL: twice the worker's median poll interval) is too stale to
-- describe the failure: its counters are NULL and its age is shown.
-- @column run_id            the run of the failed request
-- @column experiment        experiment label
-- @column request_id        request
-- @column session_id        session
-- @column decode_worker     decode worker it was routed to
-- @column error_type        error type
-- @column failed_at_s       when it failed, seconds since start
-- @column snapshot_t_s      t_s of the last successful poll before it (NULL: none)
-- @column snapshot_age_s    failed_at_s - snapshot_t_s
-- @column max_age_s         the age limit applied, seconds
-- @column held_tokens       held at that poll (NULL when older than max_age_s)
-- @column available_tokens  available at that poll (NULL when older than max_age_s)
-- @column other_tokens      other at that poll (NULL when older than max_age_s)
-- @column session_count     sessions at that poll (NULL when older than max_age_s)
CREATE MACRO request_errors_with_pool_state(max_age_s := NULL) AS TABLE
WITH failed AS (
    SELECT *, arrival_s + coalesce(latency_s, ttft_s, 0) AS failed_at_s,
           coalesce(experiment, run_id) AS joins
    FROM request_metrics
    WHERE is_error AND arrival_s IS NOT NULL
), polls AS (
    SELECT *, coalesce(experiment, run_id) AS joins,
           lead(t_s) OVER (PARTITION BY run_id, worker_id ORDER BY t_s) - t_s AS dt
    FROM pool_other
    WHERE other_tokens IS NOT NULL
), intervals AS (
    SELECT joins, worker_id, 2 * quantile_cont(dt, 0.5) AS default_age
    FROM polls GROUP BY ALL
), matched AS (
    SELECT f.run_id, f.experiment, f.request_id, f.session_id, f.decode_worker,
           f.error_type, f.failed_at_s, p.t_s AS snapshot_t_s,
           f.failed_at_s - p.t_s AS snapshot_age_s,
           coalesce(max_age_s, i.default_age)::DOUBLE AS age_limit_s,
           p.held_tokens, p.available_tokens, p.other_tokens, p.session_count
    FROM failed AS f
    ASOF LEFT JOIN polls AS p
        ON f.joins = p.joins AND f.decode_worker = p.worker_id AND f.failed_at_s >= p.t_s
    LEFT JOIN intervals AS i ON i.joins = f.joins AND i.worker_id = f.decode_worker
)
SELECT run_id, experiment, request_id, session_id, decode_worker, error_type, failed_at_s,
       snapshot_t_s, snapshot_age_s, age_limit_s AS max_age_s,
       CASE WHEN snapshot_age_s <= age_limit_s THEN held_tokens END AS held_tokens,
       CASE WHEN snapshot_age_s <= age_limit_s THEN available_tokens END AS available_tokens,
       CASE WHEN snapshot_age_s <= age_limit_s THEN other_tokens END AS other_tokens,
       CASE WHEN snapshot_age_s <= age_limit_s THEN session_count END AS session_count
FROM matched
ORDER BY run_id, failed_at_s;

-- @view request_error_types
-- Per run and error type (seed 001_* section 2.1): how many failed, their share of the
-- run's errors, how many had already started their P->D transfer (kv_transfer_blocks >
-- 0) and how many reused their session.
-- @column run_id                 the run
-- @column experiment             experiment label
-- @column error_type             error type (NULL: failed without one)
-- @column errors                 failed requests of that type
-- @column share_of_errors        errors / all errors of the run
-- @column with_kv_transfer       of them, with kv_transfer_blocks > 0
-- @column with_kv_transfer_share with_kv_transfer / errors
-- @column session_reused         of them, with session_reused true
-- @column session_reused_share   session_reused / errors
CREATE VIEW request_error_types AS
SELECT
    run_id, experiment, error_type,
    count(*) AS errors,
    count(*) / sum(count(*)) OVER (PARTITION BY run_id) AS share_of_errors,
    count(*) FILTER (WHERE kv_transfer_blocks > 0) AS with_kv_transfer,
    count(*) FILTER (WHERE kv_transfer_blocks > 0) / count(*) AS with_kv_transfer_share,
    count(*) FILTER (WHERE session_reused) AS session_reused,
    count(*) FILTER (WHERE session_reused) / count(*) AS session_reused_share
FROM request_metrics
WHERE is_error
GROUP BY run_id, experiment, error_type
ORDER BY run_id, errors DESC, error_type;

-- @view request_session_turns
-- @alias session_turn_profile
-- Per session: its turns and where in them it failed, to compare failing sessions with
-- the others (seed 001_* hypothesis H3: the failing sessions are the long ones).
-- @column run_id             the run
-- @column experiment         experiment label
-- @column session_id         session
-- @column failing            whether any of its requests failed
-- @column requests           its requests
-- @column errors             its failed requests
-- @column max_turn_id        its highest turn
-- @column first_error_turn   turn of its first failure (NULL: none)
-- @column input_tokens_mean  mean input tokens of its requests
CREATE VIEW request_session_turns AS
SELECT
    run_id, experiment, session_id,
    bool_or(is_error) AS failing,
    count(*) AS requests,
    count(*) FILTER (WHERE is_error) AS errors,
    max(turn_id) AS max_turn_id,
    min(turn_id) FILTER (WHERE is_error) AS first_error_turn,
    avg(input_tokens) AS input_tokens_mean
FROM request_metrics
GROUP BY run_id, experiment, session_id
ORDER BY run_id, failing DESC, _natural_sort_key(session_id);

-- @view request_session_failure_recurrence
-- @alias session_failure_recurrence
-- Per experiment and session: in how many of the experiment's runs it failed.  A session
-- that fails in every rerun points at its workload, not at chance (seed 001_* H3).
-- @column experiment         experiment label
-- @column session_id         session
-- @column runs               runs of the experiment holding the session
-- @column runs_with_errors   runs in which it failed at least once
-- @column errors             its failed requests over all runs
-- @column fails_every_run    runs_with_errors = runs (and more than one run)
CREATE VIEW request_session_failure_recurrence AS
WITH per_run AS (
    SELECT experiment, session_id, run_id, count(*) FILTER (WHERE is_error) AS errors
    FROM request_metrics
    WHERE experiment IS NOT NULL
    GROUP BY ALL
)
SELECT
    experiment, session_id, count(*) AS runs,
    count(*) FILTER (WHERE errors > 0) AS runs_with_errors,
    sum(errors) AS errors,
    count(*) > 1 AND count(*) FILTER (WHERE errors > 0) = count(*) AS fails_every_run
FROM per_run
GROUP BY experiment, session_id
ORDER BY experiment, runs_with_errors DESC, _natural_sort_key(session_id);

-- @macro request_execution_mode_compare(left_experiment, right_experiment)
-- @alias execution_mode_compare
-- How each execution mode's share, and the truncated requests, moved between two
-- experiments (seed 001_* sections 6.4, 8.10): means over each side's runs, with the runs
-- behind each; the row execution_mode = 'truncated' counts truncated requests.
-- @column execution_mode  execution mode, or 'truncated'
-- @column left_share      mean share of the left side's requests (truncated: of all requests)
-- @column left_requests   mean requests per left run
-- @column left_runs       runs behind the left side
-- @column right_share     mean share of the right side's requests
-- @column right_requests  mean requests per right run
-- @column right_runs      runs behind the right side
-- @column share_delta     right_share - left_share
-- @column single_run      true when either side rests on a single run
CREATE MACRO request_execution_mode_compare(left_experiment, right_experiment) AS TABLE
WITH modes AS (
    SELECT experiment, run_id, execution_mode, count(*) AS requests
    FROM request_metrics
    WHERE experiment IN (left_experiment, right_experiment)
    GROUP BY ALL
    UNION ALL
    SELECT experiment, run_id, 'truncated', count(*) FILTER (WHERE truncated)
    FROM request_metrics
    WHERE experiment IN (left_experiment, right_experiment)
    GROUP BY ALL
), totals AS (
    SELECT run_id, count(*) AS total FROM request_metrics GROUP BY ALL
), run_counts AS (
    SELECT experiment, count(DISTINCT run_id) AS runs FROM modes GROUP BY ALL
), shares AS (  -- a run without a mode counts as share 0 for it
    SELECT m.experiment, m.execution_mode,
           sum(m.requests / t.total) / any_value(c.runs) AS share,
           sum(m.requests) / any_value(c.runs) AS requests, any_value(c.runs) AS runs
    FROM modes AS m JOIN totals AS t USING (run_id) JOIN run_counts AS c USING (experiment)
    GROUP BY ALL
), keys AS (SELECT DISTINCT execution_mode FROM shares)
SELECT
    k.execution_mode,
    coalesce(l.share, 0) AS left_share, coalesce(l.requests, 0) AS left_requests,
    (SELECT runs FROM run_counts WHERE experiment = left_experiment) AS left_runs,
    coalesce(r.share, 0) AS right_share, coalesce(r.requests, 0) AS right_requests,
    (SELECT runs FROM run_counts WHERE experiment = right_experiment) AS right_runs,
    coalesce(r.share, 0) - coalesce(l.share, 0) AS share_delta,
    (SELECT min(runs) FROM run_counts) = 1 AS single_run
FROM keys AS k
LEFT JOIN shares AS l ON l.execution_mode IS NOT DISTINCT FROM k.execution_mode
    AND l.experiment = left_experiment
LEFT JOIN shares AS r ON r.execution_mode IS NOT DISTINCT FROM k.execution_mode
    AND r.experiment = right_experiment
ORDER BY k.execution_mode = 'truncated', greatest(left_share, right_share) DESC;

-- @view run_summaries
-- The summary JSON a serving run wrote, whole (query it with DuckDB's JSON functions,
-- e.g. summary->>'$.errors').
-- @column run_id       the run
-- @column experiment   experiment label
-- @column source_path  the summary file
-- @column summary      its content (JSON text)
CREATE VIEW run_summaries AS SELECT * FROM _run_summaries_files;
