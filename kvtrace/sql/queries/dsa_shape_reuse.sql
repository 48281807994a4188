-- Selection shape over time: how soon a (request, layer) selects a block again, which
-- blocks it selects only once, and the cache size past which LRU gains little.
--
-- At block size B (block_id = pos // B, re-binned from the stored positions), a touch is
-- one (request, layer, block) selected at one decode step.  Its reuse distance in steps
-- is step_idx minus the step_idx at which the same (request, layer) last selected the
-- block: decode steps between the two selections (a time distance; dsa_reuse counts
-- distinct blocks in between, a stack distance).  The first touch has NULL.  A block is
-- one-shot when its (request, layer) selects it at one step of the request only.  Each
-- run is read at its smallest stored block size, as dsa_access reads it.  Percentiles are
-- linear-interpolated (quantile_cont).
-- Example (B = 16, one request, layer 0): step 100 selects positions {3, 20}, step 101
-- {5}, step 103 {7, 40}, so blocks {0, 1}, {0}, {0, 2}.  Block 0's touches have reuse
-- distances NULL, 1 and 2; blocks 1 and 2 one touch each, NULL.  Touches 5, first touches
-- 3 (share 0.6); distances 1 and 2: mean and p50 1.5, p90 1.9.  Blocks 1 and 2 are
-- one-shot: 2 of 3 blocks, share 0.6667.
--
-- @requires dsa_access.sql

-- @macro _dsa_blocks_at(bs)
-- Per row of _dsa_access_rows: its distinct blocks at block size bs, in no set order; from
-- the stored touched_blocks when bs is a multiple of the stored block size (block
-- pos // bs = (pos // stored) // (bs / stored)), else re-binned from the positions.
CREATE MACRO _dsa_blocks_at(bs) AS TABLE
SELECT run_id, request_id, step_idx, layer_id,
       CASE WHEN touched_blocks IS NULL OR _dsa_checked_block_size(bs) % block_size <> 0
                THEN kvtrace_touched_blocks(selected_pos, _dsa_checked_block_size(bs))
            WHEN _dsa_checked_block_size(bs) = block_size THEN touched_blocks
            ELSE list_distinct(list_transform(
                touched_blocks, lambda b: b // (_dsa_checked_block_size(bs) // block_size)))
       END AS blocks
FROM _dsa_access_rows;

-- @macro _dsa_block_steps(bs)
-- Per (request, layer, block) at block size bs: the decode steps that select it, ascending.
CREATE MACRO _dsa_block_steps(bs) AS TABLE
SELECT run_id, request_id, layer_id, block_id, list_sort(list(step_idx)) AS steps
FROM (SELECT run_id, request_id, layer_id, step_idx, unnest(blocks) AS block_id
      FROM _dsa_blocks_at(bs))
GROUP BY run_id, request_id, layer_id, block_id;

-- @macro dsa_reuse_steps(bs)
-- One row per touch: a (request, layer) selecting a block at a decode step, at block size
-- `bs`, with the decode steps since it last selected that block.
-- @column run_id       the run
-- @column request_id   request
-- @column layer_id     layer
-- @column block_id     block (pos // block_size)
-- @column step_idx     decode position of the touch
-- @column block_size   the block size asked for
-- @column reuse_steps  step_idx - the step_idx of the (request, layer)'s previous selection of the block, in decode steps (NULL: first touch)
-- @column touches      decode steps of the request at which its (request, layer) selects the block (1: a one-shot block)
CREATE MACRO dsa_reuse_steps(bs) AS TABLE
SELECT run_id, request_id, layer_id, block_id, unnest(steps) AS step_idx,
       _dsa_checked_block_size(bs) AS block_size,
       unnest([NULL] || list_transform(steps[2:], lambda s, i: s - steps[i])) AS reuse_steps,
       len(steps) AS touches
FROM _dsa_block_steps(bs);

-- @macro dsa_reuse_steps_by_layer(bs)
-- Per run and layer: the reuse distances in decode steps of its touches at block size
-- `bs` (dsa_reuse_steps), first touches apart.
-- @column run_id             the run
-- @column layer_id           layer
-- @column block_size         the block size asked for
-- @column touches            (request, block, step) selections of the layer
-- @column first_touches      of those, a request's first selection of the block (reuse distance NULL)
-- @column first_touch_share  first_touches / touches
-- @column reuse_steps_mean   mean reuse distance of the other touches, decode steps
-- @column reuse_steps_p50    median reuse distance (linear), decode steps
-- @column reuse_steps_p90    90th percentile reuse distance (linear), decode steps
CREATE MACRO dsa_reuse_steps_by_layer(bs) AS TABLE
SELECT run_id, layer_id, any_value(block_size) AS block_size, count(*) AS touches,
       count(*) FILTER (WHERE reuse_steps IS NULL) AS first_touches,
       count(*) FILTER (WHERE reuse_steps IS NULL) / count(*) AS first_touch_share,
       avg(reuse_steps) AS reuse_steps_mean,
       quantile_cont(reuse_steps, 0.5) AS reuse_steps_p50,
       quantile_cont(reuse_steps, 0.9) AS reuse_steps_p90
FROM dsa_reuse_steps(bs)
GROUP BY run_id, layer_id;

-- @macro dsa_one_shot(bs)
-- Per (request, layer): of the blocks it selects over the request at block size `bs`,
-- how many it selects at one decode step only.
-- @column run_id           the run
-- @column request_id       request
-- @column layer_id         layer
-- @column block_size       the block size asked for
-- @column blocks           distinct blocks the (request, layer) selects over the request
-- @column one_shot_blocks  of those, the blocks selected at exactly one decode step
-- @column one_shot_share   one_shot_blocks / blocks
CREATE MACRO dsa_one_shot(bs) AS TABLE
SELECT run_id, request_id, layer_id, _dsa_checked_block_size(bs) AS block_size,
       count(*) AS blocks, count(*) FILTER (WHERE len(steps) = 1) AS one_shot_blocks,
       count(*) FILTER (WHERE len(steps) = 1) / count(*) AS one_shot_share
FROM _dsa_block_steps(bs)
GROUP BY run_id, request_id, layer_id;

-- @macro _dsa_checked_share(share)
-- The share as a DOUBLE, or an error when it is not in (0, 1].
CREATE MACRO _dsa_checked_share(share) AS
    CASE WHEN share > 0 AND share <= 1 THEN share::DOUBLE
         ELSE error('the knee share must be in (0, 1], got ' || share) END;

-- @macro dsa_lru_knee(bs, share, granularity, scope, sharing)
-- Per run: the knee of the LRU hit curve, the smallest cache that earns `share` (0.9 by
-- default) of the hits an unbounded cache earns.  An LRU cache of C items hits exactly
-- the accesses whose stack distance is below C (dsa_reuse, the same pass as
-- dsa_hit_curve), so hits(C) is known at every integer C and the knee is the smallest C
-- with hits(C) >= share x ceiling_hits, ceiling_hits being every access but the first
-- touches; NULL when no item is accessed twice.  Defaults: granularity 'block', scope
-- 'request', sharing 'private' (see dsa_access).
-- Example: stack distances 0, 0, 1, 3 and 2 first touches (6 accesses): the ceiling is 4
-- hits (rate 0.6667); 90 % of it is 3.6, so C = 4 (hits(3) = 3, hits(4) = 4), rate 0.6667;
-- at share 0.5, C = 1 (the two hits at distance 0), rate 0.3333.
-- @column run_id                the run
-- @column block_size            the block size asked for
-- @column granularity           block or layer_block
-- @column scope                 request (a cache per request) or run (one cache per run)
-- @column sharing               private or content
-- @column knee_share            the share of the ceiling asked for
-- @column accesses              accesses of the run
-- @column ceiling_hits          hits of an unbounded cache: accesses minus first touches
-- @column ceiling_hit_rate      ceiling_hits / accesses
-- @column knee_capacity_blocks  the smallest capacity, in items of the granularity, whose hits reach knee_share x ceiling_hits (NULL without any)
-- @column knee_hit_rate         hit rate at that capacity
CREATE MACRO dsa_lru_knee(bs, share := 0.9, granularity := 'block', scope := 'request',
                          sharing := 'private') AS TABLE
WITH hist AS (
    SELECT * FROM dsa_reuse(bs, granularity, scope, sharing)
), totals AS (
    SELECT run_id, any_value(block_size) AS block_size, any_value(granularity) AS granularity,
           any_value(scope) AS scope, any_value(sharing) AS sharing,
           sum(accesses)::BIGINT AS accesses,
           coalesce(sum(accesses) FILTER (WHERE distance IS NOT NULL), 0)::BIGINT
               AS ceiling_hits
    FROM hist
    GROUP BY run_id
), curve AS (  -- hits(distance + 1): accesses at stack distance <= distance
    SELECT run_id, distance, sum(accesses) OVER (PARTITION BY run_id ORDER BY distance) AS hits
    FROM hist
    WHERE distance IS NOT NULL
)
SELECT t.run_id, t.block_size, t.granularity, t.scope, t.sharing,
       _dsa_checked_share(share) AS knee_share, t.accesses, t.ceiling_hits,
       t.ceiling_hits / t.accesses AS ceiling_hit_rate,
       (k.distance + 1)::BIGINT AS knee_capacity_blocks, k.hits / t.accesses AS knee_hit_rate
FROM totals AS t
LEFT JOIN (
    SELECT c.run_id, min(c.distance) AS distance, min(c.hits) AS hits
    FROM curve AS c JOIN totals AS t USING (run_id)
    WHERE c.hits >= _dsa_checked_share(share) * t.ceiling_hits
    GROUP BY c.run_id
) AS k USING (run_id);
