-- Queries of the compare report: two sides (report_sides: run_id, side), either two
-- experiments (serving and pool metrics) or two run selections (DSA statistics).  Each
-- metric is computed per run, then averaged per side; a side of one run is flagged.

-- @query experiments
-- Serving and pool metrics of two experiments: both sides, the runs behind each, the
-- difference right - left and whether a side rests on a single run.
SELECT metric, left_mean, left_std, left_runs, right_mean, right_std, right_runs, delta,
       delta_rel, single_run
FROM run_compare(getvariable('left_side'), getvariable('right_side'))
WHERE getvariable('mode') = 'experiments';

-- @query dsa
-- DSA statistics of two run selections (each run at its smallest stored block size):
-- per-run means, then both sides, the runs behind each and the difference.
WITH per_run AS (
    SELECT side, run_id, avg(unique_blocks)::DOUBLE AS unique_blocks,
           avg(unique_blocks / ceil(seq_len / block_size))::DOUBLE AS touched_block_ratio,
           avg(tokens_per_block_mean)::DOUBLE AS tokens_per_touched_block,
           avg(offset_p50)::DOUBLE AS offset_p50
    FROM dsa_steps JOIN report_sides USING (run_id)
    WHERE (run_id, block_size) IN (
        SELECT (run_id, min(block_size)) FROM dsa_steps
        WHERE run_id IN (SELECT run_id FROM report_sides) GROUP BY run_id)
    GROUP BY side, run_id
), long AS (
    UNPIVOT per_run ON unique_blocks, touched_block_ratio, tokens_per_touched_block,
        offset_p50 INTO NAME metric VALUE value
), sides AS (
    SELECT metric,
           avg(value) FILTER (WHERE side = 'left') AS left_mean,
           stddev_samp(value) FILTER (WHERE side = 'left') AS left_std,
           count(*) FILTER (WHERE side = 'left') AS left_runs,
           avg(value) FILTER (WHERE side = 'right') AS right_mean,
           stddev_samp(value) FILTER (WHERE side = 'right') AS right_std,
           count(*) FILTER (WHERE side = 'right') AS right_runs
    FROM long GROUP BY metric
)
SELECT metric, left_mean, left_std, left_runs, right_mean, right_std, right_runs,
       right_mean - left_mean AS delta, (right_mean - left_mean) / left_mean AS delta_rel,
       left_runs = 1 OR right_runs = 1 AS single_run
FROM sides WHERE getvariable('mode') = 'runs'
ORDER BY metric;

-- @query modes
-- Execution-mode shares and truncated requests of the two experiments (seed 001_*
-- sections 6.4, 8.10): mean share per side, the runs behind each and the difference.
SELECT execution_mode, left_share, left_runs, right_share, right_runs, share_delta,
       single_run
FROM request_execution_mode_compare(getvariable('left_side'), getvariable('right_side'))
WHERE getvariable('mode') = 'experiments';

-- @query trace_diff
-- HTA's trace diff of two profiler runs (the latest run of each side's name): the 25 CPU
-- operators and GPU kernels whose summed time changed most, with their counts.
SELECT kind, left(name, 100) AS name, count_a, count_b, total_us_a, total_us_b,
       total_us_diff, status
FROM timeline_diff(getvariable('left_side'), getvariable('right_side'))
WHERE getvariable('mode') = 'runs' AND status <> 'same'
ORDER BY abs(total_us_diff) DESC, kind, name
LIMIT 25;
