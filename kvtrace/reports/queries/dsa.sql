-- Queries of the dsa report.  Every query reads only the runs in report_runs, each at
-- report's block size (report_base: run_id, block_size; 64 tokens where the run was
-- traced at 64, else its largest stored size) unless it says otherwise.  Percentiles are linear (quantile_cont).

-- @query summary
-- The statistics of the tracer's summary.json per run, dataset and stored block size:
-- count, min, p50, p95, max and mean of unique blocks per row, touched-block ratio,
-- tokens per touched block, offsets (tokens back from the current one) and the prefix
-- intersection ratio (every row with a prefix region: the cached length on a hit, the
-- request's own key region on a miss).
WITH s AS (SELECT * FROM dsa_summary WHERE run_id IN (SELECT run_id FROM report_runs)),
long AS (
    SELECT run_id, dataset, block_size, 1 AS ord, 'unique_blocks' AS statistic,
           unnest(unique_blocks) FROM s
    UNION ALL SELECT run_id, dataset, block_size, 2, 'touched_block_ratio',
           unnest(touched_block_ratio) FROM s
    UNION ALL SELECT run_id, dataset, block_size, 3, 'tokens_per_touched_block',
           unnest(tokens_per_touched_block) FROM s
    UNION ALL SELECT run_id, dataset, block_size, 4, 'offsets', unnest(offsets) FROM s
    UNION ALL SELECT run_id, dataset, block_size, 5, 'prefix_intersection_ratio',
           unnest(prefix_intersection_ratio) FROM s
)
SELECT run_id, dataset, block_size, statistic, count, min, p50, p95, max, mean
FROM long ORDER BY run_id, dataset, block_size, ord;

-- @query unique_blocks
-- Distribution of unique blocks per (request, step, layer) row: rows per value, per run.
SELECT run_id || ' B=' || block_size AS series, unique_blocks, count(*) AS rows
FROM dsa_steps JOIN report_base USING (run_id, block_size)
GROUP BY ALL ORDER BY ALL;

-- @query offset_cdf
-- Share of selected positions with offset <= x (offset = seq_len - 1 - pos, 0 is the
-- current token), per run, thinned to the last point of each 1/60 of a decade.
SELECT run_id || ' B=' || block_size AS series, max("offset") + 1 AS offset_plus_one,
       max(cdf) AS cdf
FROM dsa_offset_cdf JOIN report_base USING (run_id, block_size)
GROUP BY series, round(log10("offset" + 1) * 60)
ORDER BY series, offset_plus_one;

-- @query recency
-- Recency shares: of all selected positions of a run, the share among the most recent
-- 256, 1024 and 4096 tokens (offset < window), exact from the offset histogram.
SELECT run_id, block_size, sum(n) AS positions,
       sum(n) FILTER (WHERE "offset" < 256) / sum(n) AS within_256,
       sum(n) FILTER (WHERE "offset" < 1024) / sum(n) AS within_1024,
       sum(n) FILTER (WHERE "offset" < 4096) / sum(n) AS within_4096
FROM _dsa_offset_hist_files JOIN report_base USING (run_id, block_size)
GROUP BY ALL ORDER BY ALL;

-- @query touched_ratio
-- Touched-block ratio (unique_blocks / ceil(seq_len / block_size)) against sequence
-- length: mean, p10 and p90 over the rows of each seq_len bin (about 100 bins per run).
WITH r AS (
    SELECT run_id || ' B=' || block_size AS series, seq_len,
           unique_blocks / ceil(seq_len / block_size) AS ratio
    FROM dsa_steps JOIN report_base USING (run_id, block_size)
), bins AS (
    SELECT series, greatest(1, ceil((max(seq_len) - min(seq_len) + 1) / 100))::BIGINT AS width
    FROM r GROUP BY series
)
SELECT series, (seq_len // width) * width AS seq_len_bin, count(*) AS rows,
       avg(ratio) AS ratio_mean, quantile_cont(ratio, 0.1) AS ratio_p10,
       quantile_cont(ratio, 0.9) AS ratio_p90
FROM r JOIN bins USING (series)
GROUP BY ALL ORDER BY ALL;

-- @query layer_step
-- Mean unique blocks per (layer, decode step); the decode step counts from the request's
-- first traced step, in at most 100 bins per run.
WITH r AS (
    SELECT run_id, layer_id, unique_blocks,
           step_idx - min(step_idx) OVER (PARTITION BY run_id, request_id) AS decode_step
    FROM dsa_steps JOIN report_base USING (run_id, block_size)
), bins AS (
    SELECT run_id, greatest(1, ceil((max(decode_step) + 1) / 100))::BIGINT AS width
    FROM r GROUP BY run_id
)
SELECT run_id, layer_id, (decode_step // width) * width AS decode_step,
       avg(unique_blocks) AS unique_blocks_mean, count(*) AS rows
FROM r JOIN bins USING (run_id)
GROUP BY ALL ORDER BY ALL;

-- @query tokens_per_block
-- Selected positions per touched block: touched blocks per count, per run (exact, from
-- the histogram written at ingest or collection).
SELECT run_id || ' B=' || block_size AS series, tokens, sum(n) AS blocks
FROM _dsa_fill_hist_files JOIN report_base USING (run_id, block_size)
GROUP BY ALL ORDER BY ALL;

-- @query prefix_intersection
-- intersection_ratio = |selected blocks inside the prefix region| / |selected blocks|,
-- for every row with a region (hit: the cached length; miss: the request's own key
-- region), ceil(tokens / block size) blocks, hits and misses apart; in about 20 bins
-- fitted to the ratios seen (_bin_width): series, ratio_bin and ratio_bin_end (the bin's
-- edges), rows.
WITH ratios AS (
    SELECT p.run_id || ' B=' || p.block_size
               || CASE WHEN q.prefix_cache_hit THEN ' hit' ELSE ' miss' END AS series,
           p.intersection_ratio AS ratio
    FROM dsa_prefix_rows p JOIN report_base USING (run_id, block_size)
    LEFT JOIN requests q ON q.run_id = p.run_id AND q.request_id = p.request_id
    WHERE p.intersection_ratio IS NOT NULL
), width AS (SELECT _bin_width(min(ratio), max(ratio), 20) AS w FROM ratios)
SELECT series, round(floor(ratio / w) * w, 12) AS ratio_bin,
       round((floor(ratio / w) + 1) * w, 12) AS ratio_bin_end, count(*) AS rows
FROM ratios, width
GROUP BY ALL ORDER BY ALL;

-- @query prefix_hot_blocks
-- The five most touched prefix-region blocks of each request, at the report's block
-- size: how many (step, layer) rows selected each.
SELECT run_id, request_id, hot_rank, block_id, touch_count
FROM dsa_prefix_hot_blocks(getvariable('block_size'))
WHERE (run_id, trace_block_size) IN (SELECT (run_id, block_size) FROM report_base)
  AND hot_rank <= 5
ORDER BY run_id, request_id, hot_rank;

-- @query block_size_sweep
-- The same selections re-binned at 4, 16, 64 and 128 tokens per block: per run, the
-- mean over rows of unique blocks and of tokens per touched block.
WITH binned AS (
    SELECT run_id, block_size, unique_blocks, tokens_per_block_mean
    FROM (FROM dsa_blocks(4) UNION ALL FROM dsa_blocks(16)
          UNION ALL FROM dsa_blocks(64) UNION ALL FROM dsa_blocks(128))
    WHERE (run_id, trace_block_size) IN (SELECT (run_id, block_size) FROM report_base)
)
SELECT run_id, block_size, 'unique blocks per row' AS measure, avg(unique_blocks) AS mean
FROM binned GROUP BY ALL
UNION ALL
SELECT run_id, block_size, 'tokens per touched block', avg(tokens_per_block_mean)
FROM binned GROUP BY ALL
ORDER BY ALL;

-- @query selection_shape
-- Per run and layer at the report's block size (dsa_shape_layers; each run read at the
-- report's block size): means over the layer's rows of the block span (blocks), the
-- density (unique blocks / span), the normalised entropy and the Gini coefficient of the
-- selected tokens over the touched blocks, the shares of touched blocks within the last
-- 4, 16 and 64 blocks of the sequence and the distance from the current block (blocks);
-- the median reuse distance in decode steps (linear), the share of one-shot blocks, and
-- the run's LRU knee (blocks; a cache per request reaching 90 % of its ceiling hits).
SELECT run_id, layer_id, rows, block_span_mean AS span, density_mean AS density,
       entropy_mean AS entropy, gini_mean AS gini, recent_4_mean AS recent_4,
       recent_16_mean AS recent_16, recent_64_mean AS recent_64,
       block_distance_mean AS distance, reuse_steps_p50, one_shot_share,
       lru_knee_blocks
FROM dsa_shape_layers(getvariable('block_size'))
WHERE run_id IN (SELECT run_id FROM report_runs)
ORDER BY run_id, layer_id;

-- @query per_request
-- Per request: prompt and generated tokens, traced rows, mean unique blocks and
-- touched-block ratio, mean median offset, prefix hit and cached tokens, latency.
SELECT s.run_id, s.request_id, any_value(q.prompt_tokens) AS prompt_tokens,
       any_value(q.new_tokens) AS new_tokens, count(*) AS rows,
       avg(s.unique_blocks) AS unique_blocks_mean,
       avg(s.unique_blocks / ceil(s.seq_len / s.block_size)) AS touched_ratio_mean,
       avg(s.offset_p50) AS offset_p50_mean,
       any_value(q.prefix_cache_hit) AS prefix_hit,
       any_value(q.prefix_cached_tokens) AS prefix_cached_tokens,
       any_value(q.prefix_region_tokens) AS prefix_region_tokens,
       any_value(q.latency_ms) AS latency_ms
FROM dsa_steps s JOIN report_base USING (run_id, block_size)
LEFT JOIN requests q ON q.run_id = s.run_id AND q.request_id = s.request_id
GROUP BY s.run_id, s.request_id ORDER BY s.run_id, s.request_id;

-- @query per_dataset
-- Per dataset: runs, requests and rows behind it, and the mean unique blocks,
-- touched-block ratio, tokens per touched block and median offset of its rows.
SELECT dataset, block_size, count(DISTINCT run_id) AS runs,
       count(DISTINCT (run_id, request_id)) AS requests, count(*) AS rows,
       avg(unique_blocks) AS unique_blocks_mean,
       avg(unique_blocks / ceil(seq_len / block_size)) AS touched_ratio_mean,
       avg(tokens_per_block_mean) AS tokens_per_block_mean,
       avg(offset_p50) AS offset_p50_mean
FROM dsa_steps JOIN report_base USING (run_id, block_size)
GROUP BY ALL ORDER BY ALL;

-- @query kv_fetch
-- Where the KV reads were served from, as the tracer's tier model recorded them (HBM
-- only unless a tier model was given): blocks, bytes and read operations per tier, and a
-- note beside the tier where it served blocks without moving bytes (HBM reads them in
-- place), where a reader sees it before the numbers it explains.
SELECT f.run_id, f.block_size, tier,
       CASE WHEN blocks > 0 AND bytes_read = 0
            THEN 'read in place: no bytes move between tiers'
       END AS note,
       rows, blocks, bytes_read, read_ops, block_share, latency_us_mean
FROM dsa_kv_fetch AS f JOIN report_base USING (run_id, block_size)
ORDER BY f.run_id, list_position(['hbm', 'local_pool', 'remote_pool'], tier);
