-- KV-cache events of serving engines (`kvtrace collect kv-events`, or recorded files):
-- what an engine's block pool held, when, and which prefixes its blocks form.
--
-- kv_events has one row per (event, block): `stored` and `removed` name a block by its
-- hash (the engine's chained hash of the tokens up to the block's end, so one hash is
-- one prefix), `cleared` empties the worker's pool; `gap` rows mark sequence numbers
-- the collector missed (their events are unknown), `error` rows messages it could not
-- read, and `restart` rows where a worker's sequence numbers went back (not a batch
-- delivered twice): the engine restarted, its pool empty, and a new `epoch` began.
-- Events are ordered by (epoch, seq, position, block_idx) within a worker; times are
-- the batch's `ts` (Unix time in seconds), counted from the run's first batch.
--
-- Worked example (kv_pool_residency(1.0)): a worker's first batch stores blocks a and b
-- (t = 0), it removes a at 1.3 s and stores a again at 1.7 s.  Second 0: stored 2,
-- resident 2.  Second 1: stored 1, removed 1, one re-store (a came back after its
-- removal), resident 2, and a's lifetime 1.3 s.
--
-- Worked example (kv_prefix_tree): stored events [a, b] (a's parent none) and [c] with
-- parent a give the tree a -> b, a -> c: a has depth 1 and two children (a shared
-- prefix), b and c depth 2 and are leaves.

-- @view kv_events
-- One row per block of each KV-cache event an engine published.
-- @column run_id       the run
-- @column worker       the engine (its --endpoint label)
-- @column epoch        0, and one more each time the worker's engine restarted
-- @column dp_rank      the batch's data-parallel rank, when sent
-- @column seq          the batch's sequence number (from 0 in each epoch)
-- @column ts           the batch's time, Unix time in seconds
-- @column position     the event's place in its batch
-- @column block_idx    the block's place in its event
-- @column kind         stored, removed, cleared, gap, error or restart
-- @column medium       where the block lives (GPU, CPU, ...), when sent
-- @column lora_id      the LoRA adapter, when sent
-- @column block_hash   the block's hash (decimal, or hex for byte hashes)
-- @column parent_hash  the hash of the block before it in its prefix
-- @column block_size   tokens per block (stored events)
-- @column detail       what a gap, error or restart row is about
CREATE VIEW kv_events AS
SELECT run_id, worker, epoch, dp_rank, seq, ts, position, block_idx, kind, medium, lora_id,
       block_hash, parent_hash, block_size, detail
FROM (
    SELECT * REPLACE (coalesce(epoch, 0) AS epoch),  -- files before epochs: all epoch 0
           row_number() OVER (
               PARTITION BY run_id, worker, coalesce(epoch, 0), seq, position, block_idx,
                            kind, detail
           ) AS _row
    FROM _kv_events_files
)
WHERE _row = 1;

-- @view kv_event_blocks
-- The tokens of each stored block, once per hash.
-- @column run_id      the run
-- @column block_hash  the block's hash
-- @column block_size  tokens per block
-- @column token_ids   the block's token ids, when the engine sent them
CREATE VIEW kv_event_blocks AS
SELECT * EXCLUDE (_row)
FROM (
    SELECT *, row_number() OVER (PARTITION BY run_id, block_hash) AS _row
    FROM _kv_event_blocks_files
)
WHERE _row = 1;

-- @view _kv_block_events
-- Stored and removed blocks in order, with the pool's clears so far in the engine's
-- epoch (a restart or a clear empties the pool) and what happened to the same hash
-- before.
CREATE VIEW _kv_block_events AS
WITH ordered AS (
    SELECT *,
           ts - min(ts) OVER (PARTITION BY run_id) AS t_s,
           count(*) FILTER (WHERE kind = 'cleared') OVER (
               PARTITION BY run_id, worker, epoch ORDER BY seq, position, block_idx
               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
           ) AS clears
    FROM kv_events
    WHERE kind IN ('stored', 'removed', 'cleared')
)
SELECT *,
       lag(kind) OVER same_block AS previous_kind,
       t_s - lag(t_s) OVER same_block AS since_previous_s
FROM ordered
WHERE kind <> 'cleared'
WINDOW same_block AS (PARTITION BY run_id, worker, medium, epoch, clears, block_hash
                      ORDER BY seq, position, block_idx);

-- @macro kv_pool_residency(bucket_s)
-- Per worker, medium and time bucket: blocks stored and removed, re-stores (a block
-- stored again after the pool removed it: the thrash a larger pool or a lower tier would
-- have served), the blocks resident at the bucket's end, and the mean lifetime of the
-- blocks removed in it.
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
CREATE MACRO kv_pool_residency(bucket_s := 1.0) AS TABLE
WITH counted AS (
    SELECT *, floor(t_s / bucket_s) AS bucket,
           sum(CASE kind WHEN 'stored' THEN 1 ELSE -1 END) OVER (
               PARTITION BY run_id, worker, medium, epoch, clears
               ORDER BY seq, position, block_idx
               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
           ) AS resident
    FROM _kv_block_events
)
SELECT run_id, worker, medium, bucket * bucket_s AS t_s,
       count(*) FILTER (WHERE kind = 'stored') AS stored,
       count(*) FILTER (WHERE kind = 'removed') AS removed,
       count(*) FILTER (WHERE kind = 'stored' AND previous_kind = 'removed') AS restores,
       arg_max(resident, (epoch, seq, position, block_idx)) AS resident_blocks,
       count(*) FILTER (WHERE kind = 'removed') / bucket_s AS churn_per_s,
       avg(since_previous_s) FILTER (WHERE kind = 'removed' AND previous_kind = 'stored')
           AS mean_lifetime_s
FROM counted
GROUP BY run_id, worker, medium, bucket
ORDER BY run_id, worker, medium, t_s;

-- @view kv_prefix_tree
-- One row per block the engines stored: its place in the prefix tree the blocks' parent
-- hashes form, how many blocks extend it, and how often it was stored.
-- @column run_id       the run
-- @column block_hash   the block
-- @column parent_hash  the block before it, NULL for a prompt's first block
-- @column depth        blocks from the root, 1 for a first block
-- @column children     distinct blocks stored after it; 2 or more: a shared prefix
-- @column stores       times it was stored (more than once: evicted and needed again)
CREATE VIEW kv_prefix_tree AS
WITH RECURSIVE nodes AS MATERIALIZED (
    SELECT run_id, block_hash, any_value(parent_hash) AS parent_hash, count(*) AS stores
    FROM kv_events WHERE kind = 'stored'
    GROUP BY run_id, block_hash
), children AS (
    SELECT run_id, parent_hash AS block_hash, count(*) AS children
    FROM nodes WHERE parent_hash IS NOT NULL
    GROUP BY run_id, parent_hash
), depths(run_id, block_hash, depth) AS (
    SELECT n.run_id, n.block_hash, 1
    FROM nodes AS n
    WHERE n.parent_hash IS NULL
       OR NOT EXISTS (SELECT 1 FROM nodes AS p
                      WHERE p.run_id = n.run_id AND p.block_hash = n.parent_hash)
    UNION ALL
    SELECT n.run_id, n.block_hash, d.depth + 1
    FROM nodes AS n JOIN depths AS d ON n.run_id = d.run_id AND n.parent_hash = d.block_hash
)
SELECT n.run_id, n.block_hash, n.parent_hash, d.depth, coalesce(c.children, 0) AS children,
       n.stores
FROM nodes AS n
JOIN depths AS d USING (run_id, block_hash)
LEFT JOIN children AS c USING (run_id, block_hash)
ORDER BY n.run_id, d.depth, n.block_hash;

-- @view kv_prefix_tree_summary
-- Per run: the prefix tree of the stored blocks in a few numbers.
-- @column run_id           the run
-- @column blocks           distinct blocks stored
-- @column prompts          first blocks (roots of the tree)
-- @column leaves           blocks nothing extends
-- @column shared_prefixes  blocks two or more blocks extend
-- @column max_depth        the deepest block, in blocks
-- @column mean_depth       mean depth of a block
-- @column restored_blocks  blocks stored more than once
CREATE VIEW kv_prefix_tree_summary AS
SELECT run_id, count(*) AS blocks, count(*) FILTER (WHERE depth = 1) AS prompts,
       count(*) FILTER (WHERE children = 0) AS leaves,
       count(*) FILTER (WHERE children >= 2) AS shared_prefixes,
       max(depth) AS max_depth, avg(depth) AS mean_depth,
       count(*) FILTER (WHERE stores > 1) AS restored_blocks
FROM kv_prefix_tree
GROUP BY run_id
ORDER BY run_id;

-- @view kv_events_as_workload
-- The stored-block events as a Mooncake-style hash trace: one request per stored event
-- (an engine stores a request's new blocks together), its hash_ids the whole prefix
-- chain up to the event's last block (ancestors included), numbered densely per run.
-- COPY it to a JSONL file and `kvtrace ingest` it to run the workload prefix analytics
-- and the what-if on real engine traffic.
-- @column run_id         the run
-- @column worker         the engine that stored the blocks
-- @column request_idx    the event's place in the run, by time
-- @column timestamp      milliseconds from the run's first batch (Mooncake's field)
-- @column input_length   tokens of the chain: blocks x block size
-- @column output_length  0: the events do not say
-- @column hash_ids       the chain's blocks, root first, as dense integers
CREATE VIEW kv_events_as_workload AS
WITH RECURSIVE nodes AS MATERIALIZED (
    SELECT run_id, block_hash, any_value(parent_hash) AS parent_hash,
           dense_rank() OVER (PARTITION BY run_id ORDER BY block_hash) - 1 AS id
    FROM kv_events WHERE kind = 'stored'
    GROUP BY run_id, block_hash
), chains(run_id, block_hash, chain) AS (
    SELECT n.run_id, n.block_hash, [n.id]
    FROM nodes AS n
    WHERE n.parent_hash IS NULL
       OR NOT EXISTS (SELECT 1 FROM nodes AS p
                      WHERE p.run_id = n.run_id AND p.block_hash = n.parent_hash)
    UNION ALL
    SELECT n.run_id, n.block_hash, list_append(c.chain, n.id)
    FROM nodes AS n JOIN chains AS c ON n.run_id = c.run_id AND n.parent_hash = c.block_hash
), last_blocks AS (
    SELECT run_id, worker, epoch, seq, position, min(ts) AS ts,
           any_value(block_size) AS block_size, arg_max(block_hash, block_idx) AS last_hash
    FROM kv_events WHERE kind = 'stored'
    GROUP BY run_id, worker, epoch, seq, position
)
SELECT l.run_id, l.worker,
       row_number() OVER (PARTITION BY l.run_id
                          ORDER BY l.ts, l.worker, l.epoch, l.seq, l.position) - 1
           AS request_idx,
       round((l.ts - min(l.ts) OVER (PARTITION BY l.run_id)) * 1000)::BIGINT AS timestamp,
       len(c.chain) * l.block_size AS input_length, 0 AS output_length,
       c.chain AS hash_ids
FROM last_blocks AS l
JOIN chains AS c ON c.run_id = l.run_id AND c.block_hash = l.last_hash
ORDER BY l.run_id, request_idx;

-- @macro kv_cache_fidelity(policy, capacity_blocks, bucket_s)
-- The prefix-cache what-if against the engine's own cache: the requests of
-- kv_events_as_workload replayed, per worker, through a simulated pool of
-- capacity_blocks blocks (default: the most the worker held at once) under policy (lru
-- as vLLM's block pool, fifo, or radix_lru as SGLang's tree), beside what the engine's
-- events show, per time bucket (kvtrace/analysis/kv_cache_fidelity.py).  Every
-- simulated miss stores a block and, in a full pool, evicts one.
-- @column run_id              the run
-- @column worker              the engine
-- @column t_s                 the bucket's start, seconds from the run's first batch
-- @column capacity_blocks     the simulated pool's size
-- @column observed_stored     blocks the engine stored
-- @column simulated_stored    blocks the simulation missed and stored
-- @column observed_removed    blocks the engine removed
-- @column simulated_evicted   blocks the simulation evicted
-- @column observed_restores   blocks the engine stored again after removing them
-- @column simulated_restores  blocks the simulation stored again after evicting them
-- @column observed_resident   blocks in the engine's pool at the bucket's end
-- @column simulated_resident  blocks in the simulated pool at the bucket's end
CREATE MACRO kv_cache_fidelity(policy := 'lru', capacity_blocks := NULL, bucket_s := 1.0)
AS TABLE
SELECT unnest(kvtrace_kv_cache_fidelity(policy, capacity_blocks::BIGINT, bucket_s::DOUBLE),
              recursive := true);
