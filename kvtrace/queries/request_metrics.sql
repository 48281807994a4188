-- Where serving errors cluster: per-request metrics of a replay.
--
-- A request is an error when its status is error (ingest maps failed/failure/fail to it,
-- and a request with an error_type but no status to it).  Time-bucketed error rates are
-- always shown with equal-time and equal-count bins side by side: a small last
-- equal-time bin can fake a "recovery".  Percentiles are linear-interpolated.

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

-- @view worker_error_rates
-- Errors per decode worker.  Sessions are pinned to one worker, so a worker's rate mostly
-- says where the failing sessions were routed; read it with session_errors.
-- @column run_id         the run
-- @column experiment     experiment label
-- @column decode_worker  decode worker
-- @column requests       requests it served
-- @column errors         errors among them
-- @column error_rate     errors / requests
-- @column sessions       distinct sessions it served
CREATE VIEW worker_error_rates AS
SELECT
    run_id, experiment, decode_worker,
    count(*) AS requests,
    count(*) FILTER (WHERE is_error) AS errors,
    count(*) FILTER (WHERE is_error) / count(*) AS error_rate,
    count(DISTINCT session_id) AS sessions
FROM request_metrics
GROUP BY ALL
ORDER BY run_id, decode_worker;

-- @view session_errors
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
CREATE VIEW session_errors AS
SELECT
    run_id, experiment, session_id,
    count(*) AS requests,
    count(*) FILTER (WHERE is_error) AS errors,
    count(*) FILTER (WHERE is_error) / count(*) AS error_rate,
    list_sort(list(DISTINCT decode_worker)) AS decode_workers,
    CASE WHEN count(DISTINCT decode_worker) = 1 THEN min(decode_worker) END AS pinned_worker,
    max(turn_id) AS max_turn_id
FROM request_metrics
GROUP BY ALL
ORDER BY run_id, errors DESC, session_id;

-- @view execution_mode_mix
-- How requests were served: share of each execution mode, with its errors.
-- @column run_id          the run
-- @column experiment      experiment label
-- @column execution_mode  serving path
-- @column requests        requests served that way
-- @column share           requests / all requests of the run
-- @column errors          errors among them
CREATE VIEW execution_mode_mix AS
SELECT
    run_id, experiment, execution_mode,
    count(*) AS requests,
    count(*) / sum(count(*)) OVER (PARTITION BY run_id) AS share,
    count(*) FILTER (WHERE is_error) AS errors
FROM request_metrics
GROUP BY run_id, experiment, execution_mode
ORDER BY run_id, requests DESC;

-- @view latency_summary
-- Latency and time to first token of successful requests per run and execution mode
-- (execution_mode NULL: all modes).  Failed requests are left out: they end early and
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
CREATE VIEW latency_summary AS
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

-- @view errors_with_pool_state
-- Each failed request beside its decode worker's latest pool snapshot at the moment it
-- failed (arrival_s + latency_s, or + ttft_s, or arrival_s): an ASOF join on the run,
-- the worker and time.  Request and pool times must share an origin (the same run).
-- @column run_id             the run
-- @column experiment         experiment label
-- @column request_id         failed request
-- @column session_id         its session
-- @column decode_worker      its decode worker
-- @column error_type         exception type
-- @column failed_at_s        when it failed, seconds since start
-- @column snapshot_t_s       t_s of the snapshot joined (NULL when none came before)
-- @column held_tokens        held at that snapshot
-- @column available_tokens   available at that snapshot
-- @column other_tokens       other at that snapshot
-- @column session_count      sessions at that snapshot
CREATE VIEW errors_with_pool_state AS
WITH failed AS (
    SELECT *, arrival_s + coalesce(latency_s, ttft_s, 0) AS failed_at_s
    FROM request_metrics
    WHERE is_error AND arrival_s IS NOT NULL
)
SELECT
    f.run_id, f.experiment, f.request_id, f.session_id, f.decode_worker, f.error_type,
    f.failed_at_s, p.t_s AS snapshot_t_s, p.held_tokens, p.available_tokens, p.other_tokens,
    p.session_count
FROM failed AS f
ASOF LEFT JOIN pool_other AS p
    ON f.run_id = p.run_id AND f.decode_worker = p.worker_id AND f.failed_at_s >= p.t_s
ORDER BY f.run_id, f.failed_at_s;

-- @view run_summaries
-- The summary JSON a serving run wrote, whole (query it with DuckDB's JSON functions,
-- e.g. summary->>'$.errors').
-- @column run_id       the run
-- @column experiment   experiment label
-- @column source_path  the summary file
-- @column summary      its content (JSON text)
CREATE VIEW run_summaries AS SELECT * FROM _run_summaries_files;
