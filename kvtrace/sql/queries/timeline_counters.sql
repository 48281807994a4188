-- Profiler timeline counters: the memory bandwidth of copies and memsets over time, as
-- Holistic Trace Analysis (HTA 0.5) draws it from the bandwidth the profiler writes on
-- each operation (args "memory bandwidth (GB/s)"; 0 where a trace gives none).
--
-- Memory operations are the GPU events named Memcpy..., Memset... or dma... (HTA's
-- memory kernels).  Their type is the name's first 11 characters for a copy ("Memcpy
-- HtoD"), "Memset" for a memset and "Memcpy Unknown" for the rest.  Each starts adding
-- its bandwidth to its type's counter and its end takes it away; an operation of 0 us
-- counts as 1 us long, as HTA counts it (so it is not gone before it came).  At one
-- instant kvtrace applies the ends first (an operation that ends as another starts
-- never doubles the counter); HTA applies them in the order its sort leaves them.
-- With definitions := 'hta' the operations are HTA's (`_timeline_hta_gpu`: its rounded
-- microseconds, its GPU events) and an instant applies the starts first, then the ends,
-- each in trace order (HTA's table order, which its sort keeps when stable).  (The
-- queue-length counter is `timeline_queue_length`.)
--
-- Worked example: HtoD copies at [0, 10) us at 5 GB/s and [4, 6) at 3 GB/s give the
-- series 5 (t 0), 8 (t 4), 5 (t 6), 0 (t 10): four points, three above zero (mean
-- 6 GB/s); over time the counter is above zero for 10 us and averages (5 * 4 + 8 * 2 +
-- 5 * 4) / 10 = 5.6 GB/s.
--
-- @requires timeline_definitions.sql

-- @macro _timeline_memory_changes(definitions)
-- Each start (+ its bandwidth) and end (- its bandwidth) of a memory operation, with
-- the order in which changes of one instant apply (ahead: lower first).
CREATE MACRO _timeline_memory_changes(definitions) AS TABLE
WITH operations AS (
    SELECT run_id, coalesce(rank, -1) AS rank, name, ts_us AS s,
           ts_us + CASE WHEN dur_us = 0 THEN 1 ELSE dur_us END AS e,
           coalesce(memory_bw_gbps, 0) AS gbps, false AS late, event_idx
    FROM _timeline_events_files
    WHERE stream IS NOT NULL AND regexp_matches(name, '^(Memcpy|Memset|dma)')
      AND definitions = 'kvtrace'
    UNION ALL
    SELECT run_id, rank, name, s, s + CASE WHEN dur = 0 THEN 1 ELSE dur END,
           coalesce(memory_bw_gbps, 0), late, event_idx
    FROM _timeline_hta_gpu
    WHERE kernel_type = 'memory' AND definitions = 'hta'
), typed AS (
    SELECT *, CASE WHEN starts_with(name, 'Memset') THEN 'Memset'
                   WHEN starts_with(name, 'Memcpy') THEN name[1:11]
                   ELSE 'Memcpy Unknown' END AS memory_type
    FROM operations
), changes AS (
    SELECT run_id, rank, memory_type, s AS t, gbps AS delta, 1 AS starts, late, event_idx
    FROM typed
    UNION ALL
    SELECT run_id, rank, memory_type, e, -gbps, 0, late, event_idx FROM typed
)
SELECT run_id, rank, memory_type, t, delta, starts,
       CASE WHEN definitions = 'hta' THEN [1 - starts, late::INTEGER, event_idx]
            ELSE [starts, 0, 0] END AS ahead,
       CASE WHEN definitions = 'hta' THEN 0 ELSE delta END AS ahead_delta
FROM changes, _timeline_definitions(definitions) AS d
WHERE d.checked IS NOT NULL;

-- @macro timeline_memory_bandwidth(definitions)
-- HTA's memory bandwidth time series: per run, rank and memory type, the summed
-- bandwidth of the operations in flight after each start and end.
-- @column run_id          the run
-- @column rank            the rank (-1 when unknown)
-- @column memory_type     Memcpy HtoD, Memcpy DtoH, Memcpy DtoD, ..., Memset or Memcpy Unknown
-- @column t_us            when the counter changed, in the trace's microseconds
-- @column bandwidth_gbps  the type's bandwidth in flight from then on, GB/s
CREATE MACRO timeline_memory_bandwidth(definitions := 'kvtrace') AS TABLE
SELECT run_id, rank, memory_type, t_us, bandwidth_gbps
FROM (
    SELECT run_id, rank, memory_type, t AS t_us, ahead, ahead_delta,
           sum(delta) OVER (PARTITION BY run_id, rank, memory_type
                            ORDER BY t, ahead, ahead_delta
                            ROWS UNBOUNDED PRECEDING) AS bandwidth_gbps
    FROM _timeline_memory_changes(definitions)
)
ORDER BY run_id, rank, memory_type, t_us, ahead, ahead_delta, bandwidth_gbps;

-- @view timeline_memory_bandwidth
-- timeline_memory_bandwidth() with kvtrace's definitions.
-- @columns_of timeline_memory_bandwidth
CREATE VIEW timeline_memory_bandwidth AS
SELECT * FROM timeline_memory_bandwidth();

-- @macro timeline_memory_bandwidth_summary(definitions)
-- HTA's memory bandwidth summary: per run, rank and memory type, the statistics of the
-- series' points above zero (as HTA's describe() gives them), and the time the counter
-- was above zero with its mean over that time.
-- @column run_id          the run
-- @column rank            the rank (-1 when unknown)
-- @column memory_type     Memcpy HtoD, Memcpy DtoH, Memcpy DtoD, ..., Memset or Memcpy Unknown
-- @column points          points of the series above zero
-- @column mean_gbps       their mean
-- @column std_gbps        their sample standard deviation (NULL for one point)
-- @column min_gbps        the lowest
-- @column p25_gbps        25th percentile (linear interpolation)
-- @column p50_gbps        median
-- @column p75_gbps        75th percentile
-- @column max_gbps        the highest
-- @column busy_us         time the counter was above zero
-- @column time_mean_gbps  the counter's mean over busy_us (weighted by time)
CREATE MACRO timeline_memory_bandwidth_summary(definitions := 'kvtrace') AS TABLE
WITH points AS (
    SELECT run_id, rank, memory_type, count(*) AS points, avg(bandwidth_gbps) AS mean_gbps,
           stddev_samp(bandwidth_gbps) AS std_gbps, min(bandwidth_gbps) AS min_gbps,
           quantile_cont(bandwidth_gbps, 0.25) AS p25_gbps,
           quantile_cont(bandwidth_gbps, 0.5) AS p50_gbps,
           quantile_cont(bandwidth_gbps, 0.75) AS p75_gbps, max(bandwidth_gbps) AS max_gbps
    FROM timeline_memory_bandwidth(definitions := definitions)
    WHERE bandwidth_gbps > 0
    GROUP BY run_id, rank, memory_type
), settled AS (  -- the counter once every change at one instant is applied
    SELECT run_id, rank, memory_type, t,
           sum(sum(delta)) OVER (PARTITION BY run_id, rank, memory_type ORDER BY t)
               AS gbps
    FROM _timeline_memory_changes(definitions)
    GROUP BY run_id, rank, memory_type, t
), held AS (
    SELECT run_id, rank, memory_type, gbps,
           lead(t) OVER (PARTITION BY run_id, rank, memory_type ORDER BY t) - t AS held_us
    FROM settled
), over_time AS (
    SELECT run_id, rank, memory_type, sum(held_us) AS busy_us,
           sum(gbps * held_us) / sum(held_us) AS time_mean_gbps
    FROM held
    WHERE gbps > 0
    GROUP BY run_id, rank, memory_type
)
SELECT p.*, coalesce(o.busy_us, 0) AS busy_us, o.time_mean_gbps
FROM points AS p
LEFT JOIN over_time AS o USING (run_id, rank, memory_type)
ORDER BY run_id, rank, memory_type;

-- @view timeline_memory_bandwidth_summary
-- timeline_memory_bandwidth_summary() with kvtrace's definitions.
-- @columns_of timeline_memory_bandwidth_summary
CREATE VIEW timeline_memory_bandwidth_summary AS
SELECT * FROM timeline_memory_bandwidth_summary();
