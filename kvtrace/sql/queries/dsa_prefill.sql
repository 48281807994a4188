-- DSA top-k selections of prefill, kept apart from decode (`dsa_steps` stays decode only).
--
-- A collector that traces prefill (`kvtrace.trace(..., prefill=True)`) writes one row per
-- (request, query chunk, layer): the chunk's query tokens are the positions query_start
-- .. query_end - 1, each selected up to k earlier-or-equal positions, and the row holds
-- the union of their selections (selected_pos, ascending, distinct) with how many of
-- the chunk's queries selected each position (select_count).  Padding (-1) and a masked
-- top-k's picks after a query's own position are not selections.
-- `dsa_prefill_blocks(B)` bins a row's union at block size B (block_id = pos // B), as
-- `dsa_blocks` does for decode: total_blocks_in_use = ceil(query_end / B) (the KV the
-- chunk's last query sees).  No percentiles.
-- Example (B = 4): a chunk of queries 8 .. 11 (query_start 8, query_end 12) where query 8
-- selects {0, 8}, 9 selects {0, 1, 9}, 10 selects {0, 10} and 11 selects {1, 11}:
-- selected_pos [0, 1, 8, 9, 10, 11], select_count [3, 2, 1, 1, 1, 1]; queries 4,
-- selected 6, selections 9 (2.25 per query); blocks 0 and 2 are touched, unique_blocks 2
-- of total_blocks_in_use 3, touched_block_ratio 0.667, 4.5 selections per touched block.

-- @view dsa_prefill
-- The stored prefill selections: one row per (request, query chunk, layer).
-- @column run_id           the run
-- @column dataset          dataset label
-- @column request_id       request within the run
-- @column layer_id         layer
-- @column query_start      position of the chunk's first query token
-- @column query_end        one past the chunk's last query position (its KV length)
-- @column batch_step       the collector's step counter within the run (shared with dsa_steps)
-- @column ts_us            when the step ran, microseconds since the epoch
-- @column topk             the k that was asked for, when known
-- @column selected_pos     positions selected by any of the chunk's queries, ascending and distinct
-- @column select_count     how many of the chunk's queries selected each position (aligned with selected_pos)
-- @column step_latency_us  wall time of the whole step (all layers), microseconds
CREATE VIEW dsa_prefill AS SELECT * FROM _dsa_prefill_files;

-- @macro dsa_prefill_blocks(bs := 64)
-- Every prefill row's union binned at block size `bs` (tokens; 64 by default, the seed's).
-- @column run_id                     the run
-- @column dataset                    dataset label
-- @column request_id                 request
-- @column layer_id                   layer
-- @column query_start                position of the chunk's first query token
-- @column query_end                  one past the chunk's last query position
-- @column block_size                 the block size asked for
-- @column queries                    query tokens in the chunk (query_end - query_start)
-- @column selected                   distinct positions selected by the chunk
-- @column selections                 (query, position) selections, the sum of select_count
-- @column selections_per_query       selections / queries
-- @column unique_blocks              distinct blocks touched by the chunk's union
-- @column total_blocks_in_use        ceil(query_end / block_size)
-- @column touched_block_ratio        unique_blocks / total_blocks_in_use
-- @column selections_per_block_mean  selections / unique_blocks (NULL when nothing was selected)
CREATE MACRO dsa_prefill_blocks(bs := 64) AS TABLE
WITH binned AS (
    SELECT
        run_id,
        dataset,
        request_id,
        layer_id,
        query_start,
        query_end,
        CASE WHEN bs::INTEGER > 0 THEN bs::INTEGER
             ELSE error('the block size must be a positive number of tokens, got ' || bs)
        END AS block_size,
        query_end - query_start AS queries,
        len(selected_pos) AS selected,
        coalesce(list_sum(select_count), 0)::BIGINT AS selections,
        selected_pos
    FROM dsa_prefill
)
SELECT
    run_id, dataset, request_id, layer_id, query_start, query_end, block_size, queries,
    selected, selections,
    selections / queries AS selections_per_query,
    len(list_distinct(list_transform(selected_pos, lambda p: p // block_size))) AS unique_blocks,
    (query_end + block_size - 1) // block_size AS total_blocks_in_use,
    unique_blocks / total_blocks_in_use AS touched_block_ratio,
    CASE WHEN unique_blocks > 0 THEN selections / unique_blocks END AS selections_per_block_mean
FROM binned;
