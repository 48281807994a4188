-- Queries of the pool report over the runs in report_runs.  other = capacity - held -
-- available (pool_other); ticks whose poll failed or lack a counter are left out.  Every
-- statistic drops the same warm-up, getvariable('warmup_fraction') of each run's time
-- span; the time series shows the whole run.

-- @query pool_series
-- Per worker, held / other / available tokens over time (means over at most 300 time
-- bins per run), stacked, with the capacity.
WITH p AS (
    SELECT * FROM pool_other
    WHERE run_id IN (SELECT run_id FROM report_runs) AND other_tokens IS NOT NULL
), bins AS (
    SELECT run_id, greatest((max(t_s) - min(t_s)) / 300, 1e-9) AS width FROM p GROUP BY run_id
), binned AS (
    SELECT run_id, worker_id, floor(t_s / width) * width AS t_s,
           avg(held_tokens) AS held, avg(other_tokens) AS other,
           avg(available_tokens) AS available, max(capacity_tokens) AS capacity
    FROM p JOIN bins USING (run_id) GROUP BY ALL
)
SELECT run_id || ' ' || worker_id AS worker, t_s, component, tokens, capacity
FROM binned UNPIVOT (tokens FOR component IN (held, other, available))
ORDER BY worker, t_s, component;

-- @query other_distribution
-- Distribution of other per worker role, in about 40 bins fitted to the values seen
-- (_bin_width): worker_role, other_bin and other_bin_end (the bin's edges), ticks.
WITH p AS (
    SELECT worker_role, other_tokens FROM _pool_kept(getvariable('warmup_fraction'))
    WHERE run_id IN (SELECT run_id FROM report_runs)
), w AS (SELECT _bin_width(min(other_tokens), max(other_tokens), 40) AS width FROM p)
SELECT worker_role, floor(other_tokens / width) * width AS other_bin,
       (floor(other_tokens / width) + 1) * width AS other_bin_end, count(*) AS ticks
FROM p, w GROUP BY ALL ORDER BY ALL;

-- @query decode_summary
-- The decode workers of each run together (seed 001_* section 5): other percentiles by
-- ticks and by time, and the shares above the seed's thresholds.
SELECT * FROM pool_decode_summary(getvariable('warmup_fraction'))
WHERE run_id IN (SELECT run_id FROM report_runs);

-- @query thresholds
-- Share of ticks, and of time (ticks weighted by the time to the worker's next tick,
-- capped at twice its median interval), above each threshold, per role (worker_id empty)
-- and per worker, with the view's default thresholds (other above 30K / 50K / 70K tokens,
-- held above 60K, other above 25 / 50 / 75 % of capacity).
SELECT worker_role, worker_id, measure, threshold, ticks, ticks_above, share, time_share
FROM pool_threshold_freq(warmup_fraction := getvariable('warmup_fraction'))
WHERE run_id IN (SELECT run_id FROM report_runs)
ORDER BY worker_role, worker_id NULLS FIRST, measure, threshold;

-- @query stuck
-- Stuck stretches: consecutive ticks of a decode worker with held = 0, no sessions and
-- other above 30K tokens for at least 2 ticks (memory nothing visible holds).
SELECT run_id || ' ' || worker_id AS worker, start_s, end_s, ticks, duration_s,
       other_mean, other_max
FROM pool_stuck_intervals(warmup_fraction := getvariable('warmup_fraction'))
WHERE run_id IN (SELECT run_id FROM report_runs)
ORDER BY worker, start_s;

-- @query breakdown
-- Where other goes, when the server reports the finer fields: mean tokens per worker of
-- each component, and what the components leave unexplained.
SELECT run_id, worker_id, count(*) AS ticks, avg(other_tokens) AS other,
       avg(radix_protected_tokens) AS radix_protected, avg(running_batch_tokens) AS running_batch,
       avg(inflight_transfer_tokens) AS inflight_transfer, avg(prealloc_tokens) AS prealloc,
       avg(retracted_tokens) AS retracted, avg(other_unaccounted_tokens) AS unaccounted
FROM pool_other_breakdown
WHERE run_id IN (SELECT run_id FROM report_runs) AND radix_protected_tokens IS NOT NULL
GROUP BY ALL ORDER BY ALL;

-- @query throughput
-- last_gen_throughput of each worker in stuck stretches, with other above 70K tokens,
-- and otherwise (seed 001_* sections 3.1, 8.7): does a stuck or crowded pool slow decode?
SELECT run_id || ' ' || worker_id AS worker, state, ticks, with_throughput,
       throughput_mean, throughput_p50
FROM pool_throughput_by_state(warmup_fraction := getvariable('warmup_fraction'))
WHERE run_id IN (SELECT run_id FROM report_runs)
ORDER BY worker, state;
