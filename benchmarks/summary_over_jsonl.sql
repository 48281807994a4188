-- The dsa_summary statistics computed by DuckDB straight over the JSONL (the baseline).
-- $1 is the trace file.  Same definitions as kvtrace's dsa_summary view.
WITH rows AS (
    SELECT
        seq_len_current AS seq_len,
        block_size_tokens AS bs,
        selected_token_pos AS pos,
        prefix.prefix_cached_blocks AS cached_blocks
    FROM read_json($1)
), per_row AS (
    SELECT
        *,
        list_transform(pos, lambda p: p // bs) AS blocks
    FROM rows
), row_stats AS (
    SELECT
        len(list_distinct(blocks)) AS unique_blocks,
        len(list_distinct(blocks)) / ceil(seq_len / bs) AS ratio,
        -- the seed's rule: every row with a prefix region (a miss: its own key region)
        CASE WHEN cached_blocks IS NOT NULL
             THEN len(list_distinct(list_filter(blocks, lambda b: b < cached_blocks)))
                  / len(list_distinct(blocks)) END AS intersection
    FROM per_row
), positions AS (
    SELECT seq_len - 1 - unnest(pos) AS offset_, unnest(blocks) AS block, row_id
    FROM (SELECT *, row_number() OVER () AS row_id FROM per_row)
), fill AS (
    SELECT count(*) AS n FROM positions GROUP BY row_id, block
)
SELECT
    (SELECT _s(unique_blocks) FROM row_stats) AS unique_blocks,
    (SELECT _s(ratio) FROM row_stats) AS touched_block_ratio,
    (SELECT _s(n) FROM fill) AS tokens_per_touched_block,
    (SELECT _s(offset_) FROM positions) AS offsets,
    (SELECT _s(intersection) FROM row_stats) AS prefix_intersection_ratio;
