-- Profiler timeline analyses where kvtrace and Holistic Trace Analysis (HTA 0.5) define
-- things differently.  Each is a macro taking definitions := 'kvtrace' (the default, also
-- the plain view of the same name) or 'hta' (HTA's numbers on the same trace, as
-- TraceAnalysis(include_last_profiler_step=True) gives them):
--
--   temporal breakdown: kvtrace counts kernels, copies and memsets as GPU time; HTA
--     counts every event on a stream, CUDA synchronisation (cuda_sync) included, and
--     types kernels by name only ("Stream Wait Event" becomes computation).  kvtrace's
--     is the work the GPU did; a sync is the GPU waiting, not working.
--   kernel type breakdown: kvtrace sums each type's durations; HTA merges each type's
--     intervals and reports time when types overlap as rows of their own
--     ("computation overlapping memory").  kvtrace's adds up to the work done, HTA's to
--     the wall time covered.
--   communication / computation overlap and kernel durations: kvtrace's kernel types
--     (copies and memsets are memory by their category); HTA's by name, over every
--     event on a stream.
--   queue length: kvtrace counts a kernel from its launch call to its end (it occupies
--     the stream until then); HTA until it starts, and counts copies and memsets too.
--   launch delay: kvtrace measures from the start of the launch call (what the CPU
--     thread sees), HTA from its end, clipped at 0, over kernel, copy and memset
--     launches (cudaLaunchKernel(ExC), cudaMemcpyAsync, cudaMemsetAsync).
--   idle breakdown: kvtrace takes each iteration (ProfilerStep) apart and a gap from
--     the latest end of the stream's earlier events, so a gap across two iterations
--     counts in neither; HTA takes the whole trace and a gap from the previous event's
--     end, so events that overlap on a stream give negative gaps.  Short gaps are
--     kernel_wait up to kernel_wait_us for kvtrace, below it for HTA.
--
-- With 'hta' every analysis reads the events as HTA does (`_timeline_hta_events`):
--   * times in whole microseconds, each event's start rounded up and its end rounded
--     down (HTA's default for Kineto's fractional times, against events that overlap
--     by a fraction).  An event shorter than a microsecond that spans no whole one
--     ends a microsecond before it starts, and HTA's sums count it so.  A trace whose
--     times are all whole stays as it is.
--   * GPU events: those on a stream other than -1 (the Event Sync and Context Sync
--     that a trace puts on stream -1 are left out).
--   * where the run's events carry two or more ProfilerStep names, only GPU events a
--     CPU event shares a correlation id with (HTA drops the rest as launched outside
--     the traced iterations).
--   * where two events start in the same microsecond, HTA's table order: the trace's
--     (a launch before a start in the queue, a start before an end in the memory
--     counters).  HTA itself sorts with numpy's unstable sort, whose order of equal
--     times differs between CPUs; kvtrace's tests run HTA with a stable sort.
-- HTA's kernel types by name: communication ^nccl.*Kernel; memory ^Memcpy, ^Memset or
-- ^dma; other: a name containing Memcpy or Sync, or starting Memset; computation: the
-- rest.  Intervals that touch merge, as HTA merges them.
--
-- Worked example (kernel type breakdown): a computation kernel at [0, 10) us and a copy
-- at [5, 20): kvtrace gives computation 10 and memory 15; HTA gives computation 5,
-- computation overlapping memory 5 and memory 10.  Rounded as HTA rounds, a kernel at
-- [2.4, 7.6) counts as [3, 7) and one at [8.2, 8.7) as 9 to 8, -1 us long.
--
-- @requires timeline.sql

-- @macro _timeline_definitions(definitions)
-- One row naming the definitions asked for, or an error for a name kvtrace lacks.
CREATE MACRO _timeline_definitions(definitions) AS TABLE
SELECT CASE WHEN definitions IN ('kvtrace', 'hta') THEN definitions
            ELSE error('definitions must be ''kvtrace'' or ''hta'', got '
                       || coalesce(definitions, 'NULL')) END AS checked;

-- @macro _timeline_hta_type(name)
-- HTA's kernel type of a GPU event, from its name only.
CREATE MACRO _timeline_hta_type(name) AS
    CASE WHEN regexp_matches(name, '^nccl.*Kernel') THEN 'communication'
         WHEN regexp_matches(name, '^(Memcpy|Memset|dma)') THEN 'memory'
         WHEN regexp_matches(name, '^(.*Memcpy|Memset|.*Sync)') THEN 'other'
         ELSE 'computation' END;

-- @view _timeline_hta_events
-- The events as HTA reads a trace: s and e rounded inwards; stream and correlation -1
-- where a trace gives none; on_gpu for HTA's GPU events (a stream of 0 or more and a
-- correlation id, or an Event Sync or Context Sync); late for the CPU events HTA's table
-- holds after the GPU events (those of runs it filters).  In a run whose events carry
-- two or more ProfilerStep names, a GPU event only where a CPU event kept shares its
-- correlation id, and a CPU event only where its start, counted from the run's first
-- event, is at most the end of its rank's last ProfilerStep (on the trace's clock, as
-- HTA compares them).
CREATE VIEW _timeline_hta_events AS
WITH events AS (
    SELECT run_id, coalesce(rank, -1) AS rank, event_idx, category, name,
           coalesce(stream, -1) AS stream, coalesce(correlation, -1) AS correlation,
           ceil(ts_us) AS s, floor(ts_us + dur_us) AS e, memory_bw_gbps,
           coalesce(stream, -1) >= 0 AND coalesce(correlation, -1) >= 0
               OR name IN ('Event Sync', 'Context Sync') AS on_gpu
    FROM _timeline_events_files
    WHERE category <> 'Trace'
), by_run AS (
    SELECT run_id, min(s) AS first_s,
           count(DISTINCT name) FILTER (WHERE contains(name, 'ProfilerStep')) > 1 AS filtered
    FROM events
    GROUP BY run_id
), last_step AS (
    SELECT run_id, rank, max(e) AS last_end
    FROM events
    WHERE NOT on_gpu AND contains(name, 'ProfilerStep')
    GROUP BY run_id, rank
), cpu AS (
    SELECT ev.*, r.filtered AS late
    FROM events AS ev
    JOIN by_run AS r USING (run_id)
    LEFT JOIN last_step AS l USING (run_id, rank)
    WHERE NOT ev.on_gpu AND (NOT r.filtered OR ev.s - r.first_s <= l.last_end)
)
SELECT * FROM cpu
UNION ALL
SELECT ev.*, false AS late
FROM events AS ev
JOIN by_run AS r USING (run_id)
WHERE ev.on_gpu
  AND (NOT r.filtered
       OR EXISTS (SELECT 1 FROM cpu AS c WHERE c.run_id = ev.run_id AND c.rank = ev.rank
                                          AND c.correlation = ev.correlation));

-- @view _timeline_hta_gpu
-- HTA's GPU events (`_timeline_hta_events` on a stream other than -1) with their
-- duration and HTA's kernel type.
CREATE VIEW _timeline_hta_gpu AS
SELECT run_id, rank, event_idx, late, stream, category, name, correlation, s, e,
       e - s AS dur, memory_bw_gbps, _timeline_hta_type(name) AS kernel_type
FROM _timeline_hta_events
WHERE stream <> -1;

-- @macro _timeline_hta_union(by_type)
-- The merged intervals of `_timeline_hta_gpu` per run and rank, and per kernel type when
-- by_type (kernel_type 'all' otherwise): in start order (ties in HTA's table order), an
-- event joins the piece before it unless it starts after every earlier end; a piece
-- runs from its first start to its latest end (so an event of negative length alone is
-- a piece of -1 us).
CREATE MACRO _timeline_hta_union(by_type) AS TABLE
WITH typed AS (
    SELECT run_id, rank, CASE WHEN by_type THEN kernel_type ELSE 'all' END AS kernel_type,
           s, e, late, event_idx
    FROM _timeline_hta_gpu
), marked AS (
    SELECT *, max(e) OVER (PARTITION BY run_id, rank, kernel_type
                           ORDER BY s, late, event_idx
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM typed
), grouped AS (
    SELECT *, sum(CASE WHEN reach IS NULL OR s > reach THEN 1 ELSE 0 END)
                  OVER (PARTITION BY run_id, rank, kernel_type ORDER BY s, late, event_idx
                        ROWS UNBOUNDED PRECEDING) AS piece
    FROM marked
)
SELECT run_id, rank, kernel_type, min(s) AS s, max(e) AS e
FROM grouped
GROUP BY run_id, rank, kernel_type, piece;

-- @macro _timeline_hta_sweep(weights)
-- Sweep the merged intervals of the kernel types that weights (a map from type to a
-- power of two) names: per run, rank and instant at which some piece starts or ends,
-- the summed weights of the pieces running after every change of that instant (bits),
-- and how long until the next such instant (dur; NULL after the last).  Which changes
-- of one instant apply first does not matter: between them no time passes.
CREATE MACRO _timeline_hta_sweep(weights) AS TABLE
WITH merged AS (
    SELECT run_id, rank, s, e, weights[kernel_type] AS weight
    FROM _timeline_hta_union(true)
    WHERE weights[kernel_type] IS NOT NULL
), changes AS (
    SELECT run_id, rank, s AS t, weight AS delta FROM merged
    UNION ALL
    SELECT run_id, rank, e, -weight FROM merged
), instants AS (
    SELECT run_id, rank, t, sum(delta) AS delta FROM changes GROUP BY run_id, rank, t
)
SELECT run_id, rank, t,
       lead(t) OVER (PARTITION BY run_id, rank ORDER BY t) - t AS dur,
       CAST(sum(delta) OVER (PARTITION BY run_id, rank ORDER BY t
                             ROWS UNBOUNDED PRECEDING) AS BIGINT) AS bits
FROM instants;

-- @macro timeline_temporal_breakdown(definitions)
-- HTA's temporal breakdown per rank, over the whole trace: from the first GPU event's
-- start to the last one's end, the time no GPU event ran (idle), the time a computation
-- kernel ran (compute) and the rest (copies, communication, other kernels alone).
-- @column run_id           the run
-- @column rank             the rank (-1 when unknown)
-- @column kernel_time_us   last GPU event end - first GPU event start
-- @column idle_us          kernel_time_us - union of all GPU events
-- @column compute_us       union of the computation kernels
-- @column non_compute_us   kernel_time_us - compute_us - idle_us
-- @column idle_share       idle_us / kernel_time_us
-- @column compute_share    compute_us / kernel_time_us
-- @column non_compute_share non_compute_us / kernel_time_us
CREATE MACRO timeline_temporal_breakdown(definitions := 'kvtrace') AS TABLE
WITH span AS (
    SELECT run_id, rank, max(e) - min(s) AS kernel_time_us
    FROM _timeline_gpu_events WHERE definitions = 'kvtrace'
    GROUP BY ALL
    UNION ALL
    SELECT run_id, rank, max(e) - min(s)
    FROM _timeline_hta_gpu WHERE definitions = 'hta'
    GROUP BY ALL
), busy AS (
    SELECT run_id, rank, sum(e - s) AS busy_us
    FROM _timeline_union(['kernel', 'memcpy', 'memset'], [], by_iteration := false)
    WHERE definitions = 'kvtrace'
    GROUP BY ALL
    UNION ALL
    SELECT run_id, rank, sum(e - s)
    FROM _timeline_hta_union(false) WHERE definitions = 'hta'
    GROUP BY ALL
), compute AS (
    SELECT run_id, rank, sum(e - s) AS compute_us
    FROM _timeline_union(['computation'], [], by_iteration := false)
    WHERE definitions = 'kvtrace'
    GROUP BY ALL
    UNION ALL
    SELECT run_id, rank, sum(e - s)
    FROM _timeline_hta_union(true) WHERE definitions = 'hta' AND kernel_type = 'computation'
    GROUP BY ALL
), parts AS (
    SELECT run_id, rank, kernel_time_us, kernel_time_us - busy_us AS idle_us,
           coalesce(compute_us, 0) AS compute_us
    FROM span JOIN busy USING (run_id, rank) LEFT JOIN compute USING (run_id, rank)
)
SELECT run_id, rank, kernel_time_us, idle_us, compute_us,
       kernel_time_us - compute_us - idle_us AS non_compute_us,
       idle_us / nullif(kernel_time_us, 0) AS idle_share,
       compute_us / nullif(kernel_time_us, 0) AS compute_share,
       (kernel_time_us - compute_us - idle_us) / nullif(kernel_time_us, 0)
           AS non_compute_share
FROM parts, _timeline_definitions(definitions) AS d
WHERE d.checked IS NOT NULL
ORDER BY run_id, rank;

-- @view timeline_temporal_breakdown
-- timeline_temporal_breakdown() with kvtrace's definitions.
-- @columns_of timeline_temporal_breakdown
CREATE VIEW timeline_temporal_breakdown AS
SELECT * FROM timeline_temporal_breakdown();

-- @macro timeline_kernel_breakdown(definitions)
-- GPU time per kernel type (HTA's: computation, communication, memory, other) and rank.
-- kvtrace: each type's summed durations; hta: each type's merged intervals, with the
-- time types overlap as rows of their own (other kernels left out, as HTA leaves them).
-- A row's types are those whose pieces running add up to it, one bit each (HTA's
-- method: a piece of negative length takes its type away for that time).
-- @column run_id       the run
-- @column rank         the rank (-1 when unknown)
-- @column kernel_type  computation, communication, memory or other (hta: also "A overlapping B")
-- @column kernels      GPU events of the type (NULL for an overlap row)
-- @column total_us     their time
-- @column share        total_us / the rank's total over all rows
CREATE MACRO timeline_kernel_breakdown(definitions := 'kvtrace') AS TABLE
WITH summed AS (
    SELECT run_id, rank, kernel_type, count(*) AS kernels, sum(dur_us) AS total_us
    FROM _timeline_gpu_events WHERE definitions = 'kvtrace'
    GROUP BY run_id, rank, kernel_type
), labelled AS (
    SELECT run_id, rank, dur,
           array_to_string(list_filter(
               [CASE WHEN bits & 1 <> 0 THEN 'computation' END,
                CASE WHEN bits & 2 <> 0 THEN 'communication' END,
                CASE WHEN bits & 4 <> 0 THEN 'memory' END], lambda x: x IS NOT NULL),
               ' overlapping ') AS kernel_type
    FROM _timeline_hta_sweep(MAP {'computation': 1, 'communication': 2, 'memory': 4})
    WHERE definitions = 'hta' AND bits > 0 AND dur <> 0
), counts AS (
    SELECT run_id, rank, kernel_type, count(*) AS kernels
    FROM _timeline_hta_gpu WHERE definitions = 'hta'
    GROUP BY ALL
), overlapped AS (
    SELECT l.run_id, l.rank, l.kernel_type, c.kernels, sum(l.dur) AS total_us
    FROM labelled AS l LEFT JOIN counts AS c USING (run_id, rank, kernel_type)
    GROUP BY l.run_id, l.rank, l.kernel_type, c.kernels
), rows AS (
    SELECT * FROM summed UNION ALL SELECT * FROM overlapped
)
SELECT run_id, rank, kernel_type, kernels, total_us,
       total_us / sum(total_us) OVER (PARTITION BY run_id, rank) AS share
FROM rows, _timeline_definitions(definitions) AS d
WHERE d.checked IS NOT NULL
ORDER BY run_id, rank, total_us DESC;

-- @view timeline_kernel_breakdown
-- timeline_kernel_breakdown() with kvtrace's definitions.
-- @columns_of timeline_kernel_breakdown
CREATE VIEW timeline_kernel_breakdown AS
SELECT * FROM timeline_kernel_breakdown();

-- @macro timeline_comm_comp_overlap(definitions)
-- HTA's communication / computation overlap per rank, over the whole trace: the share of
-- communication time (union of NCCL kernels) during which a computation kernel ran.
-- kvtrace: busy(comm) + busy(comp) - busy(both together); hta: the time between
-- instants at which the merged communication and computation pieces both run (bits
-- 1 + 2 once every change of the instant applies).
-- @column run_id         the run
-- @column rank           the rank (-1 when unknown)
-- @column comm_us        union of the communication kernels
-- @column overlapped_us  of it, time some computation kernel was running
-- @column overlap_share  overlapped_us / comm_us
CREATE MACRO timeline_comm_comp_overlap(definitions := 'kvtrace') AS TABLE
WITH comm AS (
    FROM _timeline_busy(['communication'], [], by_iteration := false)
    WHERE definitions = 'kvtrace'
), compute AS (
    FROM _timeline_busy(['computation'], [], by_iteration := false)
    WHERE definitions = 'kvtrace'
), together AS (
    FROM _timeline_busy(['communication', 'computation'], [], by_iteration := false)
    WHERE definitions = 'kvtrace'
), hta_comm AS (
    SELECT run_id, rank, sum(e - s) AS comm_us
    FROM _timeline_hta_union(true)
    WHERE definitions = 'hta' AND kernel_type = 'communication'
    GROUP BY run_id, rank
), hta_both AS (
    SELECT run_id, rank, sum(dur) AS overlapped_us
    FROM _timeline_hta_sweep(MAP {'communication': 1, 'computation': 2})
    WHERE definitions = 'hta' AND bits = 3
    GROUP BY run_id, rank
), parts AS (
    SELECT c.run_id, c.rank, c.busy_us AS comm_us,
           greatest(c.busy_us + coalesce(k.busy_us, 0) - t.busy_us, 0) AS overlapped_us
    FROM comm AS c
    JOIN together AS t USING (run_id, rank)
    LEFT JOIN compute AS k USING (run_id, rank)
    UNION ALL
    SELECT run_id, rank, comm_us, coalesce(overlapped_us, 0)
    FROM hta_comm LEFT JOIN hta_both USING (run_id, rank)
)
SELECT parts.*, overlapped_us / nullif(comm_us, 0) AS overlap_share
FROM parts, _timeline_definitions(definitions) AS d
WHERE d.checked IS NOT NULL
ORDER BY run_id, rank;

-- @view timeline_comm_comp_overlap
-- timeline_comm_comp_overlap() with kvtrace's definitions.
-- @columns_of timeline_comm_comp_overlap
CREATE VIEW timeline_comm_comp_overlap AS
SELECT * FROM timeline_comm_comp_overlap();

-- @macro timeline_kernel_durations(definitions)
-- The duration distribution of each kernel per rank: HTA's per-kernel breakdown (sum,
-- mean, sample standard deviation, min, max) with linear percentiles, and the kernel's
-- share of its type's time.  HTA folds all but its top kernels into "others"; this
-- keeps every kernel.  kvtrace: kernels, copies and memsets with kvtrace's types; hta:
-- every GPU event (syncs too), typed by name, in HTA's rounded microseconds.
-- @column run_id         the run
-- @column rank           the rank (-1 when unknown)
-- @column kernel_type    computation, communication, memory or other
-- @column name           the kernel (or copy, memset)
-- @column kernels        its GPU events
-- @column total_us       their summed durations
-- @column mean_us        mean duration
-- @column std_us         sample standard deviation (0 for a single event), as pandas' std
-- @column min_us         shortest
-- @column p50_us         median
-- @column p90_us         90th percentile
-- @column p99_us         99th percentile
-- @column max_us         longest
-- @column share_of_type  total_us / the type's total on the rank
CREATE MACRO timeline_kernel_durations(definitions := 'kvtrace') AS TABLE
WITH chosen AS (
    SELECT run_id, rank, kernel_type, name, dur_us
    FROM _timeline_gpu_events WHERE definitions = 'kvtrace'
    UNION ALL
    SELECT run_id, rank, kernel_type, name, dur
    FROM _timeline_hta_gpu WHERE definitions = 'hta'
)
SELECT run_id, rank, kernel_type, name, count(*) AS kernels, sum(dur_us) AS total_us,
       avg(dur_us) AS mean_us, coalesce(stddev_samp(dur_us), 0) AS std_us,
       min(dur_us) AS min_us, quantile_cont(dur_us, 0.5) AS p50_us,
       quantile_cont(dur_us, 0.9) AS p90_us, quantile_cont(dur_us, 0.99) AS p99_us,
       max(dur_us) AS max_us,
       sum(dur_us) / sum(sum(dur_us)) OVER (PARTITION BY run_id, rank, kernel_type)
           AS share_of_type
FROM chosen, _timeline_definitions(definitions) AS d
WHERE d.checked IS NOT NULL
GROUP BY run_id, rank, kernel_type, name
ORDER BY run_id, rank, kernel_type, total_us DESC, name;

-- @view timeline_kernel_durations
-- timeline_kernel_durations() with kvtrace's definitions.
-- @columns_of timeline_kernel_durations
CREATE VIEW timeline_kernel_durations AS
SELECT * FROM timeline_kernel_durations();

-- @macro timeline_idle_breakdown(kernel_wait_us, definitions)
-- Per stream, the GPU's idle gaps between consecutive events, attributed after HTA's
-- idle-time breakdown: host_wait when the next event's launch (its runtime call's
-- start) came only after the previous event had ended, so the GPU waited for the CPU;
-- kernel_wait for the remaining short gaps (kernel_wait_us, default 30 us), the
-- overhead between back-to-back kernels; other for the rest.  kvtrace (the default):
-- per iteration, kernels, copies and memsets; a gap runs from the latest end of the
-- stream's earlier events in the iteration to the next event's start, only where
-- positive, and is short at most kernel_wait_us; a gap across two iterations counts in
-- neither.  hta: over the whole trace (iteration -1), HTA's kernels, copies and memsets
-- in start order; every gap runs from the previous event's end (negative where they
-- overlap), and is short below kernel_wait_us.
-- @column run_id        the run
-- @column rank          the rank (-1 when unknown)
-- @column iteration     the iteration (-1: outside every ProfilerStep, or hta)
-- @column stream        the stream
-- @column idle_us       all gaps between the stream's consecutive events
-- @column host_wait_us  gaps the GPU spent waiting for a launch
-- @column kernel_wait_us  short gaps between kernels already launched
-- @column other_us      the rest
CREATE MACRO timeline_idle_breakdown(kernel_wait_us := 30, definitions := 'kvtrace') AS TABLE
WITH launches AS (
    SELECT run_id, coalesce(rank, -1) AS rank, correlation, min(ts_us) AS launched
    FROM _timeline_events_files
    WHERE category = 'cuda_runtime' AND correlation IS NOT NULL AND definitions = 'kvtrace'
    GROUP BY ALL
), gpu AS (
    SELECT g.run_id, g.rank, g.iteration, g.stream, g.s, g.e, l.launched
    FROM _timeline_gpu AS g
    LEFT JOIN launches AS l
        ON g.run_id = l.run_id AND g.rank = l.rank AND g.correlation = l.correlation
    WHERE definitions = 'kvtrace'
), gaps AS (
    SELECT run_id, rank, iteration, stream, launched,
           max(e) OVER (PARTITION BY run_id, rank, iteration, stream ORDER BY s, e
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS previous_end,
           s
    FROM gpu
), classified AS (
    SELECT run_id, rank, iteration, stream, s - previous_end AS gap,
           CASE WHEN launched > previous_end THEN 'host_wait'
                WHEN s - previous_end <= kernel_wait_us THEN 'kernel_wait'
                ELSE 'other' END AS cause
    FROM gaps
    WHERE previous_end IS NOT NULL AND s > previous_end
), hta_launches AS (
    SELECT run_id, rank, correlation, arg_max(s, event_idx) AS launched
    FROM _timeline_hta_events
    WHERE NOT on_gpu AND correlation <> -1 AND definitions = 'hta'
    GROUP BY run_id, rank, correlation
), hta_gaps AS (
    SELECT g.run_id, g.rank, g.stream, g.s, l.launched,
           lag(g.e) OVER (PARTITION BY g.run_id, g.rank, g.stream
                          ORDER BY g.s, g.late, g.event_idx) AS previous_end
    FROM _timeline_hta_gpu AS g
    LEFT JOIN hta_launches AS l USING (run_id, rank, correlation)
    WHERE g.category IN ('kernel', 'Kernel', 'gpu_memcpy', 'Memcpy', 'gpu_memset', 'Memset',
                         'mtia_ccp_events')
      AND definitions = 'hta'
), hta_classified AS (
    SELECT run_id, rank, -1 AS iteration, stream, s - previous_end AS gap,
           CASE WHEN launched > previous_end THEN 'host_wait'
                WHEN s - previous_end < kernel_wait_us THEN 'kernel_wait'
                ELSE 'other' END AS cause
    FROM hta_gaps
    WHERE previous_end IS NOT NULL
), all_classified AS (
    SELECT * FROM classified UNION ALL SELECT * FROM hta_classified
)
SELECT run_id, rank, iteration, stream, sum(gap) AS idle_us,
       coalesce(sum(gap) FILTER (WHERE cause = 'host_wait'), 0) AS host_wait_us,
       coalesce(sum(gap) FILTER (WHERE cause = 'kernel_wait'), 0) AS kernel_wait_us,
       coalesce(sum(gap) FILTER (WHERE cause = 'other'), 0) AS other_us
FROM all_classified, _timeline_definitions(definitions) AS d
WHERE d.checked IS NOT NULL
GROUP BY run_id, rank, iteration, stream
ORDER BY run_id, rank, iteration, stream;

-- @macro _timeline_launched
-- Each kernel with the runtime call of the same correlation id that launched it (any
-- runtime call), for kvtrace's definitions.
CREATE MACRO _timeline_launched() AS TABLE
SELECT k.run_id, coalesce(k.rank, -1) AS rank, k.stream, k.name, c.ts_us AS call_us,
       c.dur_us AS call_dur_us, k.ts_us AS start_us, k.dur_us, k.event_idx
FROM _timeline_events_files AS k
JOIN _timeline_events_files AS c
    ON k.run_id = c.run_id AND k.rank IS NOT DISTINCT FROM c.rank
   AND k.correlation = c.correlation
WHERE c.category = 'cuda_runtime' AND k.category = 'kernel';

-- @macro timeline_launches(definitions)
-- Every GPU event with the CUDA runtime call that launched it (same correlation id): how
-- long the CPU spent launching, how long the event waited to start, how long it ran.
-- kvtrace: kernels, any runtime call, delay from the call's start; hta (HTA's kernel
-- launch statistics): every pair of a CPU event (stream -1) and a GPU event sharing a
-- correlation id that a cudaLaunchKernel(ExC), cudaMemcpyAsync or cudaMemsetAsync
-- carries, delay from the call's end, clipped at 0.
-- @column run_id          the run
-- @column rank            the rank (-1 when unknown)
-- @column stream          the event's stream
-- @column name            the kernel (or copy, memset)
-- @column launch_us       the runtime call's duration (CPU)
-- @column launch_delay_us the wait from the launch to the event's start
-- @column kernel_us       the event's duration (GPU)
-- @column short_kernel    kernel_us shorter than launch_us: the CPU, not the GPU, sets the pace
CREATE MACRO timeline_launches(definitions := 'kvtrace') AS TABLE
WITH launch_ids AS (
    SELECT DISTINCT run_id, rank, correlation
    FROM _timeline_hta_events
    WHERE name IN ('cudaLaunchKernel', 'cudaLaunchKernelExC', 'cudaMemcpyAsync',
                   'cudaMemsetAsync', 'runFunction - job_prep_and_submit_for_execution')
      AND correlation <> -1 AND definitions = 'hta'
), hta_events AS (
    SELECT ev.* FROM _timeline_hta_events AS ev
    SEMI JOIN launch_ids AS l
        ON ev.run_id = l.run_id AND ev.rank = l.rank AND ev.correlation = l.correlation
), pairs AS (
    SELECT run_id, rank, stream, name, call_dur_us AS launch_us,
           start_us - call_us AS launch_delay_us, dur_us AS kernel_us
    FROM _timeline_launched()
    WHERE definitions = 'kvtrace'
    UNION ALL
    SELECT k.run_id, k.rank, k.stream, k.name, c.e - c.s, greatest(k.s - c.e, 0), k.e - k.s
    FROM hta_events AS k
    JOIN hta_events AS c USING (run_id, rank, correlation)
    WHERE k.stream <> -1 AND c.stream = -1
)
SELECT pairs.*, kernel_us < launch_us AS short_kernel
FROM pairs, _timeline_definitions(definitions) AS d
WHERE d.checked IS NOT NULL;

-- @view timeline_launches
-- timeline_launches() with kvtrace's definitions.
-- @columns_of timeline_launches
CREATE VIEW timeline_launches AS
SELECT * FROM timeline_launches();

-- @macro timeline_launch_summary(definitions)
-- Launch statistics per rank in one row (HTA's CUDA kernel launch analysis with
-- definitions := 'hta'); percentiles linear.
-- @column run_id              the run
-- @column rank                the rank (-1 when unknown)
-- @column kernels             events matched to their launch
-- @column launch_p50_us       median CPU time of a launch
-- @column launch_delay_p50_us median wait from launch to start
-- @column launch_delay_p95_us 95th percentile of that wait
-- @column kernel_p50_us       median event duration
-- @column short_kernels       events shorter than their own launch
-- @column short_share         short_kernels / kernels
CREATE MACRO timeline_launch_summary(definitions := 'kvtrace') AS TABLE
SELECT run_id, rank, count(*) AS kernels,
       quantile_cont(launch_us, 0.5) AS launch_p50_us,
       quantile_cont(launch_delay_us, 0.5) AS launch_delay_p50_us,
       quantile_cont(launch_delay_us, 0.95) AS launch_delay_p95_us,
       quantile_cont(kernel_us, 0.5) AS kernel_p50_us,
       count(*) FILTER (WHERE short_kernel) AS short_kernels,
       count(*) FILTER (WHERE short_kernel) / count(*) AS short_share
FROM timeline_launches(definitions := definitions)
GROUP BY run_id, rank
ORDER BY run_id, rank;

-- @view timeline_launch_summary
-- timeline_launch_summary() with kvtrace's definitions.
-- @columns_of timeline_launch_summary
CREATE VIEW timeline_launch_summary AS
SELECT * FROM timeline_launch_summary();

-- @macro timeline_queue_length(step_us, definitions)
-- Launched and unfinished work per stream: a launch adds one at its runtime call; the
-- kernel's end removes it (kvtrace), or its start (hta: a launch is a CPU event named
-- cudaLaunchKernel(ExC), cuLaunchKernel, cudaMemcpyAsync, cudaMemsetAsync or their HIP
-- names, paired with each GPU event of its correlation id, copies and memsets too).
-- Changes at one instant apply removals first (kvtrace), or launches first and then in
-- trace order (hta).  One row per step_us window (default 1000 us) in which the queue
-- changed, with the queue after the window's last change.
-- @column run_id     the run
-- @column rank       the rank (-1 when unknown)
-- @column stream     the stream
-- @column window_us  window start, in the trace's microseconds
-- @column queued     queued work after the window's last change
-- @column peak       the most queued at once within the window
CREATE MACRO timeline_queue_length(step_us := 1000, definitions := 'kvtrace') AS TABLE
WITH hta_calls AS (
    SELECT run_id, rank, correlation, s, event_idx
    FROM _timeline_hta_events
    WHERE name IN ('cudaLaunchKernel', 'cudaLaunchKernelExC', 'cuLaunchKernel',
                   'cudaMemcpyAsync', 'cudaMemsetAsync',
                   'runFunction - job_prep_and_submit_for_execution', 'hipLaunchKernel',
                   'hipExtModuleLaunchKernel', 'hipMemcpyAsync', 'hipMemsetAsync',
                   'hipMemcpyWithStream')
      AND stream = -1 AND definitions = 'hta'
), changes AS (
    -- (order: how changes of one instant apply)
    SELECT run_id, rank, stream, call_us AS t, 1 AS delta, 1 AS order_kind, event_idx
    FROM _timeline_launched() WHERE definitions = 'kvtrace'
    UNION ALL
    SELECT run_id, rank, stream, start_us + dur_us, -1, 0, event_idx
    FROM _timeline_launched() WHERE definitions = 'kvtrace'
    UNION ALL
    SELECT c.run_id, c.rank, g.stream, c.s, 1, 0, c.event_idx
    FROM hta_calls AS c
    JOIN _timeline_hta_gpu AS g USING (run_id, rank, correlation)
    UNION ALL
    SELECT g.run_id, g.rank, g.stream, g.s, -1, 1, g.event_idx
    FROM _timeline_hta_gpu AS g
    SEMI JOIN hta_calls AS c
        ON g.run_id = c.run_id AND g.rank = c.rank AND g.correlation = c.correlation
), running AS (
    SELECT run_id, rank, stream, t, order_kind, event_idx,
           sum(delta) OVER (PARTITION BY run_id, rank, stream ORDER BY t, order_kind, event_idx
                            ROWS UNBOUNDED PRECEDING) AS queued
    FROM changes
)
SELECT run_id, rank, stream, floor(t / step_us) * step_us AS window_us,
       arg_max(queued, (t, order_kind, event_idx)) AS queued, max(queued) AS peak
FROM running, _timeline_definitions(definitions) AS d
WHERE d.checked IS NOT NULL
GROUP BY run_id, rank, stream, window_us
ORDER BY run_id, rank, stream, window_us;
