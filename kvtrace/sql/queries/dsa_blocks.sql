-- Block statistics of DSA selections at any block size.
--
-- block_id = pos // block_size; total_blocks_in_use = ceil(seq_len / block_size);
-- touched_block_ratio = unique_blocks / total_blocks_in_use; tokens per block counts the
-- selected positions in each touched block.  Percentiles are linear-interpolated.
-- Example: selected_pos [1, 2, 3, 17, 18, 40], seq_len 50, block size 16: blocks 0, 1, 2
-- hold 3, 2 and 1 positions; unique_blocks 3, total_blocks_in_use 4, ratio 0.75,
-- tokens per block mean 2, p50 2, p95 2.9.
--
-- @requires dsa_steps.sql

-- @macro dsa_blocks(bs)
-- Every stored row re-binned at block size `bs` (tokens).  A run stored at several block
-- sizes appears once per stored size: filter on trace_block_size to pick one.
-- @column run_id                 the run
-- @column dataset                dataset label
-- @column trace_block_size       block size the row was stored with
-- @column block_size             the block size asked for
-- @column request_id             request
-- @column step_idx               decode position
-- @column layer_id               layer
-- @column seq_len                tokens in the KV cache
-- @column selected               number of selected positions
-- @column unique_blocks          distinct blocks touched
-- @column total_blocks_in_use    ceil(seq_len / block_size)
-- @column touched_block_ratio    unique_blocks / total_blocks_in_use
-- @column tokens_per_block_mean  selected positions per touched block, mean
-- @column tokens_per_block_p50   selected positions per touched block, median (linear)
-- @column tokens_per_block_p95   selected positions per touched block, 95th percentile (linear)
CREATE MACRO dsa_blocks(bs) AS TABLE
SELECT * EXCLUDE (stats), UNNEST(stats)
FROM (
    SELECT
        run_id,
        dataset,
        block_size AS trace_block_size,
        bs::INTEGER AS block_size,
        request_id,
        step_idx,
        layer_id,
        seq_len,
        len(selected_pos) AS selected,
        kvtrace_block_stats(selected_pos, seq_len, bs::INTEGER) AS stats
    FROM dsa_steps
);
