-- An offloader's counters on the profiler's clock: counter values beside the GPU's busy
-- and idle time, idle time spent waiting on a copy, and thrash (a block evicted and
-- loaded again soon after) from counters.
--
-- timeline_counters holds Kineto's counter events ("ph": "C", one row per series) and
-- the named counters a program writes beside its trace (JSONL: ts_us, name, value,
-- labels, rank), both on the trace's clock, so a counter's window is the same window of
-- the trace's kernels and copies.  A counter is told apart by (pid, counter, series,
-- labels).  GPU time is kernels, copies and memsets (`_timeline_union`); a window's
-- idle time is its length less the time any of them ran.
--
-- Waiting on a copy: the first kernel launched on a stream after a cudaStreamWaitEvent
-- call for it (the trace's Stream Wait Event, with wait_on_stream and
-- wait_on_correlation: the dependency the profiler records) depends on the last GPU
-- operation launched on the stream waited on before the waited event's cudaEventRecord.
-- Where that operation is a copy and it ended after the kernel's stream went idle, the
-- idle gap before the kernel, up to the copy's end, was spent waiting on the copy.
-- Gaps are timeline_idle_breakdown's (kvtrace's definitions): per iteration, from the
-- latest end of the stream's earlier events.  Waiting on a copy is a view of its own,
-- not a class of that breakdown: it can share a gap with a late launch (host_wait), and
-- the breakdown's classes stay HTA's.
--
-- Worked example (timeline_counter_windows(100)): kernels at [0, 30) and [50, 80) us
-- and a copy at [20, 60); a counter h2d_queue with values 4 at t 10 and 2 at t 90, and 6
-- at t 130.  Window [0, 100): GPU busy [0, 80) = 80 us, idle 20; h2d_queue mean 3, last
-- 2, max 4.  Window [100, 200): busy 0, idle 100; mean, last and max 6, change +4
-- over the 40 us from t 90 to t 130: 100,000 per second.
--
-- Worked example (timeline_copy_wait_idle): on stream 7 a kernel ends at 100 us; an
-- HtoD copy on stream 20, launched at 60, runs [90, 150); cudaEventRecord on stream 20
-- at 70, cudaStreamWaitEvent for stream 7 at 80, the next kernel of stream 7 launched
-- at 85 starts at 155.  Stream 7 is idle [100, 155) = 55 us, of which [100, 150) = 50
-- us waiting on the copy: a share of 50 / 55.
--
-- Worked example (timeline_counter_thrash): kv_evict {"block": 1} at 100 us, kv_load
-- {"block": 2} at 150 and {"block": 1} at 400; kv_evict {"block": 3} at 600, never
-- loaded again.  Two evictions, one reloaded after 300 us: thrashed within a window of
-- 1,000 us; thrash share 1 / 2.  (Thrash from KV events: kv_thrash.)
--
-- @requires timeline.sql

-- @view timeline_counters
-- One row per counter value on a profiler's clock.
-- @column run_id     the run
-- @column rank       the rank that wrote it (NULL: a one-process trace)
-- @column pid        the process it belongs to, as the trace names it
-- @column counter    a Kineto counter event's name, or a named counter's name
-- @column series     the key inside a Kineto counter event's args (NULL for named counters)
-- @column labels     JSON object text, keys sorted ("{}" when none): labels->>'layer'
-- @column ts_us      when, microseconds on the trace's clock (as timeline_events.ts_us)
-- @column value      the value
-- @column source     kineto or jsonl
-- @column event_idx  the record's place in its file
CREATE VIEW timeline_counters AS
SELECT run_id, rank, pid, counter, series, labels, ts_us, value, source, event_idx
FROM _timeline_counters_files;

-- @macro timeline_counter_windows(window_us)
-- Per counter and window of window_us microseconds (windows start at multiples of it on
-- the trace's clock) holding a value of the counter: its values' mean, last and max,
-- the change of its last value since the counter's previous such window (a running
-- total's increase: bytes written, hits) and that change per second (a write rate),
-- and the same window's GPU busy and idle time on the counter's rank (a counter that
-- names no rank takes the rank of its run's trace, where the run has one).
-- @column run_id           the run
-- @column rank             the rank (-1 when unknown and the trace's is not one rank)
-- @column pid              the counter's process
-- @column counter          the counter
-- @column series           its series (Kineto) or NULL
-- @column labels           its labels
-- @column window_start_us  the window's start
-- @column samples          values in the window
-- @column mean_value       their mean
-- @column last_value       the latest one
-- @column max_value        the largest one
-- @column change           last_value less the last value of the previous window with values
-- @column rate_per_s       change per second, between the times of those two last values
-- @column gpu_busy_us      time in the window with a kernel, copy or memset running
-- @column compute_busy_us  ... with a computation kernel running
-- @column copy_busy_us     ... with a copy running
-- @column gpu_idle_us      window_us - gpu_busy_us
CREATE MACRO timeline_counter_windows(window_us := 1000) AS TABLE
WITH lone_ranks AS (  -- the rank of a run whose trace has one
    SELECT run_id, min(rank) AS lone_rank
    FROM (SELECT DISTINCT run_id, rank FROM _timeline_gpu_events)
    GROUP BY run_id
    HAVING count(*) = 1
), samples AS (
    SELECT c.run_id, coalesce(c.rank, r.lone_rank, -1) AS rank, c.pid, c.counter, c.series,
           c.labels, c.ts_us, c.value, c.event_idx, floor(c.ts_us / window_us) AS w
    FROM timeline_counters AS c
    LEFT JOIN lone_ranks AS r USING (run_id)
), per_window AS (
    SELECT run_id, rank, pid, counter, series, labels, w, count(*) AS samples,
           avg(value) AS mean_value, arg_max(value, (ts_us, event_idx)) AS last_value,
           max(ts_us) AS last_us, max(value) AS max_value
    FROM samples
    GROUP BY ALL
), busy AS (
    SELECT u.run_id, u.rank, u.what, x.w,
           sum(least(u.e, (x.w + 1) * window_us) - greatest(u.s, x.w * window_us)) AS busy_us
    FROM (
        SELECT *, 'gpu' AS what
        FROM _timeline_union(['kernel', 'memcpy', 'memset'], [], by_iteration := false)
        UNION ALL
        SELECT *, 'compute' FROM _timeline_union(['computation'], [], by_iteration := false)
        UNION ALL
        SELECT *, 'copy' FROM _timeline_union(['memcpy'], [], by_iteration := false)
    ) AS u,
    LATERAL (
        SELECT unnest(range(CAST(floor(u.s / window_us) AS BIGINT),
                            CAST(ceil(u.e / window_us) AS BIGINT))) AS w
    ) AS x
    WHERE u.e > u.s
    GROUP BY ALL
), windows AS (
    SELECT run_id, rank, w,
           coalesce(sum(busy_us) FILTER (WHERE what = 'gpu'), 0) AS gpu_busy_us,
           coalesce(sum(busy_us) FILTER (WHERE what = 'compute'), 0) AS compute_busy_us,
           coalesce(sum(busy_us) FILTER (WHERE what = 'copy'), 0) AS copy_busy_us
    FROM busy
    GROUP BY ALL
)
SELECT c.run_id, c.rank, c.pid, c.counter, c.series, c.labels,
       c.w * window_us AS window_start_us, c.samples, c.mean_value, c.last_value,
       c.max_value,
       c.last_value - lag(c.last_value) OVER same_counter AS change,
       (c.last_value - lag(c.last_value) OVER same_counter)
           / nullif(c.last_us - lag(c.last_us) OVER same_counter, 0) * 1e6 AS rate_per_s,
       coalesce(b.gpu_busy_us, 0) AS gpu_busy_us,
       coalesce(b.compute_busy_us, 0) AS compute_busy_us,
       coalesce(b.copy_busy_us, 0) AS copy_busy_us,
       window_us - coalesce(b.gpu_busy_us, 0) AS gpu_idle_us
FROM per_window AS c
LEFT JOIN windows AS b ON c.run_id = b.run_id AND c.rank = b.rank AND c.w = b.w
WINDOW same_counter AS (PARTITION BY c.run_id, c.rank, c.pid, c.counter, c.series, c.labels
                        ORDER BY c.w)
ORDER BY c.run_id, c.rank, c.counter, c.series, c.labels, c.pid, window_start_us;

-- @view timeline_counter_windows
-- timeline_counter_windows() with windows of a millisecond.
-- @columns_of timeline_counter_windows
CREATE VIEW timeline_counter_windows AS
FROM timeline_counter_windows(1000);

-- @view _timeline_stream_waits
-- Each kernel that waited, through a Stream Wait Event, on another stream's work: the
-- kernel (its stream and start) and the GPU operation it depends on (its stream,
-- family, kind, bytes and end).
CREATE VIEW _timeline_stream_waits AS
WITH calls AS (
    SELECT run_id, coalesce(rank, -1) AS rank, correlation, min(ts_us) AS call_us
    FROM _timeline_events_files
    WHERE category = 'cuda_runtime' AND correlation IS NOT NULL
    GROUP BY ALL
), launched AS (
    SELECT g.run_id, g.rank, g.stream, g.s, g.e, g.family, g.kind, g.bytes, c.call_us
    FROM _timeline_gpu_events AS g
    JOIN calls AS c USING (run_id, rank, correlation)
), waits AS (
    SELECT w.run_id, coalesce(w.rank, -1) AS rank, w.stream, w.wait_on_stream,
           coalesce(waited.call_us, w.ts_us) AS wait_us, record.call_us AS record_us
    FROM _timeline_events_files AS w
    JOIN calls AS record
        ON w.run_id = record.run_id AND coalesce(w.rank, -1) = record.rank
       AND w.wait_on_correlation = record.correlation
    LEFT JOIN calls AS waited
        ON w.run_id = waited.run_id AND coalesce(w.rank, -1) = waited.rank
       AND w.correlation = waited.correlation
    WHERE w.name = 'Stream Wait Event' AND w.stream IS NOT NULL
      AND w.wait_on_stream IS NOT NULL
), waited_on AS (  -- the operation last launched on the stream waited on before the record
    SELECT w.run_id, w.rank, w.stream, w.wait_us, op.stream AS waited_stream,
           op.family AS waited_family, op.kind AS waited_kind, op.bytes AS waited_bytes,
           op.e AS waited_end
    FROM waits AS w
    ASOF JOIN launched AS op
        ON w.run_id = op.run_id AND w.rank = op.rank AND w.wait_on_stream = op.stream
       AND w.record_us >= op.call_us
)
SELECT w.run_id, w.rank, w.stream, k.s AS kernel_start, w.waited_stream, w.waited_family,
       w.waited_kind, w.waited_bytes, w.waited_end
FROM waited_on AS w
ASOF JOIN (FROM launched WHERE family = 'kernel') AS k  -- the waiting stream's next kernel
    ON w.run_id = k.run_id AND w.rank = k.rank AND w.stream = k.stream
   AND k.call_us >= w.wait_us;

-- @view timeline_copy_wait_idle
-- Per stream and iteration: idle time between its events (as timeline_idle_breakdown
-- counts it) and the part of it spent waiting on a copy: gaps that end with a kernel
-- which depends on a copy (through a Stream Wait Event), up to that copy's end.
-- @column run_id           the run
-- @column rank             the rank (-1 when unknown)
-- @column iteration        the iteration (-1: outside every ProfilerStep)
-- @column stream           the stream
-- @column idle_us          all gaps between the stream's consecutive events
-- @column copy_wait_us     the part of them waiting on a copy
-- @column copy_wait_share  copy_wait_us / idle_us
-- @column copy_waits       gaps that ended with a kernel waiting on a copy
CREATE VIEW timeline_copy_wait_idle AS
WITH gaps AS (
    SELECT run_id, rank, iteration, stream, s, family,
           max(e) OVER (PARTITION BY run_id, rank, iteration, stream ORDER BY s, e
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS previous_end
    FROM _timeline_gpu
), idle AS (
    SELECT * FROM gaps WHERE previous_end IS NOT NULL AND s > previous_end
), waiting AS (
    SELECT i.run_id, i.rank, i.iteration, i.stream, i.s, any_value(i.previous_end) AS gap_start,
           least(i.s, max(w.waited_end)) - any_value(i.previous_end) AS waited
    FROM idle AS i
    JOIN _timeline_stream_waits AS w
        ON i.run_id = w.run_id AND i.rank = w.rank AND i.stream = w.stream
       AND i.s = w.kernel_start AND i.family = 'kernel' AND w.waited_family = 'memcpy'
       AND w.waited_end > i.previous_end
    GROUP BY i.run_id, i.rank, i.iteration, i.stream, i.s
)
SELECT i.run_id, i.rank, i.iteration, i.stream, sum(i.s - i.previous_end) AS idle_us,
       coalesce(sum(w.waited), 0) AS copy_wait_us,
       coalesce(sum(w.waited), 0) / sum(i.s - i.previous_end) AS copy_wait_share,
       count(w.waited) AS copy_waits
FROM idle AS i
LEFT JOIN waiting AS w USING (run_id, rank, iteration, stream, s)
GROUP BY i.run_id, i.rank, i.iteration, i.stream
ORDER BY i.run_id, i.rank, i.iteration, i.stream;

-- @macro timeline_counter_thrash(evicted, loaded, window_us)
-- Thrash from named counters: an offloader that writes one value of counter evicted
-- (default kv_evict) per eviction and one of loaded (default kv_load) per load, naming
-- the block in the labels (e.g. {"layer": 3, "block": 17}), gives per rank the
-- evictions, those whose block (same labels) was loaded again later, and those loaded
-- again within window_us (default a second).
-- @column run_id          the run
-- @column rank            the rank (-1 when unknown)
-- @column evictions       values of the evicted counter
-- @column reloaded        evictions whose block was loaded again later
-- @column thrashed        ... within window_us
-- @column thrash_share    thrashed / evictions
-- @column median_reload_us  median time from eviction to the next load, of those reloaded
CREATE MACRO timeline_counter_thrash(
    evicted := 'kv_evict', loaded := 'kv_load', window_us := 1000000
) AS TABLE
WITH evictions AS (
    SELECT run_id, coalesce(rank, -1) AS rank, labels, ts_us, event_idx
    FROM timeline_counters
    WHERE counter = evicted
), loads AS (
    SELECT run_id, coalesce(rank, -1) AS rank, labels, ts_us AS loaded_us
    FROM timeline_counters
    WHERE counter = loaded
), next_loads AS (
    SELECT e.run_id, e.rank, e.ts_us, l.loaded_us
    FROM evictions AS e
    ASOF LEFT JOIN loads AS l
        ON e.run_id = l.run_id AND e.rank = l.rank AND e.labels = l.labels
       AND l.loaded_us > e.ts_us
)
SELECT run_id, rank, count(*) AS evictions,
       count(loaded_us) AS reloaded,
       count(*) FILTER (WHERE loaded_us - ts_us <= window_us) AS thrashed,
       thrashed / count(*) AS thrash_share,
       median(loaded_us - ts_us) AS median_reload_us
FROM next_loads
GROUP BY run_id, rank
ORDER BY run_id, rank;
