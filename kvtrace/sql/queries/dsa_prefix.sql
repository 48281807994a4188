-- Does DSA reach into the shared prefix?  Intersection of selections with the prefix region.
--
-- The seed's definition (000_* sections 3.4, 9.4), for every row: a request's prefix
-- region is its cached length on a prefix-cache hit, and its own key region of
-- min(prompt_len, N) tokens (N = 256 by default) on a miss; it covers
-- ceil(region_tokens / block_size) blocks (a partly covered block counts).
-- intersection_ratio = |selected blocks in the region| / |selected blocks|;
-- prefix_cache_hit says whether the region was shared.  The variant restricted to what a
-- prefix cache could reuse, the full blocks of a real hit, is cached_prefix_ratio (NULL
-- without a hit).
-- Example: a hit with 100 cached tokens, block size 64 -> region blocks 0 and 1 (ceil),
-- one reusable full block (block 0); a selection touching blocks {0, 1, 7, 9} has
-- intersection_blocks [0, 1], ratio 0.5, and cached_prefix_ratio 0.25.
--
-- @requires dsa_steps.sql
-- @requires runs.sql

-- @macro dsa_prefix(bs)
-- Every stored row, with its intersection with the request's prefix region at block size `bs`.
-- @column run_id                 the run
-- @column dataset                dataset label
-- @column trace_block_size       block size the row was stored with
-- @column block_size             the block size asked for
-- @column request_id             request
-- @column step_idx               decode position
-- @column layer_id               layer
-- @column prefix_cache_hit       whether the request's prefix was seen before (the region is shared)
-- @column prefix_region_tokens   tokens of the prefix region: the cached length on a hit, min(prompt_len, N) on a miss
-- @column prefix_blocks          blocks of the region, ceil(prefix_region_tokens / block_size)
-- @column intersection_blocks    selected block ids inside the region, ascending (NULL when the region is unknown)
-- @column intersection_count     how many
-- @column unique_blocks          distinct blocks touched by the selection
-- @column intersection_ratio     intersection_count / unique_blocks, for every row with a region
-- @column cached_prefix_blocks   full blocks of a hit's cached length, floor(prefix_cached_tokens / block_size) (NULL on a miss)
-- @column cached_prefix_ratio    selected blocks among those full cached blocks / unique_blocks (NULL on a miss)
CREATE MACRO dsa_prefix(bs) AS TABLE
WITH rows AS (
    SELECT
        s.run_id, s.dataset, s.block_size AS trace_block_size, bs::INTEGER AS block_size,
        s.request_id, s.step_idx, s.layer_id, r.prefix_cache_hit, r.prefix_region_tokens,
        ceil(r.prefix_region_tokens / bs)::BIGINT AS prefix_blocks,
        kvtrace_prefix_blocks(s.selected_pos, ceil(r.prefix_region_tokens / bs)::BIGINT,
                              bs::INTEGER) AS intersection_blocks,
        CASE WHEN r.prefix_cache_hit THEN r.prefix_cached_tokens // bs END
            AS cached_prefix_blocks,
        (kvtrace_block_stats(s.selected_pos, s.seq_len, bs::INTEGER)).unique_blocks
            AS unique_blocks
    FROM dsa_steps AS s
    LEFT JOIN requests AS r USING (run_id, request_id)
)
SELECT
    * EXCLUDE (unique_blocks, intersection_blocks, cached_prefix_blocks),
    CASE WHEN prefix_region_tokens IS NOT NULL THEN intersection_blocks END
        AS intersection_blocks,
    CASE WHEN prefix_region_tokens IS NOT NULL THEN len(intersection_blocks) END
        AS intersection_count,
    unique_blocks,
    CASE WHEN prefix_region_tokens IS NOT NULL
         THEN len(intersection_blocks) / nullif(unique_blocks, 0) END AS intersection_ratio,
    cached_prefix_blocks,
    CASE WHEN cached_prefix_blocks IS NOT NULL
         THEN len(list_filter(intersection_blocks, lambda b: b < cached_prefix_blocks))
              / nullif(unique_blocks, 0) END AS cached_prefix_ratio
FROM rows;

-- @macro dsa_prefix_hot_blocks(bs)
-- Per request with a prefix region (hit or miss): how often each block of the region was
-- selected (over all steps and layers), hottest first.
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
