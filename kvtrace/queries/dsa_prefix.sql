-- Does DSA reach into the shared prefix?  Intersection of selections with the cached prefix.
--
-- The prefix region is the blocks with id < prefix_cached_tokens // block_size (a partial
-- last block is not cached).  intersection_ratio = |selected blocks in the prefix region|
-- / |selected blocks|; it is NULL, not 0, for requests without a recorded prefix hit.
-- Example: prefix_cached_tokens 256, block size 64 -> blocks 0..3 are the prefix; a
-- selection touching blocks {0, 2, 7, 9} has intersection_blocks [0, 2], ratio 0.5.

-- @macro dsa_prefix(bs)
-- Every stored row, with its intersection with the request's cached prefix at block size `bs`.
-- @column run_id                 the run
-- @column dataset                dataset label
-- @column trace_block_size       block size the row was stored with
-- @column block_size             the block size asked for
-- @column request_id             request
-- @column step_idx               decode position
-- @column layer_id               layer
-- @column prefix_cache_hit       whether the request's prefix was seen before
-- @column prefix_cached_tokens   tokens of the shared prefix
-- @column prefix_blocks          blocks of the prefix region (prefix_cached_tokens // block_size)
-- @column intersection_blocks    selected block ids inside the prefix region, ascending (NULL without a hit)
-- @column intersection_count     how many (NULL without a hit)
-- @column unique_blocks          distinct blocks touched by the selection
-- @column intersection_ratio     intersection_count / unique_blocks (NULL without a hit)
CREATE MACRO dsa_prefix(bs) AS TABLE
WITH rows AS (
    SELECT
        s.run_id, s.dataset, s.block_size AS trace_block_size, bs::INTEGER AS block_size,
        s.request_id, s.step_idx, s.layer_id, r.prefix_cache_hit, r.prefix_cached_tokens,
        r.prefix_cached_tokens // bs AS prefix_blocks,
        CASE WHEN r.prefix_cache_hit AND r.prefix_cached_tokens > 0
             THEN kvtrace_prefix_blocks(s.selected_pos, r.prefix_cached_tokens, bs::INTEGER)
        END AS intersection_blocks,
        (kvtrace_block_stats(s.selected_pos, s.seq_len, bs::INTEGER)).unique_blocks
            AS unique_blocks
    FROM dsa_steps AS s
    LEFT JOIN requests AS r USING (run_id, request_id)
)
SELECT
    * EXCLUDE (unique_blocks, intersection_blocks),
    intersection_blocks,
    len(intersection_blocks) AS intersection_count,
    unique_blocks,
    len(intersection_blocks) / nullif(unique_blocks, 0) AS intersection_ratio
FROM rows;

-- @macro dsa_prefix_hot_blocks(bs)
-- Per request with a prefix hit: how often each prefix block was selected (over all
-- steps and layers), hottest first.
-- @column run_id            the run
-- @column dataset           dataset label
-- @column trace_block_size  block size the rows were stored with
-- @column request_id        request
-- @column block_id          block id inside the prefix region
-- @column touch_count       (step, layer) rows whose selection touched the block
-- @column hot_rank          1 for the most touched block of the request (ties by block id)
CREATE MACRO dsa_prefix_hot_blocks(bs) AS TABLE
WITH touches AS (
    SELECT run_id, dataset, trace_block_size, request_id, block_id, count(*) AS touch_count
    FROM (
        SELECT run_id, dataset, trace_block_size, request_id,
               UNNEST(intersection_blocks) AS block_id
        FROM dsa_prefix(bs)
        WHERE intersection_blocks IS NOT NULL
    )
    GROUP BY ALL
)
SELECT
    *,
    row_number() OVER (
        PARTITION BY run_id, dataset, trace_block_size, request_id
        ORDER BY touch_count DESC, block_id
    ) AS hot_rank
FROM touches;
