-- Whether a KV-event stream can be trusted: per worker and medium, the signs that the
-- events an engine published do not tell its whole pool.
--
-- kv_pool_residency counts the blocks resident as stores less removals.  That count is
-- right only when every removal was published and every batch arrived.  Three things
-- break it, and each is looked for here:
--   over capacity: the blocks the events leave resident at once exceed what the pool can
--     hold, so removals went unpublished (or were lost).  The capacity in blocks is the
--     capacity_blocks argument (every medium), else, for the GPU medium (or an event
--     without a medium), the engine's own: in engine_metrics, vLLM's
--     vllm:cache_config_info label num_gpu_blocks (vllm 0.33.0, CacheConfig.metrics_info
--     in vllm/config/cache.py) or SGLang's sglang:max_total_num_tokens over the events'
--     block size (sglang 0.5.23, sglang/srt/observability/metrics_collector.py), else
--     pool_snapshots' capacity_tokens over the block size; each is matched to the events
--     by worker name (the --endpoint NAME), in any run, taking the largest the worker
--     reported.  Without one the check is not made;
--   no removals: a medium that stored blocks but published no removal (and its worker no
--     clear) over a recording of at least long_run_s seconds: its residency only grows.
--     LMCache is one such publisher: vLLM's LMCache connector turns LMCache's events into
--     BlockStored only (vllm 0.33.0, vllm/distributed/kv_transfer/kv_connector/v1/
--     lmcache_connector.py, get_kv_connector_kv_cache_events), so its host tier's
--     removals never reach the stream;
--   lost batches: vLLM numbers the batches it publishes 0, 1, 2, ... per engine (a
--     batch only when a scheduler step has events; vllm/distributed/kv_events.py), so a
--     number no row carries within an epoch is a batch missed (a collector's `gap` row
--     marks one), from 0 in an epoch after a restart, from the first number heard in
--     epoch 0; an `error` row is a batch that arrived but could not be read.  A lost
--     batch leaves every medium of its worker unsure from the last batch before it to
--     the end of its epoch (a restart empties the pool, and the count is right again).
--
-- Worked example (kv_event_completeness(), long_run_s 600): worker gpu0 publishes
--   seq 0, t 0 s:   stored GPU [a, b], stored CPU [a, b]
--   seq 1, t 100:   stored GPU [c], removed GPU [a], stored CPU [c]
--   seq 2, t 200:   stored GPU [d]
--   seq 4, t 400:   stored GPU [e], stored CPU [d, e]      (seq 3 never arrived)
--   seq 5, t 700:   removed GPU [b], stored CPU [f]
-- and pool_snapshots says gpu0 holds 48 tokens (blocks of 16: capacity 3 blocks).  GPU:
-- resident 2, 3, 2, 3, 4, 3, so 4 > 3 at t 400 (the missed batch 3 held a removal):
-- over_capacity_t_s 400.  CPU: 6 stored, 0 removed over 700 s >= 600: no removals; no
-- capacity known for it.  Both rows: missed_batches 1.  kv_pool_residency_checked(100.0)
-- puts the capacity caveat on every GPU row, the no-removals caveat on every CPU row, and
-- the lost batch on the rows of the buckets ending after t 200 (t_s 200, 400, 700).
--
-- @requires kv_events.sql
-- @requires pool.sql
-- @requires engine_metrics.sql

-- @macro _kv_event_capacity(capacity_blocks)
-- Per run, worker and medium of the KV events: the pool's capacity in blocks and where
-- it came from (see the file's header).
-- @column run_id           the run
-- @column worker           the engine
-- @column medium           where the blocks live, when sent
-- @column capacity_blocks  the pool's capacity in blocks, NULL when unknown
-- @column capacity_source  argument, engine_metrics or pool_snapshots
CREATE MACRO _kv_event_capacity(capacity_blocks) AS TABLE
WITH asked AS (
    SELECT capacity_blocks::BIGINT AS asked_blocks
), media AS (
    SELECT run_id, worker, medium,
           medium IS NULL OR upper(medium) = 'GPU' AS gpu,
           any_value(block_size) FILTER (WHERE kind = 'stored') AS block_size
    FROM kv_events
    WHERE kind IN ('stored', 'removed')
    GROUP BY run_id, worker, medium
), engine AS (
    SELECT worker_id AS worker,
           max(try_cast(json_extract_string(labels, '$.num_gpu_blocks') AS BIGINT))
               FILTER (WHERE metric = 'vllm:cache_config_info') AS vllm_blocks,
           max(value) FILTER (WHERE metric = 'sglang:max_total_num_tokens')::BIGINT
               AS sglang_tokens
    FROM engine_metrics
    WHERE metric IN ('vllm:cache_config_info', 'sglang:max_total_num_tokens')
    GROUP BY worker_id
), polled AS (
    SELECT worker_id AS worker, max(capacity_tokens) AS polled_tokens
    FROM pool_snapshots
    GROUP BY worker_id
), found AS (
    SELECT m.run_id, m.worker, m.medium, a.asked_blocks,
           CASE WHEN m.gpu
                THEN coalesce(e.vllm_blocks, e.sglang_tokens // m.block_size) END
               AS engine_blocks,
           CASE WHEN m.gpu THEN p.polled_tokens // m.block_size END AS polled_blocks
    FROM media AS m
    CROSS JOIN asked AS a
    LEFT JOIN engine AS e USING (worker)
    LEFT JOIN polled AS p USING (worker)
)
SELECT run_id, worker, medium,
       coalesce(asked_blocks, engine_blocks, polled_blocks) AS capacity_blocks,
       CASE WHEN asked_blocks IS NOT NULL THEN 'argument'
            WHEN engine_blocks IS NOT NULL THEN 'engine_metrics'
            WHEN polled_blocks IS NOT NULL THEN 'pool_snapshots' END AS capacity_source
FROM found;

-- @view _kv_event_losses
-- Each place a worker's stream lost batches: the sequence numbers missed before a
-- received batch (or an unreadable one), and from when to when the pool's count is
-- unsure (seconds from the run's first batch; until NULL: the end of the recording).
CREATE VIEW _kv_event_losses AS
WITH starts AS (
    SELECT run_id, min(ts) AS t0 FROM kv_events GROUP BY run_id
), epochs AS (
    SELECT run_id, worker, epoch, min(ts) AS first_ts,
           lead(min(ts)) OVER (PARTITION BY run_id, worker ORDER BY epoch) AS next_ts
    FROM kv_events
    GROUP BY run_id, worker, epoch
), numbered AS (
    SELECT run_id, worker, epoch, seq, bool_or(kind = 'error') AS unreadable,
           min(ts) AS ts
    FROM kv_events
    WHERE kind IN ('stored', 'removed', 'cleared', 'error') AND seq IS NOT NULL
    GROUP BY run_id, worker, epoch, seq
), holes AS (
    SELECT *,
           seq - coalesce(lag(seq) OVER w,
                          CASE WHEN epoch > 0 THEN -1 ELSE seq - 1 END) - 1 AS missed,
           max(ts) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before_ts
    FROM numbered
    WINDOW w AS (PARTITION BY run_id, worker, epoch ORDER BY seq)
), losses AS (
    SELECT run_id, worker, epoch, missed, unreadable::INTEGER AS unreadable, before_ts
    FROM holes
    WHERE missed > 0 OR unreadable
    UNION ALL  -- an unreadable message without a number: somewhere in its epoch
    SELECT run_id, worker, epoch, 0, 1, NULL
    FROM kv_events
    WHERE kind = 'error' AND seq IS NULL
)
SELECT l.run_id, l.worker, l.epoch, l.missed, l.unreadable,
       coalesce(l.before_ts, e.first_ts) - s.t0 AS from_t_s,
       e.next_ts - s.t0 AS until_t_s
FROM losses AS l
JOIN epochs AS e USING (run_id, worker, epoch)
JOIN starts AS s USING (run_id);

-- @macro _kv_medium_checks(capacity_blocks, long_run_s)
-- Per run, worker and medium: the counts behind the completeness check, and the caveats
-- that hold for the whole medium (over capacity, no removals).
CREATE MACRO _kv_medium_checks(capacity_blocks, long_run_s) AS TABLE
WITH resident AS (
    SELECT run_id, worker, medium, kind, t_s,
           sum(CASE kind WHEN 'stored' THEN 1 ELSE -1 END) OVER (
               PARTITION BY run_id, worker, medium, epoch, clears
               ORDER BY seq, position, block_idx
               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
           ) AS resident
    FROM _kv_block_events
), workers AS (
    SELECT run_id, worker, count(DISTINCT epoch) AS epochs,
           count(*) FILTER (WHERE kind = 'cleared') AS clears,
           max(ts) - min(ts) AS span_s
    FROM kv_events
    GROUP BY run_id, worker
), lost AS (
    SELECT run_id, worker, sum(missed) AS missed_batches, sum(unreadable) AS unreadable_batches
    FROM _kv_event_losses
    GROUP BY run_id, worker
), media AS (
    SELECT r.run_id, r.worker, r.medium,
           count(*) FILTER (WHERE r.kind = 'stored') AS stored,
           count(*) FILTER (WHERE r.kind = 'removed') AS removed,
           max(r.resident) AS max_resident_blocks,
           any_value(c.capacity_blocks) AS capacity_blocks,
           any_value(c.capacity_source) AS capacity_source,
           min(r.t_s) FILTER (WHERE r.resident > c.capacity_blocks) AS over_capacity_t_s
    FROM resident AS r
    JOIN _kv_event_capacity(capacity_blocks) AS c
      ON c.run_id = r.run_id AND c.worker = r.worker AND c.medium IS NOT DISTINCT FROM r.medium
    GROUP BY r.run_id, r.worker, r.medium
)
SELECT m.run_id, m.worker, m.medium, w.epochs, w.span_s, m.stored, m.removed, w.clears,
       m.max_resident_blocks, m.capacity_blocks, m.capacity_source, m.over_capacity_t_s,
       coalesce(l.missed_batches, 0)::BIGINT AS missed_batches,
       coalesce(l.unreadable_batches, 0)::BIGINT AS unreadable_batches,
       CASE WHEN m.over_capacity_t_s IS NOT NULL
            THEN format('over capacity: {} blocks resident at once, the pool holds {} ({}): '
                        'removals went unpublished', m.max_resident_blocks,
                        m.capacity_blocks, m.capacity_source) END AS capacity_caveat,
       CASE WHEN m.stored > 0 AND m.removed = 0 AND w.clears = 0
                 AND w.span_s >= long_run_s
            THEN format('no removals: {} blocks stored and none removed in {} s, so its '
                        'residency only grows', m.stored, round(w.span_s, 1)) END
           AS removal_caveat
FROM media AS m
JOIN workers AS w USING (run_id, worker)
LEFT JOIN lost AS l USING (run_id, worker);

-- @macro kv_event_completeness(capacity_blocks, long_run_s)
-- Per run, worker and medium of the KV events: whether the stream tells the whole pool
-- (see the header): residency past the pool's capacity, a medium that publishes no
-- removals over a recording of long_run_s seconds or more (default 600), and the
-- worker's lost batches.  capacity_blocks (default NULL) is the pool's size in blocks
-- for every medium; NULL takes the engine's own for the GPU medium where kvtrace holds it.
-- @column run_id               the run
-- @column worker               the engine
-- @column medium               where the blocks live, when sent
-- @column epochs               the worker's epochs (1 + its restarts)
-- @column span_s               seconds from the worker's first batch to its last
-- @column stored               blocks the medium stored
-- @column removed              blocks the medium removed
-- @column clears               the worker's AllBlocksCleared events
-- @column max_resident_blocks  the most blocks the events leave resident at once
-- @column capacity_blocks      the pool's capacity in blocks, NULL when unknown
-- @column capacity_source      argument, engine_metrics or pool_snapshots
-- @column over_capacity_t_s    when the resident blocks first exceeded the capacity
--                              (seconds from the run's first batch), else NULL
-- @column missed_batches       the worker's batches that never arrived
-- @column unreadable_batches   the worker's batches that arrived but could not be read
-- @column complete             true when none of the checks found anything
-- @column caveat               what was found, NULL when nothing
CREATE MACRO kv_event_completeness(capacity_blocks := NULL, long_run_s := 600.0) AS TABLE
SELECT * EXCLUDE (capacity_caveat, removal_caveat, loss_caveat, caveat),
       caveat IS NULL AS complete, caveat
FROM (
    SELECT *,
           CASE WHEN missed_batches + unreadable_batches > 0
                THEN format('lost batches: {} missed, {} unreadable', missed_batches,
                            unreadable_batches) END AS loss_caveat,
           nullif(concat_ws('; ', capacity_caveat, removal_caveat, loss_caveat), '')
               AS caveat
    FROM _kv_medium_checks(capacity_blocks, long_run_s)
)
ORDER BY run_id, worker, medium;

-- @macro kv_pool_residency_checked(bucket_s, capacity_blocks, long_run_s)
-- kv_pool_residency(bucket_s) with a caveat on each row the completeness checks affect:
-- the medium's own (over capacity, no removals: every row of it) and the worker's lost
-- batches (the rows of the buckets that end after the last batch before the loss and
-- start before the end of its epoch).  kv_pool_residency itself is unchanged.
-- @column run_id           the run
-- @column worker           the engine
-- @column medium           where the blocks live, when sent
-- @column t_s              the bucket's start, seconds from the run's first batch
-- @column stored           blocks stored
-- @column removed          blocks removed
-- @column restores         stored blocks that had been removed before
-- @column resident_blocks  blocks in the pool at the bucket's end
-- @column churn_per_s      blocks removed per second
-- @column mean_lifetime_s  mean time from store to removal of the blocks removed
-- @column caveat           why the row's counts may be wrong, NULL when nothing is known
--                          against it
CREATE MACRO kv_pool_residency_checked(bucket_s := 1.0, capacity_blocks := NULL,
                                       long_run_s := 600.0) AS TABLE
WITH rows AS (
    SELECT * FROM kv_pool_residency(bucket_s)
), lost AS (
    SELECT r.run_id, r.worker, r.medium, r.t_s,
           string_agg(format('batches lost after t = {} s: {} missed, {} unreadable',
                             round(l.from_t_s, 3), l.missed, l.unreadable), '; '
                      ORDER BY l.from_t_s, l.missed) AS loss_caveat
    FROM rows AS r
    JOIN _kv_event_losses AS l
      ON l.run_id = r.run_id AND l.worker = r.worker
     AND r.t_s + bucket_s > l.from_t_s
     AND (l.until_t_s IS NULL OR r.t_s < l.until_t_s)
    GROUP BY r.run_id, r.worker, r.medium, r.t_s
)
SELECT r.*,
       nullif(concat_ws('; ', m.capacity_caveat, m.removal_caveat, l.loss_caveat), '')
           AS caveat
FROM rows AS r
LEFT JOIN _kv_medium_checks(capacity_blocks, long_run_s) AS m
  ON m.run_id = r.run_id AND m.worker = r.worker AND m.medium IS NOT DISTINCT FROM r.medium
LEFT JOIN lost AS l
  ON l.run_id = r.run_id AND l.worker = r.worker AND l.medium IS NOT DISTINCT FROM r.medium
 AND l.t_s = r.t_s
ORDER BY r.run_id, r.worker, r.medium, r.t_s;
