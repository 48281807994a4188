-- Queries of the workload report.  Every query reads only the runs in report_runs.  SLOs
-- are getvariable('ttft_slo_s') and getvariable('tpot_slo_s') (seconds); the fidelity
-- query compares getvariable('measured') with getvariable('simulated') when both are set.

-- @query arrivals
-- Arrivals per minute of each arrival trace: run, minute (since the first arrival),
-- rate_per_s; the last, partial minute only where it is the trace's only one.
SELECT r.run_name AS run, w.window_start_s / 60 AS minute, w.rate_per_s
FROM workload_arrivals(60) AS w
JOIN report_runs AS r USING (run_id)
WHERE NOT w.partial OR w.window_start_s = 0
ORDER BY run, minute;

-- @query arrival_summary
-- The arrival process of each trace: requests, duration, mean rate, inter-arrival CV,
-- burstiness and the busiest minute against the mean.
SELECT r.run_name AS run, s.requests, s.duration_s, s.rate_per_s, s.gap_cv, s.burstiness,
       s.peak_to_mean
FROM workload_arrival_summary AS s
JOIN report_runs AS r USING (run_id)
ORDER BY run;

-- @query lengths
-- Prompt and output lengths of each trace (per model and log type where recorded), with
-- the prefill:decode ratio.
SELECT r.run_name AS run, l.model, l.log_type, l.requests, l.input_mean, l.input_p50,
       l.input_p99, l.output_mean, l.output_p50, l.output_p99, l.prefill_decode_ratio
FROM workload_lengths AS l
JOIN report_runs AS r USING (run_id)
ORDER BY run, l.model, l.log_type;

-- @query prefix_curve
-- Hit rate of one prefix cache shared by a trace's requests, by capacity in blocks: the
-- block cache under LRU and its OPT ceiling (block reads served), and what engines
-- serve, the leading run of cached blocks of a vLLM-style LRU pool and of SGLang's
-- radix tree (input tokens served): run, cache, capacity_blocks, hit_rate.
WITH curves AS (
    SELECT *, 'block cache, ' || policy AS cache FROM workload_prefix_hit_curve('lru')
    UNION ALL
    SELECT *, 'block cache, ' || policy FROM workload_prefix_hit_curve('opt')
    UNION ALL
    SELECT *, 'LRU pool, prefix tokens' FROM workload_prefix_hit_curve(
        'lru', semantics := 'prefix', weight := 'tokens')
    UNION ALL
    SELECT *, 'radix tree, prefix tokens' FROM workload_prefix_hit_curve(
        'radix_lru', semantics := 'prefix', weight := 'tokens')
)
SELECT r.run_name AS run, c.cache, c.capacity_blocks, c.hit_rate
FROM curves AS c
JOIN report_runs AS r USING (run_id)
ORDER BY run, c.cache, c.capacity_blocks;

-- @query latency_cdf
-- Share of successful requests at or below each latency, per run and metric (TTFT,
-- TPOT, e2e): run, metric, seconds, cdf.
SELECT r.run_name AS run, l.metric, l.seconds,
       cume_dist() OVER (PARTITION BY l.run_id, l.metric ORDER BY l.seconds) AS cdf
FROM _timing_long AS l
JOIN report_runs AS r USING (run_id)
ORDER BY run, l.metric, l.seconds;

-- @query slo
-- SLO attainment and goodput per run at the report's TTFT and TPOT SLOs.
SELECT r.run_name AS run, s.requests, s.failed, s.met, s.attainment, s.span_s,
       s.goodput_per_s
FROM timing_slo_attainment(ttft_slo_s := getvariable('ttft_slo_s'),
                    tpot_slo_s := getvariable('tpot_slo_s')) AS s
JOIN report_runs AS r USING (run_id)
ORDER BY run;

-- @query fidelity
-- The simulated run against the measured one, percentile by percentile.
SELECT * FROM timing_fidelity(getvariable('measured'), getvariable('simulated'))
WHERE getvariable('measured') IS NOT NULL AND getvariable('simulated') IS NOT NULL;
