-- Per-KV-group selections (GQA): how dense each group's selection is in blocks of B
-- tokens, how much of the cache the groups touch together, and what a block-sparse fetch
-- saves against what the top-k saves in compute.
--
-- A collection with `--selection per-group` stores, beside each layer's all-heads row,
-- one row per KV group (dsa_steps' kv_group): the top-k of the attention of the group's
-- query heads summed.  At query-time block size B: blocks_in_use = ceil(seq_len / B); a
-- group's blocks are its distinct pos // B and its density is blocks / blocks_in_use;
-- the union is the distinct blocks of all groups of one (run, request, step, layer),
-- what a fetch of whole blocks must read for that layer, since the groups share
-- nothing but the KV cache.  io_saved = 1 - union_blocks / blocks_in_use is the KV read
-- a block-sparse fetch saves against reading every block; compute_saved = 1 - selected /
-- seq_len is the attention compute each group's top-k saves against attending to every
-- token.  Means are plain means over rows (no percentiles).  A run stored at several
-- block sizes is read once, at its smallest.
--
-- Worked example at B = 4: seq_len 16 (4 blocks in use), top-k 3.  Group 0 selects
-- {0, 1, 9}: blocks {0, 2}, density 0.5; group 1 selects {5, 13, 14}: blocks {1, 3},
-- density 0.5.  Union {0, 1, 2, 3}: 4 blocks, union density 1, io_saved 0, while
-- compute_saved is 1 - 3/16 = 0.8125: the top-k skips 81 % of the attention but a
-- block-sparse fetch reads the whole cache.
--
-- @requires dsa_access.sql

-- @view dsa_group_steps
-- The stored per-KV-group selections: one row per (run, request, step, layer, KV group),
-- each run at its smallest stored block size.
-- @column run_id        the run
-- @column dataset       dataset label
-- @column request_id    request within the run
-- @column step_idx      decode position
-- @column layer_id      layer
-- @column kv_group      the KV group whose query heads' attention was summed (0-based)
-- @column seq_len       tokens in the KV cache at this step
-- @column topk          the k that was asked for
-- @column selected_pos  selected positions, ascending and distinct
-- @column scores        the group's summed attention probabilities, aligned with selected_pos, when stored
CREATE VIEW dsa_group_steps AS
WITH grouped AS (
    SELECT * FROM _dsa_steps_files WHERE kv_group IS NOT NULL
)
SELECT g.run_id, g.dataset, g.request_id, g.step_idx, g.layer_id, g.kv_group, g.seq_len,
       g.topk, g.selected_pos, g.scores
FROM grouped AS g
JOIN (SELECT run_id, min(block_size) AS block_size FROM grouped GROUP BY run_id) AS smallest
    USING (run_id, block_size);

-- @macro dsa_group_density(bs)
-- Each KV group's selection in blocks of bs tokens.
-- @column run_id          the run
-- @column request_id      request
-- @column step_idx        decode position
-- @column layer_id        layer
-- @column kv_group        the KV group
-- @column seq_len         tokens in the KV cache
-- @column selected        positions the group selected
-- @column blocks_in_use   ceil(seq_len / bs)
-- @column group_blocks    distinct blocks (pos // bs) the group touched
-- @column group_density   group_blocks / blocks_in_use
CREATE MACRO dsa_group_density(bs) AS TABLE
SELECT *, group_blocks / blocks_in_use AS group_density
FROM (
    SELECT run_id, request_id, step_idx, layer_id, kv_group, seq_len,
           len(selected_pos) AS selected,
           (seq_len + _dsa_checked_block_size(bs) - 1) // _dsa_checked_block_size(bs)
               AS blocks_in_use,
           len(list_distinct(list_transform(selected_pos, lambda p: p // bs)))
               AS group_blocks
    FROM dsa_group_steps
)
ORDER BY run_id, request_id, step_idx, layer_id, kv_group;

-- @macro dsa_group_union(bs)
-- Per (run, request, step, layer): the groups' selections together, in blocks of bs
-- tokens, and what a block-sparse fetch saves against what the top-k saves.
-- @column run_id                the run
-- @column request_id            request
-- @column step_idx              decode position
-- @column layer_id              layer
-- @column groups                KV groups with a selection
-- @column seq_len               tokens in the KV cache
-- @column selected              positions each group selected, mean over groups
-- @column blocks_in_use         ceil(seq_len / bs)
-- @column group_density         mean over groups of group_blocks / blocks_in_use
-- @column union_blocks          distinct blocks touched by any group
-- @column union_density         union_blocks / blocks_in_use
-- @column union_tokens          distinct positions selected by any group
-- @column io_saved              1 - union_blocks / blocks_in_use: KV blocks a block-sparse fetch need not read
-- @column compute_saved         1 - selected / seq_len: attention each group's top-k skips
CREATE MACRO dsa_group_union(bs) AS TABLE
SELECT run_id, request_id, step_idx, layer_id,
       count(*) AS groups,
       any_value(seq_len) AS seq_len,
       avg(len(selected_pos)) AS selected,
       any_value(blocks_in_use) AS blocks_in_use,
       avg(len(blocks) / blocks_in_use) AS group_density,
       len(list_distinct(flatten(list(blocks)))) AS union_blocks,
       union_blocks / any_value(blocks_in_use) AS union_density,
       len(list_distinct(flatten(list(selected_pos)))) AS union_tokens,
       1 - union_density AS io_saved,
       1 - avg(len(selected_pos)) / any_value(seq_len) AS compute_saved
FROM (
    SELECT run_id, request_id, step_idx, layer_id, seq_len, selected_pos,
           (seq_len + _dsa_checked_block_size(bs) - 1) // _dsa_checked_block_size(bs)
               AS blocks_in_use,
           list_distinct(list_transform(selected_pos, lambda p: p // bs)) AS blocks
    FROM dsa_group_steps
)
GROUP BY run_id, request_id, step_idx, layer_id
ORDER BY run_id, request_id, step_idx, layer_id;

-- @macro dsa_group_savings(bs)
-- Per run and layer: does sparse attention save KV reads, or only compute?  Means over
-- the (request, step) rows of dsa_group_union(bs).
-- @column run_id             the run
-- @column layer_id           layer
-- @column steps              (request, step) rows behind the row
-- @column groups             KV groups per row, at most
-- @column group_density      mean per-group selection density
-- @column union_density      mean density of the groups' union
-- @column full_union_share   share of rows whose union touches every block in use
-- @column io_saved           mean 1 - union_blocks / blocks_in_use
-- @column compute_saved      mean 1 - selected / seq_len
CREATE MACRO dsa_group_savings(bs) AS TABLE
SELECT run_id, layer_id,
       count(*) AS steps,
       max(groups) AS groups,
       avg(group_density) AS group_density,
       avg(union_density) AS union_density,
       avg((union_blocks = blocks_in_use)::INTEGER) AS full_union_share,
       avg(io_saved) AS io_saved,
       avg(compute_saved) AS compute_saved
FROM dsa_group_union(bs)
GROUP BY run_id, layer_id
ORDER BY run_id, layer_id;
