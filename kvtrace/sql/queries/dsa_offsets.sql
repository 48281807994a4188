-- How far back DSA reaches: offsets of the selected positions.
--
-- offset = (seq_len - 1) - pos; 0 is the token being decoded.  within_W is the share of a
-- selection whose offset is below W tokens (recency).  Percentiles are linear-interpolated.
--
-- @requires dsa_steps.sql

-- @view dsa_offsets
-- Offset statistics of every stored row.
-- @column run_id       the run
-- @column dataset      dataset label
-- @column block_size   block size the row was stored with
-- @column request_id   request
-- @column step_idx     decode position
-- @column layer_id     layer
-- @column seq_len      tokens in the KV cache
-- @column offset_min   smallest offset
-- @column offset_p50   median offset
-- @column offset_p95   95th percentile offset
-- @column offset_max   largest offset
-- @column offset_mean  mean offset
-- @column within_256   share of selected positions with offset < 256
-- @column within_1024  share of selected positions with offset < 1024
-- @column within_4096  share of selected positions with offset < 4096
CREATE VIEW dsa_offsets AS
SELECT * EXCLUDE (stats), UNNEST(stats)
FROM (
    SELECT
        run_id, dataset, block_size, request_id, step_idx, layer_id, seq_len,
        kvtrace_offset_stats(selected_pos, seq_len) AS stats
    FROM dsa_steps
);

-- @view dsa_offset_cdf
-- The distribution of offsets over all selected positions of a run, from the histogram
-- stored at ingest: one row per distinct offset.
-- @column run_id      the run
-- @column dataset     dataset label
-- @column block_size  block size of the stored trace
-- @column offset      offset in tokens
-- @column n           selected positions at this offset
-- @column cdf         share of selected positions with offset <= this one
CREATE VIEW dsa_offset_cdf AS
WITH h AS (
    SELECT run_id, dataset, block_size, "offset", sum(n) AS n
    FROM _dsa_offset_hist_files
    GROUP BY ALL
)
SELECT
    *,
    sum(n) OVER (PARTITION BY run_id, dataset, block_size ORDER BY "offset")
        / sum(n) OVER (PARTITION BY run_id, dataset, block_size) AS cdf
FROM h;
