-- Selection shape of DSA selections at any block size: how spread, how concentrated and
-- how recent each (request, decode step, layer) selection is over the KV blocks it touches.
--
-- At block size B (any B: blocks are re-binned from the stored positions, block_id =
-- pos // B), a row touches the blocks b_1 < ... < b_k, block b_j holding c_j of the row's
-- n selected positions; current_block = (seq_len - 1) // B is the block of the current
-- token.  Per row:
--   block_span           b_k - b_1 + 1
--   density              k / block_span (1: the touched blocks are contiguous)
--   entropy              -sum_j (c_j / n) ln(c_j / n) / ln k, 0 when k = 1 (1: the
--                        selected tokens spread evenly over the touched blocks)
--   gini                 Gini coefficient of c_1 .. c_k: sum_i sum_j |c_i - c_j| / (2 k n),
--                        computed as (2 sum_i i c_(i) - (k + 1) n) / (k n) with the counts
--                        ascending; 0 when they are all equal (so when k = 1)
--   recent_R             share of the touched blocks in the last R blocks of the sequence,
--                        b_j > current_block - R (the current block is one of them)
--   block_distance_mean  mean over the touched blocks of current_block - b_j
-- Every stored row selects at least one position (ingest quarantines empty selections).
-- Each run is read at its smallest stored block size, as dsa_access reads it.
-- Example: selected_pos [1, 2, 3, 17, 18, 60], seq_len 70, B = 16: blocks 0, 1, 3 hold
-- 3, 2 and 1 positions, current block 69 // 16 = 4.  block_span 4, density 3 / 4 = 0.75;
-- entropy -(1/2 ln 1/2 + 1/3 ln 1/3 + 1/6 ln 1/6) / ln 3 = 1.0114 / 1.0986 = 0.9206;
-- gini (2 (1 x 1 + 2 x 2 + 3 x 3) - 4 x 6) / (3 x 6) = 4 / 18 = 0.2222; recent_4: blocks
-- above 4 - 4 = 0, 2 of 3 = 0.6667; recent_16 and recent_64 1; block_distance_mean
-- (4 + 3 + 1) / 3 = 2.6667.
--
-- @requires dsa_access.sql
-- @requires dsa_shape_reuse.sql

-- @macro dsa_shape(bs)
-- The selection shape of every (request, decode step, layer) row at block size `bs`.
-- @column run_id               the run
-- @column request_id           request
-- @column step_idx             decode position
-- @column layer_id             layer
-- @column trace_block_size     block size the row was stored with (the run's smallest)
-- @column block_size           the block size asked for
-- @column seq_len              tokens in the KV cache
-- @column selected             number of selected positions
-- @column current_block        (seq_len - 1) // block_size, the block of the current token
-- @column unique_blocks        distinct blocks touched (k)
-- @column block_span           last - first touched block + 1, in blocks
-- @column density              unique_blocks / block_span
-- @column entropy              entropy of the selected positions over the touched blocks, normalised by ln(unique_blocks), 0 for one block
-- @column gini                 Gini coefficient of the selected positions per touched block
-- @column recent_4             share of touched blocks within the last 4 blocks of the sequence
-- @column recent_16            share of touched blocks within the last 16 blocks
-- @column recent_64            share of touched blocks within the last 64 blocks
-- @column block_distance_mean  mean of current_block - block over the touched blocks, in blocks
CREATE MACRO dsa_shape(bs) AS TABLE
WITH binned AS (  -- the row's blocks and their selected positions (a map block -> count)
    SELECT run_id, request_id, step_idx, layer_id, block_size AS trace_block_size,
           _dsa_checked_block_size(bs) AS block_size, seq_len,
           len(selected_pos) AS selected,
           ((seq_len - 1) // _dsa_checked_block_size(bs))::BIGINT AS current_block,
           list_aggregate(
               list_transform(selected_pos, lambda p: p // _dsa_checked_block_size(bs)),
               'histogram') AS tokens_in
    FROM _dsa_access_rows
), lists AS (
    SELECT * EXCLUDE (tokens_in), map_keys(tokens_in) AS blocks,
           list_sort(map_values(tokens_in)) AS counts
    FROM binned
)
SELECT run_id, request_id, step_idx, layer_id, trace_block_size, block_size, seq_len,
       selected, current_block, len(blocks) AS unique_blocks,
       (list_max(blocks) - list_min(blocks) + 1)::BIGINT AS block_span,
       len(blocks) / (list_max(blocks) - list_min(blocks) + 1) AS density,
       CASE WHEN len(blocks) = 1 THEN 0.0
            ELSE (ln(selected) - list_sum(list_transform(counts, lambda c: c * ln(c))) / selected)
                 / ln(len(blocks))
       END AS entropy,
       (2 * list_sum(list_transform(counts, lambda c, i: i * c)) - (len(blocks) + 1) * selected)
           / (len(blocks) * selected) AS gini,
       len(list_filter(blocks, lambda b: b > current_block - 4)) / len(blocks)
           AS recent_4,
       len(list_filter(blocks, lambda b: b > current_block - 16)) / len(blocks)
           AS recent_16,
       len(list_filter(blocks, lambda b: b > current_block - 64)) / len(blocks)
           AS recent_64,
       current_block - list_avg(blocks) AS block_distance_mean
FROM lists;

-- @macro dsa_shape_layers(bs)
-- Per run and layer at block size `bs`: the means over its rows of dsa_shape's
-- statistics, the median reuse distance in decode steps (dsa_reuse_steps), the share of
-- one-shot blocks over all its requests (one-shot (request, block) pairs / distinct
-- (request, block) pairs, dsa_one_shot pooled), and the run's LRU knee (dsa_lru_knee at
-- its defaults: block granularity, a cache per request, 90 % of the ceiling; the same on
-- every layer of the run).  Ordered by run and layer.
-- @column run_id               the run
-- @column layer_id             layer
-- @column block_size           the block size asked for
-- @column rows                 (request, step) rows of the layer
-- @column block_span_mean      block span, mean over rows, in blocks
-- @column density_mean         density (unique blocks / span), mean over rows
-- @column entropy_mean         normalised entropy, mean over rows
-- @column gini_mean            Gini coefficient, mean over rows
-- @column recent_4_mean        recent_4, mean over rows
-- @column recent_16_mean       recent_16, mean over rows
-- @column recent_64_mean       recent_64, mean over rows
-- @column block_distance_mean  block_distance_mean, mean over rows, in blocks
-- @column reuse_steps_p50      median reuse distance of the layer's touches, first touches left out (linear), decode steps
-- @column one_shot_share       blocks selected at one decode step of their request / blocks selected, over the layer's requests
-- @column lru_knee_blocks      the run's LRU knee (dsa_lru_knee's knee_capacity_blocks), in blocks
CREATE MACRO dsa_shape_layers(bs) AS TABLE
WITH shape AS (
    SELECT run_id, layer_id, any_value(block_size) AS block_size, count(*) AS rows,
           avg(block_span) AS block_span_mean, avg(density) AS density_mean,
           avg(entropy) AS entropy_mean, avg(gini) AS gini_mean,
           avg(recent_4) AS recent_4_mean, avg(recent_16) AS recent_16_mean,
           avg(recent_64) AS recent_64_mean, avg(block_distance_mean) AS block_distance_mean
    FROM dsa_shape(bs)
    GROUP BY run_id, layer_id
), reuse AS (
    SELECT run_id, layer_id, quantile_cont(reuse_steps, 0.5) AS reuse_steps_p50,
           count(*) FILTER (WHERE touches = 1)
               / count(*) FILTER (WHERE reuse_steps IS NULL) AS one_shot_share
    FROM dsa_reuse_steps(bs)
    GROUP BY run_id, layer_id
)
SELECT s.*, r.reuse_steps_p50, r.one_shot_share, k.knee_capacity_blocks AS lru_knee_blocks
FROM shape AS s
LEFT JOIN reuse AS r USING (run_id, layer_id)
LEFT JOIN (SELECT run_id, knee_capacity_blocks FROM dsa_lru_knee(bs)) AS k USING (run_id)
ORDER BY s.run_id, s.layer_id;
