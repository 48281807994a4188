-- Queries of the timeline report.  Every query reads only the runs in report_runs.

-- @query stream_busy
-- Busy and idle time per stream and iteration (microseconds), for the stacked bars:
-- run, iteration, stream, state (busy or idle), us.
SELECT r.run_name AS run, b.iteration, 'stream ' || b.stream AS stream, s.state, s.us
FROM timeline_stream_busy AS b
JOIN report_runs AS r USING (run_id),
LATERAL (VALUES ('busy', b.busy_us), ('idle', b.idle_us)) AS s(state, us)
ORDER BY run, b.iteration, stream, s.state;

-- @query copy_overlap
-- Copy time hidden behind kernels and exposed, per iteration and direction.
SELECT r.run_name AS run, c.iteration, c.copy_kind, c.copies, c.bytes, c.copy_us,
       c.overlapped_us, c.exposed_us, c.hidden_share
FROM timeline_copy_overlap AS c
JOIN report_runs AS r USING (run_id)
ORDER BY run, c.iteration, c.copy_kind;

-- @query copy_bars
-- The same as bars: run, iteration, copy_kind, part (hidden or exposed), us.
SELECT r.run_name AS run, c.iteration, c.copy_kind, p.part, p.us
FROM timeline_copy_overlap AS c
JOIN report_runs AS r USING (run_id),
LATERAL (VALUES ('hidden', c.overlapped_us), ('exposed', c.exposed_us)) AS p(part, us)
ORDER BY run, c.iteration, c.copy_kind, p.part;

-- @query kernel_breakdown
-- GPU time per kernel type (HTA's computation, communication, memory) and rank.
SELECT r.run_name AS run, k.rank, k.kernel_type, k.kernels, k.total_us, k.share
FROM timeline_kernel_breakdown AS k
JOIN report_runs AS r USING (run_id)
ORDER BY run, k.rank, k.total_us DESC;

-- @query top_kernels
-- The 15 kernels with the most GPU time per run: name (its first 100 characters: C++
-- template names run long), launches, total and mean time.
SELECT run, CASE WHEN length(name) > 100 THEN left(name, 100) || '...' ELSE name END AS name,
       launches, total_us, mean_us
FROM (
    SELECT r.run_name AS run, e.name, count(*) AS launches, sum(e.dur_us) AS total_us,
           avg(e.dur_us) AS mean_us,
           row_number() OVER (PARTITION BY r.run_name ORDER BY sum(e.dur_us) DESC) AS place
    FROM timeline_events AS e
    JOIN report_runs AS r USING (run_id)
    WHERE e.category = 'kernel'
    GROUP BY r.run_name, e.name
)
WHERE place <= 15
ORDER BY run, total_us DESC;
