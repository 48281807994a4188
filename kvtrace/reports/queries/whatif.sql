-- Queries of the whatif report.  Every query reads only the runs in report_runs, at the
-- block sizes getvariable('fine') and getvariable('coarse') (tokens).  Capacities count
-- blocks (items of granularity block: all layers of a block together), one cache per
-- request.

-- @query hit_curves
-- Hit rate of a per-request cache against its capacity, for every policy (OPT is the
-- ceiling no online policy reaches) and both block sizes: run, block_size, policy,
-- capacity_blocks, hit_rate (hits / accesses, first touches are misses).
WITH curves AS (
    FROM dsa_hit_curve(getvariable('fine'), 'lru')
    UNION ALL FROM dsa_hit_curve(getvariable('fine'), 'opt')
    UNION ALL FROM dsa_hit_curve(getvariable('fine'), 'fifo')
    UNION ALL FROM dsa_hit_curve(getvariable('fine'), 'pin_prefix')
    UNION ALL FROM dsa_hit_curve(getvariable('coarse'), 'lru')
    UNION ALL FROM dsa_hit_curve(getvariable('coarse'), 'opt')
    UNION ALL FROM dsa_hit_curve(getvariable('coarse'), 'fifo')
    UNION ALL FROM dsa_hit_curve(getvariable('coarse'), 'pin_prefix')
)
SELECT run_id, 'B=' || block_size AS block_size, policy, capacity_blocks, hit_rate
FROM curves WHERE run_id IN (SELECT run_id FROM report_runs)
ORDER BY run_id, block_size, policy, capacity_blocks;

-- @query reuse_cdf
-- Share of re-accesses (first touches left out) whose LRU stack distance is <= x: the
-- hit rate of an LRU cache of x + 1 blocks among accesses that could hit at all.
WITH reuse AS (
    FROM dsa_reuse(getvariable('fine'))
    UNION ALL FROM dsa_reuse(getvariable('coarse'))
)
SELECT run_id || ' B=' || block_size AS series, distance,
       sum(accesses) OVER (PARTITION BY run_id, block_size ORDER BY distance)
           / sum(accesses) OVER (PARTITION BY run_id, block_size) AS cdf
FROM reuse
WHERE distance IS NOT NULL AND run_id IN (SELECT run_id FROM report_runs)
ORDER BY series, distance;

-- @query working_set
-- Mean (over requests) distinct blocks touched in the last 16 decode steps, against the
-- request's decode step number, at the fine block size.
WITH ws AS (
    SELECT run_id, working_set,
           row_number() OVER (PARTITION BY run_id, request_id ORDER BY step_idx) AS decode_step
    FROM dsa_working_set(getvariable('fine'), 16)
    WHERE run_id IN (SELECT run_id FROM report_runs)
)
SELECT run_id AS series, decode_step, avg(working_set) AS working_set
FROM ws GROUP BY ALL ORDER BY series, decode_step;

-- @query step_overlap
-- Per layer, the mean share of a step's blocks (fine block size) the same layer selected
-- at its previous traced step, and the mean Jaccard index of the two selections.
SELECT run_id AS series, layer_id, avg(prev_step_reused) AS reused_share,
       avg(prev_step_jaccard) AS jaccard
FROM dsa_step_overlap(getvariable('fine'))
WHERE run_id IN (SELECT run_id FROM report_runs) AND prev_step_reused IS NOT NULL
GROUP BY ALL ORDER BY series, layer_id;

-- @query pools
-- Per run and block size, the three pools of the report side by side (default tiers,
-- LRU): per-request caches, one pool of private blocks, one pool shared by content.
-- hbm_hit_rate is the first tier's share of the accesses; shared_hits the hits on blocks
-- another request brought in; reused_prompt_tokens the prompt tokens found in the pool
-- when requests arrived, and ttft_saved_ms (mean, max) the prefill time they save against
-- recomputing them (net of fetching them).  stream_order is the order requests met the
-- pool, sharing_rule how blocks were named.
SELECT r.run_id, r.block_size, r.pool, round(t.hit_rate, 4) AS hbm_hit_rate,
       r.shared_hits, r.reused_prompt_tokens, round(r.ttft_saved_ms_mean, 2)
           AS ttft_saved_ms_mean, round(r.ttft_saved_ms_max, 2) AS ttft_saved_ms_max,
       round(r.fetch_us_p99, 1) AS fetch_us_p99, r.stream_order, r.sharing_rule
FROM report_whatif_runs r
JOIN report_whatif t USING (run_id, block_size, pool)
WHERE t.tier_order = 0
ORDER BY r.run_id, r.block_size, r.pool_order;

-- @query tiers
-- kvtrace whatif with its default tiers (hbm:4096:3000:0, host:65536:50:5,
-- remote:inf:20:30; capacity in blocks, GB/s, µs per read), LRU, 656 bytes per token and
-- layer, for each pool: each tier's share of the accesses, those on blocks another
-- request brought in (shared_served), bytes per decode step and fetch time per step
-- (p50/p95, linear), and the prompt length from which fetching from the tier beats
-- recomputing (recompute_boundary_tokens; empty when it never does), and a note where a
-- tier served accesses without moving bytes (HBM, where the blocks already are).
SELECT run_id, block_size, pool, tier, capacity_blocks, accesses_served, shared_served,
       round(hit_rate, 4) AS hit_rate, bytes_per_step_p50, bytes_per_step_p95,
       round(fetch_us_p50, 1) AS fetch_us_p50, round(fetch_us_p95, 1) AS fetch_us_p95,
       recompute_boundary_tokens,
       CASE WHEN accesses_served > 0 AND bytes_per_step_p95 = 0
            THEN 'served in place: no bytes move between tiers'
       END AS note
FROM report_whatif ORDER BY run_id, block_size, pool_order, tier_order;
