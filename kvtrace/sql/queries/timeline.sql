-- Profiler timelines (Kineto / Chrome traces): stream busy time, overlap, copy exposure.
--
-- GPU events are those with a CUDA stream (kernels, copies, memsets).  Time on a stream
-- or a set of streams is the length of the union of its events' intervals, never the
-- sum of overlapping durations.  An iteration is a ProfilerStep#N; its GPU window runs
-- from its first GPU event's start to its last GPU event's end, per rank.  A copy is
-- overlapped where a computation kernel (on any stream) runs at the same time; the rest
-- of its time is exposed.  Kernel types follow HTA's names: communication (^nccl.*Kernel),
-- memory (copies, memsets, names starting Memcpy, Memset or dma), other (names with
-- Memcpy or Sync, or starting Memset) and computation (every other kernel).
--
-- Worked example: kernels on stream 7 at [10, 40) and [50, 70) us and an HtoD copy on
-- stream 20 at [30, 60): the copy is overlapped for [30, 40) and [50, 60), 20 of its 30
-- us, and 10 us are exposed.  An all-reduce (ncclDevKernel_AllReduce) on stream 30 at
-- [40, 50) would not hide the rest: it is communication, not compute.
--
-- @requires runs.sql

-- @view _timeline_steps
-- The iterations: one row per ProfilerStep#N span, per run and rank (-1 when unknown).
CREATE VIEW _timeline_steps AS
SELECT run_id, coalesce(rank, -1) AS rank, ts_us AS step_start, ts_us + dur_us AS step_end,
       CAST(regexp_extract(name, '^ProfilerStep#(\d+)$', 1) AS BIGINT) AS iteration
FROM _timeline_events_files
WHERE regexp_matches(name, '^ProfilerStep#\d+$');

-- @view timeline_events
-- One row per complete event of a profiler trace.
-- @column run_id       the run
-- @column rank         the rank that wrote the trace (distributedInfo), when known
-- @column event_idx    the event's place in traceEvents
-- @column pid          process id (or the trace's name for it)
-- @column tid          thread id, or the stream for GPU events
-- @column stream       CUDA stream of GPU events, else NULL
-- @column device       GPU of GPU events
-- @column category     kernel, gpu_memcpy, gpu_memset, cpu_op, cuda_runtime, user_annotation, ...
-- @column name         the event's name
-- @column ts_us        start, microseconds (the trace's clock)
-- @column dur_us       duration, microseconds
-- @column correlation  links a CUDA launch to its GPU event
-- @column external_id  links a GPU event to its CPU operator
-- @column copy_kind    HtoD, DtoH, DtoD, ... for copies
-- @column bytes        bytes copied or set
-- @column wait_on_stream       for a Stream Wait Event: the stream whose event it waits on
-- @column wait_on_correlation  ... and the correlation of that event's cudaEventRecord
-- @column memory_bw_gbps       a copy's or memset's bandwidth as the profiler gave it, GB/s
-- @column iteration    the ProfilerStep#N the event starts in (NULL outside every step)
CREATE VIEW timeline_events AS
SELECT e.*, s.iteration
FROM _timeline_events_files AS e
LEFT JOIN _timeline_steps AS s
    ON e.run_id = s.run_id AND coalesce(e.rank, -1) = s.rank
   AND e.ts_us >= s.step_start AND e.ts_us < s.step_end;

-- @view _timeline_gpu_events
-- GPU events with their interval, a family (kernel, memcpy or memset), a kind (kernel,
-- the copy kind: HtoD, DtoH, ...; copy when the name gives none; or memset) and HTA's
-- kernel type (computation, communication, memory or other).  No iteration: analyses of
-- the whole trace skip the join that finds it.
CREATE VIEW _timeline_gpu_events AS
SELECT run_id, coalesce(rank, -1) AS rank, stream, ts_us AS s, ts_us + dur_us AS e, name,
       category, bytes, dur_us, correlation,
       CASE WHEN category = 'kernel' THEN 'kernel'
            WHEN category = 'gpu_memcpy' THEN 'memcpy'
            ELSE 'memset' END AS family,
       -- HTA's patterns ^nccl.*Kernel, ^(Memcpy|Memset|dma) and ^(.*Memcpy|Memset|.*Sync)
       CASE WHEN starts_with(name, 'nccl') AND contains(name[5:], 'Kernel')
                THEN 'communication'
            WHEN category IN ('gpu_memcpy', 'gpu_memset') OR starts_with(name, 'Memcpy')
                 OR starts_with(name, 'Memset') OR starts_with(name, 'dma') THEN 'memory'
            WHEN contains(name, 'Memcpy') OR contains(name, 'Sync') THEN 'other'
            ELSE 'computation' END AS kernel_type,
       CASE WHEN category = 'kernel' THEN 'kernel'
            WHEN category = 'gpu_memcpy' THEN coalesce(copy_kind, 'copy')
            ELSE 'memset' END AS kind
FROM _timeline_events_files
WHERE stream IS NOT NULL AND category IN ('kernel', 'gpu_memcpy', 'gpu_memset');

-- @view _timeline_gpu
-- `_timeline_gpu_events` with the iteration each event starts in (-1: outside every
-- ProfilerStep).
CREATE VIEW _timeline_gpu AS
SELECT g.*, coalesce(t.iteration, -1) AS iteration
FROM _timeline_gpu_events AS g
LEFT JOIN _timeline_steps AS t
    ON g.run_id = t.run_id AND g.rank = t.rank AND g.s >= t.step_start AND g.s < t.step_end;

-- @macro _timeline_union(kinds, streams, by_iteration)
-- The union of the intervals of GPU events whose kind, family or kernel type is in kinds
-- (and whose stream is in streams; an empty list takes every stream), per run, rank and
-- iteration (or, with by_iteration := false, over the whole trace, as iteration -1):
-- disjoint [s, e) intervals.
CREATE MACRO _timeline_union(kinds, streams, by_iteration := true) AS TABLE
WITH chosen AS (
    SELECT run_id, rank, -1 AS iteration, s, e, kind, family, kernel_type, stream
    FROM _timeline_gpu_events
    WHERE NOT by_iteration
    UNION ALL
    SELECT run_id, rank, iteration, s, e, kind, family, kernel_type, stream
    FROM _timeline_gpu
    WHERE by_iteration
), picked AS (
    SELECT run_id, rank, iteration, s, e
    FROM chosen
    WHERE (list_contains(kinds, kind) OR list_contains(kinds, family)
           OR list_contains(kinds, kernel_type))
      AND (len(streams) = 0 OR list_contains(streams, stream))
), marked AS (
    SELECT *, max(e) OVER (PARTITION BY run_id, rank, iteration ORDER BY s, e
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM picked
), grouped AS (
    SELECT *, sum(CASE WHEN reach IS NULL OR s > reach THEN 1 ELSE 0 END)
                  OVER (PARTITION BY run_id, rank, iteration ORDER BY s, e
                        ROWS UNBOUNDED PRECEDING) AS piece
    FROM marked
)
SELECT run_id, rank, iteration, min(s) AS s, max(e) AS e
FROM grouped
GROUP BY run_id, rank, iteration, piece;

-- @macro _timeline_busy(kinds, streams, by_iteration)
-- The length of `_timeline_union(kinds, streams, by_iteration)` per run, rank and
-- iteration.  Two sets overlap for busy(A) + busy(B) - busy(A and B together), which
-- over a whole trace is much faster than joining interval to interval (within one
-- iteration the join is faster: its partitions are small).
CREATE MACRO _timeline_busy(kinds, streams, by_iteration := true) AS TABLE
SELECT run_id, rank, iteration, sum(e - s) AS busy_us
FROM _timeline_union(kinds, streams, by_iteration := by_iteration)
GROUP BY run_id, rank, iteration;

-- @view timeline_stream_busy
-- Per stream and iteration: busy time (union of its events), idle time and utilization
-- against the iteration's GPU window on that rank.
-- @column run_id       the run
-- @column rank         the rank (-1 when unknown)
-- @column iteration    the iteration (-1: outside every ProfilerStep)
-- @column stream       the CUDA stream
-- @column busy_us      time with at least one event of the stream running
-- @column window_us    the iteration's GPU window on the rank
-- @column idle_us      window_us - busy_us
-- @column utilization  busy_us / window_us
CREATE VIEW timeline_stream_busy AS
WITH merged AS (
    SELECT st.stream, u.*
    FROM (SELECT DISTINCT stream FROM _timeline_gpu) AS st,
         LATERAL (FROM _timeline_union(['kernel', 'memcpy', 'memset'], [st.stream])) AS u
), windows AS (
    SELECT run_id, rank, iteration, max(e) - min(s) AS window_us
    FROM _timeline_gpu
    GROUP BY run_id, rank, iteration
)
SELECT m.run_id, m.rank, m.iteration, m.stream, sum(m.e - m.s) AS busy_us,
       any_value(w.window_us) AS window_us, any_value(w.window_us) - sum(m.e - m.s) AS idle_us,
       sum(m.e - m.s) / nullif(any_value(w.window_us), 0) AS utilization
FROM merged AS m
JOIN windows AS w USING (run_id, rank, iteration)
GROUP BY m.run_id, m.rank, m.iteration, m.stream
ORDER BY m.run_id, m.rank, m.iteration, m.stream;

-- @macro timeline_overlap(streams_a, streams_b)
-- Per iteration: how long two sets of streams ran at the same time (lists of stream
-- numbers; an empty list is every stream).
-- @column run_id          the run
-- @column rank            the rank (-1 when unknown)
-- @column iteration       the iteration (-1: outside every ProfilerStep)
-- @column a_busy_us       union of the busy time of streams_a
-- @column b_busy_us       union of the busy time of streams_b
-- @column overlap_us      time both sets were busy
-- @column a_overlapped    overlap_us / a_busy_us
CREATE MACRO timeline_overlap(streams_a, streams_b) AS TABLE
WITH a AS (
    FROM _timeline_union(['kernel', 'memcpy', 'memset'], streams_a::BIGINT[])
), b AS (
    FROM _timeline_union(['kernel', 'memcpy', 'memset'], streams_b::BIGINT[])
), busy_a AS (
    SELECT run_id, rank, iteration, sum(e - s) AS busy FROM a GROUP BY ALL
), busy_b AS (
    SELECT run_id, rank, iteration, sum(e - s) AS busy FROM b GROUP BY ALL
), both_busy AS (
    SELECT a.run_id, a.rank, a.iteration, sum(least(a.e, b.e) - greatest(a.s, b.s)) AS o
    FROM a JOIN b ON a.run_id = b.run_id AND a.rank = b.rank
                 AND a.iteration = b.iteration AND a.s < b.e AND b.s < a.e
    GROUP BY a.run_id, a.rank, a.iteration
)
SELECT x.run_id, x.rank, x.iteration, x.busy AS a_busy_us, y.busy AS b_busy_us,
       coalesce(o.o, 0) AS overlap_us, coalesce(o.o, 0) / nullif(x.busy, 0) AS a_overlapped
FROM busy_a AS x
JOIN busy_b AS y USING (run_id, rank, iteration)
LEFT JOIN both_busy AS o USING (run_id, rank, iteration)
ORDER BY x.run_id, x.rank, x.iteration;

-- @view timeline_copy_overlap
-- The seed's question, per iteration and copy direction: how much of the copy time hid
-- behind computation kernels, and how much was exposed.
-- @column run_id         the run
-- @column rank           the rank (-1 when unknown)
-- @column iteration      the iteration (-1: outside every ProfilerStep)
-- @column copy_kind      HtoD, DtoH, DtoD, ...
-- @column copies         copies of that kind
-- @column bytes          bytes they moved
-- @column copy_us        union of their busy time
-- @column overlapped_us  of it, time some computation kernel was running
-- @column exposed_us     copy_us - overlapped_us
-- @column hidden_share   overlapped_us / copy_us
CREATE VIEW timeline_copy_overlap AS
WITH kinds AS (
    SELECT DISTINCT kind FROM _timeline_gpu_events WHERE family = 'memcpy'
), copies AS (
    SELECT k.kind, u.* FROM kinds AS k, LATERAL (FROM _timeline_union([k.kind], [])) AS u
), kernels AS (
    FROM _timeline_union(['computation'], [])
), hidden AS (
    SELECT c.run_id, c.rank, c.iteration, c.kind,
           sum(least(c.e, k.e) - greatest(c.s, k.s)) AS overlapped
    FROM copies AS c
    JOIN kernels AS k ON c.run_id = k.run_id AND c.rank = k.rank
                      AND c.iteration = k.iteration AND c.s < k.e AND k.s < c.e
    GROUP BY c.run_id, c.rank, c.iteration, c.kind
), totals AS (
    SELECT run_id, rank, iteration, kind, sum(e - s) AS copy_us FROM copies GROUP BY ALL
), counts AS (
    SELECT run_id, rank, iteration, kind, count(*) AS copies, sum(bytes) AS bytes
    FROM _timeline_gpu GROUP BY ALL
)
SELECT t.run_id, t.rank, t.iteration, t.kind AS copy_kind, n.copies, n.bytes, t.copy_us,
       coalesce(h.overlapped, 0) AS overlapped_us, t.copy_us - coalesce(h.overlapped, 0)
           AS exposed_us,
       coalesce(h.overlapped, 0) / nullif(t.copy_us, 0) AS hidden_share
FROM totals AS t
JOIN counts AS n USING (run_id, rank, iteration, kind)
LEFT JOIN hidden AS h USING (run_id, rank, iteration, kind)
ORDER BY t.run_id, t.rank, t.iteration, copy_kind;

-- @macro timeline_copy_bandwidth(peak_gbps)
-- The bandwidth of copies per direction as a distribution, against a peak (GB/s, e.g.
-- 64 for PCIe 5.0 x16 in one direction; default 25): copies of at least 1 MB only, since
-- small copies measure latency, not bandwidth.
-- @column run_id        the run
-- @column copy_kind     HtoD, DtoH, DtoD, ...
-- @column copies        copies of at least 1 MB
-- @column gbps_p10      10th percentile of bytes / duration, GB/s
-- @column gbps_p50      median bandwidth, GB/s
-- @column gbps_p90      90th percentile, GB/s
-- @column p50_of_peak   gbps_p50 / peak_gbps
CREATE MACRO timeline_copy_bandwidth(peak_gbps := 25.0) AS TABLE
WITH copies AS (
    SELECT run_id, copy_kind, bytes / (dur_us * 1e3) AS gbps
    FROM timeline_events
    WHERE category = 'gpu_memcpy' AND bytes >= 1048576 AND dur_us > 0
), spread AS (
    SELECT run_id, copy_kind, count(*) AS copies, quantile_cont(gbps, 0.1) AS gbps_p10,
           quantile_cont(gbps, 0.5) AS gbps_p50, quantile_cont(gbps, 0.9) AS gbps_p90
    FROM copies
    GROUP BY run_id, copy_kind
)
SELECT *, gbps_p50 / peak_gbps AS p50_of_peak
FROM spread
ORDER BY run_id, copy_kind;

-- @macro timeline_copy_by_annotation(name_pattern)
-- Copy time hidden or exposed inside annotated spans (user_annotation or
-- gpu_user_annotation events whose name matches the regular expression, e.g.
-- '^layer_\d+$' where an engine marks its layers), summed per annotation name over its
-- spans: which layer's weights or KV blocks arrive late.
-- @column run_id         the run
-- @column rank           the rank (-1 when unknown)
-- @column annotation     the annotation's name
-- @column spans          spans of that name
-- @column copy_us        copy time (union of all copies) inside the spans
-- @column overlapped_us  of it, time some computation kernel was running
-- @column exposed_us     copy_us - overlapped_us
CREATE MACRO timeline_copy_by_annotation(name_pattern) AS TABLE
WITH spans AS (
    SELECT run_id, coalesce(rank, -1) AS rank, name AS annotation, ts_us AS s,
           ts_us + dur_us AS e
    FROM timeline_events
    WHERE category IN ('user_annotation', 'gpu_user_annotation')
      AND regexp_matches(name, name_pattern)
), copies AS (
    FROM _timeline_union(['memcpy'], [])
), kernels AS (
    FROM _timeline_union(['computation'], [])
), hidden AS (
    SELECT c.run_id, c.rank, greatest(c.s, k.s) AS s, least(c.e, k.e) AS e
    FROM copies AS c
    JOIN kernels AS k ON c.run_id = k.run_id AND c.rank = k.rank
                      AND c.iteration = k.iteration AND c.s < k.e AND k.s < c.e
), copy_in AS (
    SELECT a.run_id, a.rank, a.annotation, a.s, sum(least(c.e, a.e) - greatest(c.s, a.s))
               AS us
    FROM spans AS a
    JOIN copies AS c ON a.run_id = c.run_id AND a.rank = c.rank AND c.s < a.e AND a.s < c.e
    GROUP BY a.run_id, a.rank, a.annotation, a.s
), hidden_in AS (
    SELECT a.run_id, a.rank, a.annotation, a.s, sum(least(h.e, a.e) - greatest(h.s, a.s))
               AS us
    FROM spans AS a
    JOIN hidden AS h ON a.run_id = h.run_id AND a.rank = h.rank AND h.s < a.e AND a.s < h.e
    GROUP BY a.run_id, a.rank, a.annotation, a.s
)
SELECT a.run_id, a.rank, a.annotation, count(*) AS spans,
       coalesce(sum(c.us), 0) AS copy_us, coalesce(sum(h.us), 0) AS overlapped_us,
       coalesce(sum(c.us), 0) - coalesce(sum(h.us), 0) AS exposed_us
FROM spans AS a
LEFT JOIN copy_in AS c USING (run_id, rank, annotation, s)
LEFT JOIN hidden_in AS h USING (run_id, rank, annotation, s)
GROUP BY a.run_id, a.rank, a.annotation
ORDER BY a.run_id, a.rank, a.annotation;

-- @macro timeline_diff(run_a, run_b)
-- HTA's trace diff between two runs (names or ids, the latest run of a name): per CPU
-- operator and GPU kernel name, how often and for how long it ran in each, and whether
-- run b added it, removed it, or changed its count or time.
-- @column kind           cpu_op or kernel
-- @column name           the operator or kernel
-- @column count_a        times it ran in run a
-- @column count_b        times it ran in run b
-- @column total_us_a     its summed duration in run a
-- @column total_us_b     its summed duration in run b
-- @column count_diff     count_b - count_a
-- @column total_us_diff  total_us_b - total_us_a
-- @column status         added, removed, changed or same
CREATE MACRO timeline_diff(run_a, run_b) AS TABLE
WITH ids AS (
    SELECT (SELECT run_id FROM runs_named([run_a])
            ORDER BY by_id DESC, started_at DESC NULLS LAST LIMIT 1) AS a,
           (SELECT run_id FROM runs_named([run_b])
            ORDER BY by_id DESC, started_at DESC NULLS LAST LIMIT 1) AS b
), sides AS (
    SELECT CASE WHEN e.run_id = ids.a THEN 'a' ELSE 'b' END AS side,
           CASE WHEN e.category = 'cpu_op' THEN 'cpu_op' ELSE 'kernel' END AS kind,
           e.name, count(*) AS n, sum(e.dur_us) AS total_us
    FROM _timeline_events_files AS e, ids
    WHERE e.run_id IN (ids.a, ids.b)
      AND (e.category = 'cpu_op' OR (e.stream IS NOT NULL
           AND e.category IN ('kernel', 'gpu_memcpy', 'gpu_memset')))
    GROUP BY ALL
), paired AS (
    SELECT kind, name,
           coalesce(sum(n) FILTER (WHERE side = 'a'), 0) AS count_a,
           coalesce(sum(n) FILTER (WHERE side = 'b'), 0) AS count_b,
           coalesce(sum(total_us) FILTER (WHERE side = 'a'), 0) AS total_us_a,
           coalesce(sum(total_us) FILTER (WHERE side = 'b'), 0) AS total_us_b
    FROM sides GROUP BY kind, name
)
SELECT kind, name, count_a, count_b, total_us_a, total_us_b, count_b - count_a AS count_diff,
       total_us_b - total_us_a AS total_us_diff,
       CASE WHEN count_a = 0 THEN 'added' WHEN count_b = 0 THEN 'removed'
            WHEN count_a <> count_b OR total_us_a <> total_us_b THEN 'changed'
            ELSE 'same' END AS status
FROM paired, ids
WHERE ids.a IS NOT NULL AND ids.b IS NOT NULL
   OR error('timeline_diff: no run named ' || CASE WHEN ids.a IS NULL THEN run_a
                                                   ELSE run_b END) IS NULL
ORDER BY abs(total_us_b - total_us_a) DESC, kind, name;
