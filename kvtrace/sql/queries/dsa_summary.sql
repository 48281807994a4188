-- The summary of a DSA run, with the fields of the tracer's summary.json.
--
-- Each statistic is {count, min, p50, p95, max, mean}, percentiles linear-interpolated,
-- at the block size the trace was stored with.  What each one counts over:
--   unique_blocks, touched_block_ratio: one value per (request, step, layer) row;
--   tokens_per_touched_block: one value per touched block of every row;
--   offsets: one value per selected position of every row;
--   prefix_intersection_ratio: one value per row with a prefix region (every row whose
--   request has one: the cached length on a hit, its own key region on a miss).
-- tokens_per_touched_block and offsets come from histograms written at ingest and the
-- prefix intersection from the prefix_blocks column, so the summary is exact without
-- decoding a single position list.
--
-- @requires dsa_steps.sql
-- @requires stats.sql
-- @requires runs.sql

CREATE VIEW _dsa_offset_hist_values AS
SELECT run_id, dataset, block_size, "offset" AS value, n FROM _dsa_offset_hist_files;

CREATE VIEW _dsa_fill_hist_values AS
SELECT run_id, dataset, block_size, tokens AS value, n FROM _dsa_fill_hist_files;

-- @view dsa_prefix_rows
-- Every stored row with a prefix region, intersected with it at the row's own block size,
-- as stored at ingest (see dsa_prefix for the semantics and for other block sizes).
-- @column run_id               the run
-- @column dataset              dataset label
-- @column block_size           block size the row was stored with
-- @column request_id           request
-- @column intersection_blocks  selected block ids inside the prefix region
-- @column intersection_ratio   len(intersection_blocks) / unique_blocks
CREATE VIEW dsa_prefix_rows AS
SELECT
    run_id, dataset, block_size, request_id, prefix_blocks AS intersection_blocks,
    len(prefix_blocks) / nullif(unique_blocks, 0) AS intersection_ratio
FROM dsa_steps
WHERE prefix_blocks IS NOT NULL;

-- @view dsa_summary
-- One row per (run, dataset, stored block size).
-- @column run_id                     the run
-- @column dataset                    dataset label
-- @column block_size                 block size of the stored trace
-- @column rows                       (request, step, layer) rows
-- @column requests                   distinct requests
-- @column unique_blocks              distinct blocks per row
-- @column touched_block_ratio        unique_blocks / ceil(seq_len / block_size) per row
-- @column tokens_per_touched_block   selected positions per touched block, over all touched blocks
-- @column offsets                    offset (seq_len - 1 - pos) of every selected position
-- @column prefix_intersection_ratio  per row with a prefix region (hit or miss); count 0 and NULLs without any
-- @column prefix_hot_blocks          per request with a prefix region, its 20 most touched region blocks
CREATE VIEW dsa_summary AS
WITH per_row AS (
    SELECT
        run_id, dataset, block_size,
        count(*) AS rows,
        count(DISTINCT request_id) AS requests,
        _summary_stats(unique_blocks) AS unique_blocks,
        _summary_stats(unique_blocks / ceil(seq_len / block_size)) AS touched_block_ratio
    FROM dsa_steps
    GROUP BY ALL
), prefix AS (
    SELECT run_id, dataset, block_size,
           _summary_stats(intersection_ratio) AS prefix_intersection_ratio
    FROM dsa_prefix_rows
    GROUP BY ALL
), touches AS (
    SELECT run_id, dataset, block_size, request_id, block_id, count(*) AS touch_count
    FROM (SELECT *, UNNEST(intersection_blocks) AS block_id FROM dsa_prefix_rows)
    GROUP BY ALL
), hot AS (
    SELECT run_id, dataset, block_size, request_id,
           list({'block_id': block_id, 'touch_count': touch_count}
                ORDER BY touch_count DESC, block_id)[1:20] AS blocks
    FROM touches
    GROUP BY ALL
), hot_by_request AS (
    SELECT run_id, dataset, block_size,
           map(list(request_id ORDER BY request_id), list(blocks ORDER BY request_id))
               AS prefix_hot_blocks
    FROM hot
    GROUP BY ALL
)
SELECT
    per_row.run_id, per_row.dataset, per_row.block_size, rows, requests,
    unique_blocks, touched_block_ratio,
    fill.stats AS tokens_per_touched_block,
    offs.stats AS offsets,
    coalesce(
        prefix_intersection_ratio,
        {'count': 0, 'min': NULL, 'p50': NULL, 'p95': NULL, 'max': NULL, 'mean': NULL}
    ) AS prefix_intersection_ratio,
    prefix_hot_blocks
FROM per_row
LEFT JOIN _hist_summary('_dsa_fill_hist_values') AS fill USING (run_id, dataset, block_size)
LEFT JOIN _hist_summary('_dsa_offset_hist_values') AS offs USING (run_id, dataset, block_size)
LEFT JOIN prefix USING (run_id, dataset, block_size)
LEFT JOIN hot_by_request USING (run_id, dataset, block_size);

-- @view dsa_request_latency
-- Per run: end-to-end latency of the requests that recorded one (replayed arrival traces),
-- the serving part of the tracer's summary.json.  Percentiles are linear-interpolated.
-- @column run_id          the run
-- @column requests        requests with a latency
-- @column latency_p50_ms  median latency, milliseconds
-- @column latency_p95_ms  95th percentile latency, milliseconds
-- @column latency_p99_ms  99th percentile latency, milliseconds
-- @column latency_max_ms  largest latency, milliseconds
CREATE VIEW dsa_request_latency AS
SELECT
    run_id,
    count(*) AS requests,
    quantile_cont(latency_ms, 0.5) AS latency_p50_ms,
    quantile_cont(latency_ms, 0.95) AS latency_p95_ms,
    quantile_cont(latency_ms, 0.99) AS latency_p99_ms,
    max(latency_ms) AS latency_max_ms
FROM requests
WHERE latency_ms IS NOT NULL
GROUP BY run_id;
