-- Profiler timeline analyses where kvtrace and Holistic Trace Analysis (HTA 0.5) define
-- things differently.  Each is a macro taking definitions := 'kvtrace' (the default, also
-- the plain view of the same name) or 'hta' (HTA's numbers on the same trace):
--
--   temporal breakdown: kvtrace counts kernels, copies and memsets as GPU time; HTA
--     counts every event with a stream, CUDA synchronisation (cuda_sync) included, and
--     types kernels by name only ("Stream Wait Event" becomes computation).  kvtrace's
--     is the work the GPU did; a sync is the GPU waiting, not working.
--   kernel type breakdown: kvtrace sums each type's durations; HTA merges each type's
--     intervals and reports time when types overlap as rows of their own
--     ("computation overlapping memory").  kvtrace's adds up to the work done, HTA's to
--     the wall time covered.
--   queue length: kvtrace counts a kernel from its launch call to its end (it occupies
--     the stream until then); HTA until it starts, and counts copies and memsets too.
--   launch delay: kvtrace measures from the start of the launch call (what the CPU
--     thread sees), HTA from its end, clipped at 0, over kernel, copy and memset
--     launches (cudaLaunchKernel(ExC), cudaMemcpyAsync, cudaMemsetAsync).
--
-- HTA's kernel types by name: communication ^nccl.*Kernel; memory ^Memcpy, ^Memset or
-- ^dma; other: a name containing Memcpy or Sync, or starting Memset; computation: the
-- rest.  Intervals that touch merge, as HTA merges them.
--
-- Worked example (kernel type breakdown): a computation kernel at [0, 10) us and a copy
-- at [5, 20): kvtrace gives computation 10 and memory 15; HTA gives computation 5,
-- computation overlapping memory 5 and memory 10.
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

-- @view _timeline_hta_gpu
-- Every event with a stream, as HTA takes GPU events, with HTA's kernel type.
CREATE VIEW _timeline_hta_gpu AS
SELECT run_id, coalesce(rank, -1) AS rank, ts_us AS s, ts_us + dur_us AS e, name,
       _timeline_hta_type(name) AS kernel_type
FROM _timeline_events_files
WHERE stream IS NOT NULL;

-- @macro _timeline_hta_union(by_type)
-- The merged intervals of `_timeline_hta_gpu` per run and rank, and per kernel type when
-- by_type (kernel_type 'all' otherwise); intervals that touch merge.
CREATE MACRO _timeline_hta_union(by_type) AS TABLE
WITH typed AS (
    SELECT run_id, rank, CASE WHEN by_type THEN kernel_type ELSE 'all' END AS kernel_type,
           s, e
    FROM _timeline_hta_gpu
), marked AS (
    SELECT *, max(e) OVER (PARTITION BY run_id, rank, kernel_type ORDER BY s, e
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM typed
), grouped AS (
    SELECT *, sum(CASE WHEN reach IS NULL OR s > reach THEN 1 ELSE 0 END)
                  OVER (PARTITION BY run_id, rank, kernel_type ORDER BY s, e
                        ROWS UNBOUNDED PRECEDING) AS piece
    FROM marked
)
SELECT run_id, rank, kernel_type, min(s) AS s, max(e) AS e
FROM grouped
GROUP BY run_id, rank, kernel_type, piece;

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
), merged AS (
    SELECT * FROM _timeline_hta_union(true)
    WHERE definitions = 'hta' AND kernel_type IN ('computation', 'communication', 'memory')
), edges AS (
    SELECT run_id, rank, s AS t, kernel_type, 1 AS delta FROM merged
    UNION ALL
    SELECT run_id, rank, e, kernel_type, -1 FROM merged
), states AS (
    -- after the last edge at each time, which types are running
    SELECT run_id, rank, t,
           sum(delta) FILTER (WHERE kernel_type = 'computation') AS comp,
           sum(delta) FILTER (WHERE kernel_type = 'communication') AS comm,
           sum(delta) FILTER (WHERE kernel_type = 'memory') AS mem
    FROM edges GROUP BY run_id, rank, t
), running AS (
    SELECT run_id, rank, t,
           lead(t) OVER (PARTITION BY run_id, rank ORDER BY t) - t AS dur,
           sum(coalesce(comp, 0)) OVER w > 0 AS comp,
           sum(coalesce(comm, 0)) OVER w > 0 AS comm,
           sum(coalesce(mem, 0)) OVER w > 0 AS mem
    FROM states
    WINDOW w AS (PARTITION BY run_id, rank ORDER BY t ROWS UNBOUNDED PRECEDING)
), labelled AS (
    SELECT run_id, rank, dur,
           array_to_string(list_filter(
               [CASE WHEN comp THEN 'computation' END, CASE WHEN comm THEN 'communication' END,
                CASE WHEN mem THEN 'memory' END], lambda x: x IS NOT NULL), ' overlapping ')
               AS kernel_type
    FROM running
    WHERE dur > 0 AND (comp OR comm OR mem)
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

-- @macro _timeline_launched(definitions, hta_calls)
-- Each GPU event with the runtime call of the same correlation id that launched it:
-- kvtrace's kernels by any runtime call, or (hta) every event with a stream launched by
-- one of hta_calls (HTA's launch analysis and queue length take different lists).
CREATE MACRO _timeline_launched(definitions, hta_calls) AS TABLE
SELECT k.run_id, coalesce(k.rank, -1) AS rank, k.stream, k.name, d.checked AS definitions,
       c.ts_us AS call_us, c.dur_us AS call_dur_us, k.ts_us AS start_us, k.dur_us
FROM _timeline_events_files AS k
JOIN _timeline_events_files AS c
    ON k.run_id = c.run_id AND k.rank IS NOT DISTINCT FROM c.rank
   AND k.correlation = c.correlation
CROSS JOIN _timeline_definitions(definitions) AS d
WHERE c.category = 'cuda_runtime'
  AND CASE d.checked
          WHEN 'kvtrace' THEN k.category = 'kernel'
          ELSE k.stream IS NOT NULL AND list_contains(hta_calls, c.name)
      END;

-- @macro timeline_launches(definitions)
-- Every GPU event with the CUDA runtime call that launched it (same correlation id): how
-- long the CPU spent launching, how long the event waited to start, how long it ran.
-- kvtrace: kernels, any runtime call, delay from the call's start; hta: kernels, copies
-- and memsets launched by cudaLaunchKernel(ExC), cudaMemcpyAsync or cudaMemsetAsync,
-- delay from the call's end, clipped at 0.
-- @column run_id          the run
-- @column rank            the rank (-1 when unknown)
-- @column stream          the event's stream
-- @column name            the kernel (or copy, memset)
-- @column launch_us       the runtime call's duration (CPU)
-- @column launch_delay_us the wait from the launch to the event's start
-- @column kernel_us       the event's duration (GPU)
-- @column short_kernel    kernel_us shorter than launch_us: the CPU, not the GPU, sets the pace
CREATE MACRO timeline_launches(definitions := 'kvtrace') AS TABLE
SELECT run_id, rank, stream, name, call_dur_us AS launch_us,
       CASE WHEN definitions = 'hta' THEN greatest(start_us - call_us - call_dur_us, 0)
            ELSE start_us - call_us END AS launch_delay_us,
       dur_us AS kernel_us, dur_us < call_dur_us AS short_kernel
FROM _timeline_launched(definitions, ['cudaLaunchKernel', 'cudaLaunchKernelExC',
                                      'cudaMemcpyAsync', 'cudaMemsetAsync']);

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
-- kernel's end removes it (kvtrace), or its start (hta, which counts the copies and
-- memsets of cudaMemcpyAsync / cudaMemsetAsync too).  One row per step_us window
-- (default 1000 us) in which the queue changed, with the queue at the window's last
-- change.
-- @column run_id     the run
-- @column rank       the rank (-1 when unknown)
-- @column stream     the stream
-- @column window_us  window start, in the trace's microseconds
-- @column queued     queued work after the window's last change
-- @column peak       the most queued at once within the window
CREATE MACRO timeline_queue_length(step_us := 1000, definitions := 'kvtrace') AS TABLE
WITH matched AS (
    SELECT run_id, rank, stream, call_us AS launched,
           CASE WHEN definitions = 'hta' THEN start_us ELSE start_us + dur_us END AS finished
    FROM _timeline_launched(definitions, ['cudaLaunchKernel', 'cudaLaunchKernelExC',
                                          'cuLaunchKernel', 'cudaMemcpyAsync',
                                          'cudaMemsetAsync', 'hipLaunchKernel',
                                          'hipExtModuleLaunchKernel', 'hipMemcpyAsync',
                                          'hipMemsetAsync', 'hipMemcpyWithStream'])
), changes AS (
    SELECT run_id, rank, stream, launched AS t, 1 AS delta FROM matched
    UNION ALL
    SELECT run_id, rank, stream, finished AS t, -1 AS delta FROM matched
), running AS (
    SELECT run_id, rank, stream, t,
           sum(delta) OVER (PARTITION BY run_id, rank, stream ORDER BY t, delta
                            ROWS UNBOUNDED PRECEDING) AS queued
    FROM changes
)
SELECT run_id, rank, stream, floor(t / step_us) * step_us AS window_us,
       arg_max(queued, t) AS queued, max(queued) AS peak
FROM running
GROUP BY run_id, rank, stream, window_us
ORDER BY run_id, rank, stream, window_us;
