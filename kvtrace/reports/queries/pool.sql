-- Queries of the pool report over the runs in report_runs.  other = capacity - held -
-- available (pool_other); ticks whose poll failed or lack a counter are left out.

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
-- Distribution of other per worker role: ticks per 2.5 % of the largest other seen.
WITH p AS (
    SELECT worker_role, other_tokens FROM pool_other
    WHERE run_id IN (SELECT run_id FROM report_runs) AND other_tokens IS NOT NULL
), w AS (SELECT greatest(max(other_tokens) / 40, 1) AS width FROM p)
SELECT worker_role, floor(other_tokens / width) * width AS other_bin, count(*) AS ticks
FROM p, w GROUP BY ALL ORDER BY ALL;

-- @query thresholds
-- Share of ticks above each threshold, per role (worker_id empty) and per worker, with
-- the view's default thresholds (other above 30K / 50K / 70K tokens, held above 60K,
-- other above 80 % of capacity).
SELECT worker_role, worker_id, measure, threshold, ticks, ticks_above, share
FROM pool_threshold_freq()
WHERE run_id IN (SELECT run_id FROM report_runs)
ORDER BY worker_role, worker_id NULLS FIRST, measure, threshold;

-- @query stuck
-- Stuck stretches: consecutive ticks of a worker with held = 0, no sessions and other
-- above 30K tokens for at least 5 ticks (memory nothing visible holds).
SELECT run_id || ' ' || worker_id AS worker, start_s, end_s, ticks, duration_s,
       other_mean, other_max
FROM pool_stuck_intervals()
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
