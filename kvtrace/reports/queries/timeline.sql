-- Queries of the timeline report.  Every query reads only the runs in report_runs.

-- @query stream_busy
-- Busy and idle time per stream and iteration (microseconds) of each run's lowest rank
-- (ranks are not added up), for the stacked bars: run, rank, lane (run and stream),
-- iteration, state (busy or idle), us.
WITH lowest AS (
    SELECT run_id, min(rank) AS rank FROM timeline_stream_busy GROUP BY run_id
)
SELECT r.run_name AS run, b.rank, r.run_name || ' · stream ' || b.stream AS lane, b.iteration,
       s.state, s.us
FROM timeline_stream_busy AS b
JOIN lowest USING (run_id, rank)
JOIN report_runs AS r USING (run_id),
LATERAL (VALUES ('busy', b.busy_us), ('idle', b.idle_us)) AS s(state, us)
WHERE b.iteration >= 0
ORDER BY run, lane, b.iteration, s.state;

-- @query copy_overlap
-- Copy time hidden behind kernels and exposed, per iteration and direction.
SELECT r.run_name AS run, c.iteration, c.copy_kind, c.copies, c.bytes, c.copy_us,
       c.overlapped_us, c.exposed_us, c.hidden_share
FROM timeline_copy_overlap AS c
JOIN report_runs AS r USING (run_id)
ORDER BY run, c.iteration, c.copy_kind;

-- @query copy_bars
-- The same as bars, for each run's lowest rank: run, rank, lane (run and copy direction),
-- iteration, part (hidden or exposed), us.
WITH lowest AS (
    SELECT run_id, min(rank) AS rank FROM timeline_copy_overlap GROUP BY run_id
)
SELECT r.run_name AS run, c.rank, r.run_name || ' · ' || c.copy_kind AS lane, c.iteration,
       p.part, p.us
FROM timeline_copy_overlap AS c
JOIN lowest USING (run_id, rank)
JOIN report_runs AS r USING (run_id),
LATERAL (VALUES ('hidden', c.overlapped_us), ('exposed', c.exposed_us)) AS p(part, us)
ORDER BY run, lane, c.iteration, p.part;

-- @query kernel_breakdown
-- GPU time per kernel type (HTA's computation, communication, memory) and rank.
SELECT r.run_name AS run, k.rank, k.kernel_type, k.kernels, k.total_us, k.share
FROM timeline_kernel_breakdown AS k
JOIN report_runs AS r USING (run_id)
ORDER BY run, k.rank, k.total_us DESC;

-- @query top_kernels
-- The 15 kernels with the most GPU time per run and rank: name (its first 100
-- characters: C++ template names run long), launches, total time and the distribution of
-- one launch's duration (timeline_kernel_durations: linear percentiles).
SELECT run, rank, CASE WHEN length(name) > 100 THEN left(name, 100) || '...' ELSE name END
           AS name,
       kernels AS launches, total_us, mean_us, p50_us, p90_us, p99_us, max_us
FROM (
    SELECT r.run_name AS run, d.*,
           row_number() OVER (PARTITION BY r.run_name, d.rank ORDER BY d.total_us DESC)
               AS place
    FROM timeline_kernel_durations AS d
    JOIN report_runs AS r USING (run_id)
    WHERE d.kernel_type IN ('computation', 'communication')
)
WHERE place <= 15
ORDER BY run, rank, total_us DESC;

-- @query temporal_breakdown
-- HTA's temporal breakdown per rank over the whole trace: idle, compute and other GPU
-- time against the span from the first GPU event to the last (microseconds and shares),
-- with kvtrace's definitions and with HTA's (which count CUDA syncs as GPU time).
SELECT r.run_name AS run, t.rank, t.definitions, t.kernel_time_us, t.idle_us,
       t.compute_us, t.non_compute_us, t.idle_share, t.compute_share, t.non_compute_share
FROM (SELECT 'kvtrace' AS definitions, * FROM timeline_temporal_breakdown
      UNION ALL
      SELECT 'hta', * FROM timeline_temporal_breakdown(definitions := 'hta')) AS t
JOIN report_runs AS r USING (run_id)
ORDER BY run, t.rank, t.definitions DESC;

-- @query comm_comp_overlap
-- HTA's communication / computation overlap per rank: the share of NCCL time during
-- which a computation kernel ran.
SELECT r.run_name AS run, o.rank, o.comm_us, o.overlapped_us, o.overlap_share
FROM timeline_comm_comp_overlap AS o
JOIN report_runs AS r USING (run_id)
ORDER BY run, o.rank;

-- @query gantt
-- One iteration per run as a Gantt chart, stream by stream: of the run's lowest rank,
-- the iteration whose GPU window is the median one (a typical iteration, not the
-- warm-up or the slowest); each stream's events of one kind (computation,
-- communication, a copy direction, ...) merged into busy intervals.  Columns: run,
-- iteration, stream, what, start_us and end_us from the iteration's first GPU event.
WITH windows AS (
    SELECT g.run_id, g.rank, g.iteration, min(g.s) AS first_s, max(g.e) - min(g.s) AS window_us
    FROM _timeline_gpu AS g
    JOIN report_runs USING (run_id)
    WHERE g.iteration >= 0
    GROUP BY ALL
), ranked AS (
    SELECT *, row_number() OVER (PARTITION BY run_id ORDER BY window_us, iteration) AS place,
           count(*) OVER (PARTITION BY run_id) AS iterations
    FROM windows
    WHERE rank = (SELECT min(w.rank) FROM windows AS w WHERE w.run_id = windows.run_id)
), chosen AS (
    SELECT run_id, rank, iteration, first_s FROM ranked WHERE place = (iterations + 1) // 2
), lanes AS (
    SELECT DISTINCT g.run_id, g.rank, g.iteration, g.stream,
           CASE WHEN g.family = 'memcpy' THEN g.kind ELSE g.kernel_type END AS what
    FROM _timeline_gpu AS g
    JOIN chosen USING (run_id, rank, iteration)
)
SELECT r.run_name AS run, c.iteration, 'stream ' || l.stream AS stream, l.what,
       u.s - c.first_s AS start_us, u.e - c.first_s AS end_us
FROM lanes AS l
JOIN chosen AS c USING (run_id, rank, iteration)
JOIN report_runs AS r USING (run_id),
LATERAL (FROM _timeline_union([l.what], [l.stream])) AS u
WHERE u.run_id = l.run_id AND u.rank = l.rank AND u.iteration = l.iteration
ORDER BY run, stream, start_us, what, end_us;

-- @query copy_bandwidth
-- The bandwidth of copies of at least 1 MB (smaller ones measure latency), per run and
-- direction, in about 20 bins fitted to each run's bandwidths (_bin_width): run,
-- copy_kind, gbps and gbps_end (the bin's edges), copies.
WITH copies AS (
    SELECT r.run_name AS run, e.copy_kind, e.bytes / (e.dur_us * 1e3) AS rate
    FROM timeline_events AS e
    JOIN report_runs AS r USING (run_id)
    WHERE e.category = 'gpu_memcpy' AND e.bytes >= 1048576 AND e.dur_us > 0
), widths AS (SELECT run, _bin_width(min(rate), max(rate), 20) AS w FROM copies GROUP BY run)
SELECT run, copy_kind, round(floor(rate / w) * w, 12) AS gbps,
       round((floor(rate / w) + 1) * w, 12) AS gbps_end, count(*) AS copies
FROM copies JOIN widths USING (run)
GROUP BY ALL
ORDER BY run, copy_kind, gbps;

-- @query critical_path
-- The critical path of each run's first ProfilerStep (kvtrace's definitions), per rank,
-- by what bounds it: run, rank, bound_by, duration_us, share of the path.
SELECT r.run_name AS run, c.rank, c.bound_by, c.duration_us, c.share
FROM timeline_critical_path_summary() AS c
JOIN report_runs AS r USING (run_id)
WHERE c.duration_us > 0
ORDER BY run, c.rank, c.duration_us DESC;

-- @query kernel_sequences
-- The 10 most frequent kernel sequences of the outermost aten:: operators (at least one
-- kernel each) per run and rank: the operator and its kernels' names joined by '|' (the
-- first 160 characters), how often the sequence ran and its GPU and CPU time.
SELECT r.run_name AS run, k.rank, k.place, k.count, k.kernels,
       round(k.gpu_kernel_us) AS gpu_kernel_us, round(k.cpu_op_us) AS cpu_op_us,
       left(k.pattern, 160) AS pattern
FROM timeline_kernel_sequences('aten::', min_pattern_len := 1, top_k := 10) AS k
JOIN report_runs AS r USING (run_id)
ORDER BY run, k.rank, k.place;
