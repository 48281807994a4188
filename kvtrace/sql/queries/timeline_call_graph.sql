-- Profiler timelines through their call graph: which kernels each operator launches, and
-- the critical path of an iteration (Holistic Trace Analysis 0.5's frequent CUDA kernel
-- sequences and critical path analysis, computed in Python over `timeline_events`).
--
-- The call graph nests each CPU thread's events by time (at one instant ends come before
-- starts, a longer event opens first) and hangs each GPU event under the runtime call
-- with its correlation id.  Where one thread runs the steps (ProfilerStep#N) and another
-- the backward pass (autograd::), the backward thread's top-level events hang under the
-- step that spans them.  An Event Sync or Context Sync that the trace puts on stream -1
-- links to the runtime call that waited on it (cudaEventSynchronize, cudaEventQuery,
-- cudaDeviceSynchronize), as HTA links it.  Times are rounded inwards to whole
-- microseconds, as HTA rounds them (start up, end down).
--
-- Worked example (critical path): a thread runs an operator at [0, 100) us whose
-- cudaLaunchKernel at [10, 20) starts a kernel at [30, 230) on an empty stream, then
-- cudaDeviceSynchronize at [100, 240).  The path runs operator 0-10 (CPU), launch
-- 10-30 (launch delay 20), kernel 30-230 (GPU compute 200): 230 us, 87 % GPU compute.
-- (The kernel's zero-length sync edge to the synchronize call's end adds nothing; of
-- equally long paths the one ending first in the graph's order is taken, as networkx's
-- dag_longest_path, which HTA uses, takes it.)

-- @macro timeline_kernel_sequences(operator, min_pattern_len, top_k)
-- Frequent CUDA kernel sequences: the CPU operators whose name contains `operator`, at
-- the shallowest depth such operators have and with at least min_pattern_len kernels
-- beneath them (default 3), grouped by pattern (the operator's name and its kernels'
-- names in start order, joined by '|'); most frequent first, top_k per run and rank
-- (all when NULL).  Equal to HTA's get_frequent_cuda_kernel_sequences, except on
-- stream 0 (ROCm's default stream): HTA's call graph hangs only kernels of streams
-- above 0 under their launches, so it finds no pattern in kernels there; kvtrace does.
-- @column run_id         the run
-- @column rank           the rank (-1 when unknown)
-- @column place          1 for the most frequent pattern (ties by pattern text)
-- @column pattern        operator|kernel|kernel|...
-- @column kernels        the kernels in the pattern
-- @column count          how often the pattern ran
-- @column gpu_kernel_us  the summed duration of its kernels
-- @column cpu_op_us      the summed duration of its operators
CREATE MACRO timeline_kernel_sequences(operator, min_pattern_len := 3, top_k := NULL) AS TABLE
SELECT unnest(kvtrace_kernel_sequences(operator, min_pattern_len::BIGINT, top_k::BIGINT),
              recursive := true);

-- @macro timeline_critical_path(annotation, instance, definitions)
-- The critical path of one instance (0 the first) of an annotation (by default the first
-- ProfilerStep): one row per edge, in path order.  The window is the annotation's span;
-- its CPU events longer than 0 and the GPU events launched from it form a graph of
-- operator spans (split where calls nest), dependencies between a thread's consecutive
-- top-level operators, GPU runs, kernel-kernel gaps on a stream, launch delays (a
-- launch onto an empty stream) and synchronisation (stream, context and event syncs,
-- cudaStreamWaitEvent); blocking runtime calls weigh 0.  The path is the longest one
-- through it.  definitions := 'hta' reproduces HTA's graph, which keeps only the last
-- kernel of a CUDA-graph launch; 'kvtrace' (the default) keeps every kernel of it.
-- An annotation with no such instance gives no rows.
-- @column run_id       the run
-- @column rank         the rank (-1 when unknown)
-- @column step         the edge's place on the path, from 0
-- @column edge_type    operator, kernel_kernel_delay, kernel_launch_delay, dependency or sync_dependency
-- @column event_idx    the event the edge's time belongs to (operator and kernel-kernel edges)
-- @column name         that event's name
-- @column category     that event's category
-- @column stream       that event's stream, for GPU events
-- @column bound_by     cpu_bound, gpu_compute_bound, gpu_communication_bound, gpu_kernel_kernel_overhead or gpu_kernel_launch_overhead (NULL for dependencies)
-- @column duration_us  the edge's length
CREATE MACRO timeline_critical_path(annotation := 'ProfilerStep', instance := 0,
                                    definitions := 'kvtrace') AS TABLE
SELECT unnest(kvtrace_critical_path(annotation, instance::BIGINT, definitions),
              recursive := true);

-- @macro timeline_critical_path_summary(annotation, instance, definitions)
-- The critical path's length by what bounds it (HTA's critical path summary).
-- @column run_id       the run
-- @column rank         the rank (-1 when unknown)
-- @column bound_by     what the time is bound by ('' for zero-length dependencies)
-- @column duration_us  time on the path
-- @column share        duration_us / the path's length
CREATE MACRO timeline_critical_path_summary(annotation := 'ProfilerStep', instance := 0,
                                            definitions := 'kvtrace') AS TABLE
SELECT run_id, rank, coalesce(bound_by, '') AS bound_by, sum(duration_us) AS duration_us,
       sum(duration_us) / sum(sum(duration_us)) OVER (PARTITION BY run_id, rank) AS share
FROM timeline_critical_path(annotation := annotation, instance := instance,
                            definitions := definitions)
GROUP BY run_id, rank, coalesce(bound_by, '')
ORDER BY run_id, rank, duration_us DESC, bound_by;
