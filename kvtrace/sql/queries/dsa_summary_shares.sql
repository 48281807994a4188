-- The per-row parts of a DSA run's summary, as exact counts over one share of its requests.
--
-- `kvtrace summary` computes a run's row statistics from these counts rather than from
-- the rows, so that shares of a run read on different machines (`--engine ray`) merge
-- into exactly the numbers one machine gives: counts add, and the statistics are worked
-- out from the merged counts.  A share is the run's requests with ids from first_request
-- to last_request; every macro takes the same five arguments.
--   share_run, share_dataset, share_block_size   which stored trace
--   first_request, last_request                   which requests (inclusive)
--
-- @requires dsa_steps.sql

-- @macro _dsa_share_rows(share_run, share_dataset, share_block_size, first_request, last_request)
-- The dsa_steps rows of one share.
CREATE MACRO _dsa_share_rows(share_run, share_dataset, share_block_size, first_request,
                             last_request) AS TABLE
SELECT *
FROM dsa_steps
WHERE run_id = share_run AND dataset = share_dataset AND block_size = share_block_size
  AND request_id BETWEEN first_request AND last_request;

-- @macro _dsa_share_requests(share_run, share_dataset, share_block_size, first_request, last_request)
-- The share's requests and their row counts.
-- @column request_id  request
-- @column n           rows of the request
CREATE MACRO _dsa_share_requests(share_run, share_dataset, share_block_size, first_request,
                                 last_request) AS TABLE
SELECT request_id, count(*) AS n
FROM _dsa_share_rows(share_run, share_dataset, share_block_size, first_request,
                     last_request)
GROUP BY request_id;

-- @macro _dsa_share_blocks(share_run, share_dataset, share_block_size, first_request, last_request)
-- Rows counted by (unique_blocks, blocks of the context, selected positions): the counts
-- behind unique_blocks, touched_block_ratio (unique_blocks / context_blocks) and the
-- per-row mean of tokens per touched block (selected / unique_blocks).
-- @column unique_blocks   distinct blocks of a row
-- @column context_blocks  ceil(seq_len / block_size) of the row
-- @column selected        positions the row selected
-- @column n               rows
CREATE MACRO _dsa_share_blocks(share_run, share_dataset, share_block_size, first_request,
                               last_request) AS TABLE
SELECT unique_blocks, ceil(seq_len / block_size)::BIGINT AS context_blocks,
       len(selected_pos) AS selected, count(*) AS n
FROM _dsa_share_rows(share_run, share_dataset, share_block_size, first_request,
                     last_request)
GROUP BY ALL;

-- @macro _dsa_share_prefix(share_run, share_dataset, share_block_size, first_request, last_request)
-- Rows with a prefix region counted by (blocks inside it, unique_blocks): the counts
-- behind prefix_intersection_ratio (inside_blocks / unique_blocks).
-- @column inside_blocks  selected blocks inside the prefix region
-- @column unique_blocks  distinct blocks of the row
-- @column n              rows
CREATE MACRO _dsa_share_prefix(share_run, share_dataset, share_block_size, first_request,
                               last_request) AS TABLE
SELECT len(prefix_blocks) AS inside_blocks, unique_blocks, count(*) AS n
FROM _dsa_share_rows(share_run, share_dataset, share_block_size, first_request,
                     last_request)
WHERE prefix_blocks IS NOT NULL
GROUP BY ALL;

-- @macro _dsa_share_touches(share_run, share_dataset, share_block_size, first_request, last_request)
-- How many rows of each request selected each block of its prefix region: the counts
-- behind prefix_hot_blocks.
-- @column request_id  request
-- @column block_id    block inside the request's prefix region
-- @column n           rows that selected it
CREATE MACRO _dsa_share_touches(share_run, share_dataset, share_block_size, first_request,
                                last_request) AS TABLE
SELECT request_id, block_id, count(*) AS n
FROM (
    SELECT request_id, UNNEST(prefix_blocks) AS block_id
    FROM _dsa_share_rows(share_run, share_dataset, share_block_size, first_request,
                         last_request)
    WHERE prefix_blocks IS NOT NULL
)
GROUP BY ALL;

-- @macro _dsa_trace_histogram(histogram, share_run, share_dataset, share_block_size)
-- The histogram table named `histogram` (_dsa_fill_hist_values or _dsa_offset_hist_values)
-- of one stored trace, its files' counts added: the counts behind tokens_per_touched_block
-- and offsets, which ingest wrote.
-- @column value  tokens in a touched block, or offset of a selected position
-- @column n      observations
CREATE MACRO _dsa_trace_histogram(histogram, share_run, share_dataset, share_block_size)
AS TABLE
SELECT value, sum(n) AS n
FROM query_table(histogram)
WHERE run_id = share_run AND dataset = share_dataset AND block_size = share_block_size
GROUP BY value;
