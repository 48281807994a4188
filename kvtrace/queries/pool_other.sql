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

-- @macro pool_worker_stats(warmup_fraction)
-- Per worker, after dropping the first `warmup_fraction` of each run's time span
-- (default 0.1): plain statistics over ticks and time-weighted means, where a tick
-- weighs the seconds until the worker's next kept tick (the last tick weighs nothing).
-- Percentiles are linear-interpolated over ticks.
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
CREATE MACRO pool_worker_stats(warmup_fraction := 0.1) AS TABLE
WITH spans AS (
    SELECT run_id, min(t_s) AS t0, max(t_s) AS t1 FROM pool_snapshots GROUP BY run_id
), kept AS (
    SELECT
        p.*,
        lead(p.t_s) OVER (PARTITION BY p.run_id, p.worker_id ORDER BY p.t_s) - p.t_s AS dt
    FROM pool_other AS p JOIN spans AS s USING (run_id)
    WHERE p.t_s >= s.t0 + warmup_fraction * (s.t1 - s.t0) AND p.other_tokens IS NOT NULL
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
    sum(other_tokens * dt) / sum(dt) AS other_time_mean,
    sum(held_tokens * dt) / sum(dt) AS held_time_mean,
    sum(available_tokens * dt) / sum(dt) AS available_time_mean
FROM kept
GROUP BY ALL
ORDER BY run_id, worker_id;

-- @macro pool_threshold_freq(other_above, held_above, other_fraction_above)
-- Share of ticks above each threshold, per worker and (worker_id NULL) per role of a run.
-- Defaults: other above 30K / 50K / 70K tokens, held above 60K tokens, other above 25 /
-- 50 / 75 % of capacity.  Ticks without counters are not counted.
-- @column run_id        the run
-- @column experiment    experiment label
-- @column worker_role   prefill or decode
-- @column worker_id     worker, or NULL for all workers of the role
-- @column measure       other_tokens, held_tokens or other_fraction_of_capacity
-- @column threshold     the threshold (tokens, or a fraction of capacity)
-- @column ticks         ticks counted
-- @column ticks_above   ticks strictly above the threshold
-- @column share         ticks_above / ticks
CREATE MACRO pool_threshold_freq(other_above := [30000, 50000, 70000], held_above := [60000],
                                 other_fraction_above := [0.25, 0.5, 0.75]) AS TABLE
WITH thresholds AS (
    SELECT 'other_tokens' AS measure, unnest(other_above)::DOUBLE AS threshold
    UNION ALL SELECT 'held_tokens', unnest(held_above)::DOUBLE
    UNION ALL SELECT 'other_fraction_of_capacity', unnest(other_fraction_above)::DOUBLE
), counted AS (
    SELECT
        run_id, experiment, worker_role, worker_id, measure, threshold,
        count(*) AS ticks,
        count(*) FILTER (WHERE CASE measure
            WHEN 'other_tokens' THEN other_tokens > threshold
            WHEN 'held_tokens' THEN held_tokens > threshold
            ELSE other_tokens > threshold * capacity_tokens END) AS ticks_above
    FROM pool_other CROSS JOIN thresholds
    WHERE other_tokens IS NOT NULL
    GROUP BY GROUPING SETS (
        (run_id, experiment, worker_role, worker_id, measure, threshold),
        (run_id, experiment, worker_role, measure, threshold)
    )
)
SELECT *, ticks_above / ticks AS share
FROM counted
ORDER BY run_id, worker_role, worker_id NULLS FIRST, measure, threshold;

-- @macro pool_stuck_intervals(other_above, min_ticks)
-- Stretches of consecutive ticks of one worker with held = 0, no sessions and other above
-- `other_above` tokens (default 30K): memory that nothing visible holds.  A failed poll
-- ends a stretch.  Only stretches of at least `min_ticks` ticks (default 2) are listed.
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
CREATE MACRO pool_stuck_intervals(other_above := 30000, min_ticks := 2) AS TABLE
WITH numbered AS (
    SELECT
        *,
        coalesce(held_tokens = 0 AND session_count = 0 AND other_tokens > other_above, false)
            AS stuck,
        row_number() OVER (PARTITION BY run_id, worker_id ORDER BY t_s) AS tick
    FROM pool_other
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
