-- Per-layer profile of DSA selections, at the stored block size.
--
-- @requires dsa_steps.sql

-- @view dsa_layer_profile
-- One row per (run, dataset, stored block size, layer): averages over that layer's rows.
-- Means are arithmetic over rows; medians are linear-interpolated over rows.
-- @column run_id                      the run
-- @column dataset                     dataset label
-- @column block_size                  block size the rows were stored with
-- @column layer_id                    layer
-- @column rows                        (request, step) rows of this layer
-- @column selected_mean               selected positions per row, mean
-- @column unique_blocks_mean          distinct blocks per row, mean
-- @column unique_blocks_p50           distinct blocks per row, median
-- @column touched_block_ratio_mean    unique_blocks / ceil(seq_len / block_size), mean
-- @column tokens_per_block_mean       per-row mean selected positions per touched block, mean
-- @column offset_p50_mean             per-row median offset, mean
-- @column offset_max_mean             per-row largest offset, mean
CREATE VIEW dsa_layer_profile AS
SELECT
    run_id, dataset, block_size, layer_id,
    count(*) AS rows,
    avg(len(selected_pos)) AS selected_mean,
    avg(unique_blocks) AS unique_blocks_mean,
    quantile_cont(unique_blocks, 0.5) AS unique_blocks_p50,
    avg(unique_blocks / ceil(seq_len / block_size)) AS touched_block_ratio_mean,
    avg(tokens_per_block_mean) AS tokens_per_block_mean,
    avg(offset_p50) AS offset_p50_mean,
    avg(offset_max) AS offset_max_mean
FROM dsa_steps
GROUP BY ALL
ORDER BY ALL;
