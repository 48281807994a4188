-- What fills a KV pool: per-worker pool snapshots and the "other" share.
--
-- other = capacity - held - available.  held_tokens counts only slot-private KV that the
-- radix tree does not protect, so the shared prefix cache is *inside* other: a large
-- other is not by itself waste.  When the server reports the breakdown, other_unaccounted
-- = other - radix_protected - running_batch - inflight_transfer - prealloc - retracted;
-- a missing component makes it NULL (never read as 0).  Ticks whose poll failed have
-- NULL counters and are skipped by the statistics.

-- @view pool_snapshots
-- One row per (worker, poll tick), as polled or ingested.
-- @column run_id                    the run
-- @column experiment                experiment label (e.g. exp2_2p6d)
-- @column worker_id                 worker name (e.g. decode-2)
-- @column worker_role               prefill or decode
-- @column t_s                       seconds since the run (or the poll series) started
-- @column ts                        wall-clock time of the tick (UTC), when known
-- @column capacity_tokens           KV pool size in tokens
-- @column held_tokens               slot-private KV not protected by the radix tree
-- @column available_tokens          free KV tokens
-- @column idle_evictable_tokens     held tokens LRU could evict at once
-- @column session_count             sessions on the worker
-- @column resident_session_count    sessions with KV resident
-- @column kvcache_mem_gb            KV cache memory, GB
-- @column last_gen_throughput       last generation throughput reported (tokens/s)
-- @column radix_protected_tokens    radix-tree protected (shared prefix) tokens, newer servers only
-- @column running_batch_tokens      tokens of the running batch, newer servers only
-- @column inflight_transfer_tokens  tokens in P->D transfer, newer servers only
-- @column prealloc_tokens           tokens preallocated for queued transfers, newer servers only
-- @column retracted_tokens          tokens of retracted requests, newer servers only
-- @column running_batch_size        requests in the running batch, newer servers only
-- @column prefill_backup_tokens     prefill backup tokens, newer servers only
-- @column sessions                  the per-session objects of the tick (JSON text)
-- @column poll_latency_ms           how long the poll took, milliseconds
-- @column poll_error                why the poll failed (NULL when it succeeded)
CREATE VIEW pool_snapshots AS SELECT * FROM _pool_snapshots_files;

-- @view pool_other
-- Every tick with its other = capacity - held - available.
-- @column run_id            the run
-- @column experiment        experiment label
-- @column worker_id         worker
-- @column worker_role       prefill or decode
-- @column t_s               seconds since start
-- @column capacity_tokens   KV pool size
-- @column held_tokens       slot-private KV not protected by the radix tree
-- @column available_tokens  free KV tokens
-- @column other_tokens      capacity - held - available (NULL when a counter is missing)
-- @column session_count     sessions on the worker
-- @column poll_error        why the poll failed, if it did
CREATE VIEW pool_other AS
SELECT
    run_id, experiment, worker_id, worker_role, t_s, capacity_tokens, held_tokens,
    available_tokens, capacity_tokens - held_tokens - available_tokens AS other_tokens,
    session_count, poll_error
FROM pool_snapshots;

-- @view pool_other_breakdown
-- other split into the components newer servers report; NULL where a component is absent.
-- @column run_id                    the run
-- @column experiment                experiment label
-- @column worker_id                 worker
-- @column worker_role               prefill or decode
-- @column t_s                       seconds since start
-- @column other_tokens              capacity - held - available
-- @column radix_protected_tokens    shared prefix cache protected by the radix tree
-- @column running_batch_tokens      running batch
-- @column inflight_transfer_tokens  P->D transfers in flight
-- @column prealloc_tokens           preallocated for queued transfers
-- @column retracted_tokens          retracted requests
-- @column other_unaccounted_tokens  other minus the five components above (NULL if any is missing)
CREATE VIEW pool_other_breakdown AS
SELECT
    run_id, experiment, worker_id, worker_role, t_s,
    capacity_tokens - held_tokens - available_tokens AS other_tokens,
    radix_protected_tokens, running_batch_tokens, inflight_transfer_tokens, prealloc_tokens,
    retracted_tokens,
    capacity_tokens - held_tokens - available_tokens - radix_protected_tokens
        - running_batch_tokens - inflight_transfer_tokens - prealloc_tokens - retracted_tokens
        AS other_unaccounted_tokens
FROM pool_snapshots;

-- @macro _pool_kept(warmup_fraction)
-- pool_other ticks with counters after the warm-up (the first `warmup_fraction` of each
-- run's time span), each with a weight for time-weighted statistics: the seconds to the
-- worker's next kept tick, capped at twice the worker's median tick interval (the poller
-- backs off to 2, 4 and 8 intervals on a failing worker; a gap is not counted as the
-- state before it).  The last tick weighs the cap's half, one median interval.
CREATE MACRO _pool_kept(warmup_fraction) AS TABLE
WITH spans AS (
    SELECT run_id, min(t_s) AS t0, max(t_s) AS t1 FROM pool_snapshots GROUP BY run_id
), kept AS (
    SELECT p.*,
           lead(p.t_s) OVER (PARTITION BY p.run_id, p.worker_id ORDER BY p.t_s) - p.t_s AS dt
    FROM pool_other AS p JOIN spans AS s USING (run_id)
    WHERE p.t_s >= s.t0 + warmup_fraction * (s.t1 - s.t0) AND p.other_tokens IS NOT NULL
), typical AS (
    SELECT run_id, worker_id, quantile_cont(dt, 0.5) AS median_dt FROM kept GROUP BY ALL
)
SELECT k.* EXCLUDE (dt),
       least(coalesce(k.dt, t.median_dt, 0), 2 * coalesce(t.median_dt, 0)) AS weight_s
FROM kept AS k JOIN typical AS t USING (run_id, worker_id);

-- @macro pool_worker_stats(warmup_fraction)
-- Per worker, after dropping the first `warmup_fraction` of each run's time span
-- (default 0.1): statistics over ticks, and the same weighted by time (each tick weighs
-- the seconds to the worker's next tick, capped at twice its median interval; see
-- _pool_kept).  Tick percentiles are linear-interpolated; time-weighted percentiles are
-- the smallest value whose cumulative time share reaches the quantile.
-- @column run_id                  the run
-- @column experiment              experiment label
-- @column worker_id               worker
-- @column worker_role             prefill or decode
-- @column ticks                   ticks kept (after warm-up, with counters)
-- @column other_mean              mean other, tokens
-- @column other_p50               median other, tokens
-- @column other_p90               90th percentile other, tokens
-- @column other_max               largest other, tokens
-- @column held_mean               mean held, tokens
-- @column available_mean          mean available, tokens
-- @column other_time_mean         time-weighted mean other, tokens
-- @column held_time_mean          time-weighted mean held, tokens
-- @column available_time_mean     time-weighted mean available, tokens
-- @column other_time_p50          time-weighted median other, tokens
-- @column other_time_p90          time-weighted 90th percentile other, tokens
CREATE MACRO pool_worker_stats(warmup_fraction := 0.1) AS TABLE
WITH kept AS (FROM _pool_kept(warmup_fraction)), cumulative AS (
    SELECT run_id, worker_id, other_tokens,
           sum(weight_s) OVER (PARTITION BY run_id, worker_id ORDER BY other_tokens
                               ROWS UNBOUNDED PRECEDING)
               / sum(weight_s) OVER (PARTITION BY run_id, worker_id) AS time_share
    FROM kept
), weighted AS (
    SELECT run_id, worker_id,
           min(other_tokens) FILTER (WHERE time_share >= 0.5) AS other_time_p50,
           min(other_tokens) FILTER (WHERE time_share >= 0.9) AS other_time_p90
    FROM cumulative GROUP BY ALL
)
SELECT
    run_id, experiment, worker_id, worker_role,
    count(*) AS ticks,
    avg(other_tokens) AS other_mean,
    quantile_cont(other_tokens, 0.5) AS other_p50,
    quantile_cont(other_tokens, 0.9) AS other_p90,
    max(other_tokens) AS other_max,
    avg(held_tokens) AS held_mean,
    avg(available_tokens) AS available_mean,
    sum(other_tokens * weight_s) / sum(weight_s) AS other_time_mean,
    sum(held_tokens * weight_s) / sum(weight_s) AS held_time_mean,
    sum(available_tokens * weight_s) / sum(weight_s) AS available_time_mean,
    any_value(w.other_time_p50) AS other_time_p50,
    any_value(w.other_time_p90) AS other_time_p90
FROM kept JOIN weighted AS w USING (run_id, worker_id)
GROUP BY run_id, experiment, worker_id, worker_role
ORDER BY run_id, worker_id;

-- @macro pool_threshold_freq(other_above, held_above, other_fraction_above, warmup_fraction)
-- Share of ticks, and of time, above each threshold, per worker and (worker_id NULL) per
-- role of a run, after the same warm-up as pool_worker_stats (default 0.1).  Defaults:
-- other above 30K / 50K / 70K tokens, held above 60K tokens, other above 25 / 50 / 75 % of
-- capacity.  Ticks without counters are not counted.
-- @column run_id        the run
-- @column experiment    experiment label
-- @column worker_role   prefill or decode
-- @column worker_id     worker, or NULL for all workers of the role
-- @column measure       other_tokens, held_tokens or other_fraction_of_capacity
-- @column threshold     the threshold (tokens, or a fraction of capacity)
-- @column ticks         ticks counted
-- @column ticks_above   ticks strictly above the threshold
-- @column share         ticks_above / ticks
-- @column time_share    share of the time (tick weights, see _pool_kept) spent above
CREATE MACRO pool_threshold_freq(other_above := [30000, 50000, 70000], held_above := [60000],
                                 other_fraction_above := [0.25, 0.5, 0.75],
                                 warmup_fraction := 0.1) AS TABLE
WITH thresholds AS (
    SELECT 'other_tokens' AS measure, unnest(other_above)::DOUBLE AS threshold
    UNION ALL SELECT 'held_tokens', unnest(held_above)::DOUBLE
    UNION ALL SELECT 'other_fraction_of_capacity', unnest(other_fraction_above)::DOUBLE
), marked AS (
    SELECT k.*, t.measure, t.threshold,
           CASE t.measure
               WHEN 'other_tokens' THEN other_tokens > threshold
               WHEN 'held_tokens' THEN held_tokens > threshold
               ELSE other_tokens > threshold * capacity_tokens END AS above
    FROM _pool_kept(warmup_fraction) AS k CROSS JOIN thresholds AS t
), counted AS (
    SELECT
        run_id, experiment, worker_role, worker_id, measure, threshold,
        count(*) AS ticks,
        count(*) FILTER (WHERE above) AS ticks_above,
        sum(weight_s) FILTER (WHERE above) AS time_above,
        sum(weight_s) AS time_total
    FROM marked
    GROUP BY GROUPING SETS (
        (run_id, experiment, worker_role, worker_id, measure, threshold),
        (run_id, experiment, worker_role, measure, threshold)
    )
)
SELECT * EXCLUDE (time_above, time_total), ticks_above / ticks AS share,
       coalesce(time_above, 0) / nullif(time_total, 0) AS time_share
FROM counted
ORDER BY run_id, worker_role, worker_id NULLS FIRST, measure, threshold;

-- @macro pool_decode_summary(warmup_fraction)
-- The decode workers of each run taken together after the warm-up (seed 001_* section
-- 5): ticks, other percentiles by ticks (linear) and by time, and the shares of ticks
-- and of time with other above 30K / 50K / 70K and held above 60K tokens.
-- @column run_id                 the run
-- @column experiment             experiment label
-- @column decode_ticks           decode ticks kept
-- @column other_p50              median other over ticks, tokens
-- @column other_p90              90th percentile other over ticks, tokens
-- @column other_time_p50         time-weighted median other, tokens
-- @column other_time_p90         time-weighted 90th percentile other, tokens
-- @column other_above_30k        share of ticks with other > 30,000
-- @column other_above_50k        share of ticks with other > 50,000
-- @column other_above_70k        share of ticks with other > 70,000
-- @column held_above_60k         share of ticks with held > 60,000
-- @column other_above_30k_time   share of time with other > 30,000
-- @column other_above_70k_time   share of time with other > 70,000
CREATE MACRO pool_decode_summary(warmup_fraction := 0.1) AS TABLE
WITH kept AS (FROM _pool_kept(warmup_fraction) WHERE worker_role = 'decode'), cumulative AS (
    SELECT run_id, other_tokens,
           sum(weight_s) OVER (PARTITION BY run_id ORDER BY other_tokens
                               ROWS UNBOUNDED PRECEDING)
               / sum(weight_s) OVER (PARTITION BY run_id) AS time_share
    FROM kept
), weighted AS (
    SELECT run_id,
           min(other_tokens) FILTER (WHERE time_share >= 0.5) AS other_time_p50,
           min(other_tokens) FILTER (WHERE time_share >= 0.9) AS other_time_p90
    FROM cumulative GROUP BY ALL
)
SELECT
    run_id, any_value(experiment) AS experiment, count(*) AS decode_ticks,
    quantile_cont(other_tokens, 0.5) AS other_p50,
    quantile_cont(other_tokens, 0.9) AS other_p90,
    any_value(w.other_time_p50) AS other_time_p50,
    any_value(w.other_time_p90) AS other_time_p90,
    avg((other_tokens > 30000)::INTEGER) AS other_above_30k,
    avg((other_tokens > 50000)::INTEGER) AS other_above_50k,
    avg((other_tokens > 70000)::INTEGER) AS other_above_70k,
    avg((held_tokens > 60000)::INTEGER) AS held_above_60k,
    sum(weight_s * (other_tokens > 30000)::INTEGER) / nullif(sum(weight_s), 0)
        AS other_above_30k_time,
    sum(weight_s * (other_tokens > 70000)::INTEGER) / nullif(sum(weight_s), 0)
        AS other_above_70k_time
FROM kept JOIN weighted AS w USING (run_id)
GROUP BY run_id
ORDER BY run_id;

-- @macro pool_stuck_intervals(other_above, min_ticks, role, warmup_fraction)
-- Stretches of consecutive ticks of one worker with held = 0, no sessions and other above
-- `other_above` tokens (default 30K): memory that nothing visible holds.  A failed poll
-- ends a stretch.  Only stretches of at least `min_ticks` ticks (default 2), of workers of
-- `role` (default 'decode': prefill workers always report held = 0; NULL for every role),
-- after the same warm-up as pool_worker_stats (default 0.1), are listed.
-- @column run_id       the run
-- @column experiment   experiment label
-- @column worker_id    worker
-- @column worker_role  prefill or decode
-- @column start_s      t_s of the first tick of the stretch
-- @column end_s        t_s of the last tick
-- @column ticks        ticks in the stretch
-- @column duration_s   end_s - start_s
-- @column other_mean   mean other over the stretch, tokens
-- @column other_max    largest other over the stretch, tokens
CREATE MACRO pool_stuck_intervals(other_above := 30000, min_ticks := 2, role := 'decode',
                                  warmup_fraction := 0.1) AS TABLE
WITH spans AS (
    SELECT run_id, min(t_s) AS t0, max(t_s) AS t1 FROM pool_snapshots GROUP BY run_id
), numbered AS (
    SELECT
        p.*,
        coalesce(held_tokens = 0 AND session_count = 0 AND other_tokens > other_above, false)
            AS stuck,
        row_number() OVER (PARTITION BY run_id, worker_id ORDER BY t_s) AS tick
    FROM pool_other AS p JOIN spans AS s USING (run_id)
    WHERE (role IS NULL OR worker_role = role)
      AND p.t_s >= s.t0 + warmup_fraction * (s.t1 - s.t0)
), islands AS (
    SELECT *, tick - row_number() OVER (PARTITION BY run_id, worker_id ORDER BY t_s) AS island
    FROM numbered
    WHERE stuck
), stretches AS (
    SELECT
        run_id, experiment, worker_id, worker_role,
        min(t_s) AS start_s, max(t_s) AS end_s, count(*) AS ticks,
        max(t_s) - min(t_s) AS duration_s,
        avg(other_tokens) AS other_mean, max(other_tokens) AS other_max
    FROM islands
    GROUP BY run_id, experiment, worker_id, worker_role, island
)
SELECT * FROM stretches WHERE ticks >= min_ticks ORDER BY run_id, worker_id, start_s;

-- @macro pool_throughput_by_state(other_above, stuck_other_above, warmup_fraction)
-- last_gen_throughput beside the pool's state (seed 001_* sections 3.1, 8.7): per worker,
-- ticks in a stuck stretch (held = 0, no sessions, other > `stuck_other_above`, default
-- 30K), ticks with a high other (> `other_above`, default 70K, not stuck), and the rest;
-- after the same warm-up as pool_worker_stats (default 0.1).  Percentiles are linear.
-- @column run_id               the run
-- @column experiment           experiment label
-- @column worker_id            worker
-- @column state                stuck, high_other or normal
-- @column ticks                ticks in that state
-- @column with_throughput      of them, reporting last_gen_throughput
-- @column throughput_mean      mean last_gen_throughput, tokens/s
-- @column throughput_p50       median last_gen_throughput, tokens/s
CREATE MACRO pool_throughput_by_state(other_above := 70000, stuck_other_above := 30000,
                                      warmup_fraction := 0.1) AS TABLE
WITH kept AS (
    SELECT k.*, s.last_gen_throughput
    FROM _pool_kept(warmup_fraction) AS k
    JOIN pool_snapshots AS s USING (run_id, worker_id, t_s)
), labelled AS (
    SELECT *, CASE
        WHEN held_tokens = 0 AND session_count = 0 AND other_tokens > stuck_other_above
            THEN 'stuck'
        WHEN other_tokens > other_above THEN 'high_other'
        ELSE 'normal' END AS state
    FROM kept
)
SELECT run_id, experiment, worker_id, state, count(*) AS ticks,
       count(last_gen_throughput) AS with_throughput,
       avg(last_gen_throughput) AS throughput_mean,
       quantile_cont(last_gen_throughput, 0.5) AS throughput_p50
FROM labelled
GROUP BY ALL
ORDER BY run_id, worker_id, state;
