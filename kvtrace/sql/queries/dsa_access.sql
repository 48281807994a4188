-- KV access analytics: the access stream of a DSA run, and what caches would serve of it.
--
-- The access stream at block size B (any B: blocks are re-binned from the stored
-- positions, block_id = pos // B) and a granularity:
--   block        an item is (request, block); a step accesses the union of the blocks its
--                layers selected, each once (paged engines move all layers of a block);
--   layer_block  an item is (request, layer, block), each once per (step, layer)
--                (layer-wise offload).
-- Order: a request's decode steps ascending, then layers ascending, then block ids
-- ascending.  Scope `request` gives each request its own cache; scope `run` shares one
-- cache between the requests of a run, in the batched step order (`batch_step`) where
-- the trace has it (then by request id), else requests one after another.
-- A run stored at several block sizes is read once, at its smallest stored size.
-- Capacities count items of the chosen granularity; a first touch is always a miss.
-- Example (block granularity, B = 16): step 100 selects positions {3, 20} on layer 0 and
-- {21, 40} on layer 1 -> blocks [0, 1, 2]; step 101 selects {5} and {41} -> blocks [0, 2].
-- LRU stack distances: 0, 1, 2 are first touches; block 0 at step 101 has distance 2
-- (blocks 1 and 2 were touched since), block 2 then has distance 1 (block 0 since).
-- An LRU cache of 2 blocks hits 1 of the 5 accesses, one of 3 blocks hits 2.
--
-- @requires dsa_steps.sql
-- @requires tables.sql

-- @view _dsa_access_rows
-- The DSA rows the access stream reads: each run at its smallest stored block size.
CREATE VIEW _dsa_access_rows AS
SELECT s.run_id, s.request_id, s.step_idx, s.layer_id, s.seq_len, s.batch_step, s.selected_pos
FROM dsa_steps AS s
JOIN (SELECT run_id, min(block_size) AS block_size FROM dsa_steps GROUP BY run_id) AS smallest
    USING (run_id, block_size);

-- @macro _dsa_checked_granularity(granularity)
-- The granularity, or an error naming the allowed ones.
CREATE MACRO _dsa_checked_granularity(granularity) AS
    CASE WHEN granularity IN ('block', 'layer_block') THEN granularity
         ELSE error('unknown granularity ''' || granularity || '''; expected block or layer_block')
    END;

-- @macro _dsa_checked_block_size(bs)
-- The block size as an INTEGER, or an error when it is not positive.
CREATE MACRO _dsa_checked_block_size(bs) AS
    CASE WHEN bs >= 1 THEN bs::INTEGER
         ELSE error('the block size must be a positive number of tokens, got ' || bs) END;

-- @macro _dsa_checked_window(steps)
-- The window as a BIGINT, or an error when it is below one step.
CREATE MACRO _dsa_checked_window(steps) AS
    CASE WHEN steps >= 1 THEN steps::BIGINT
         ELSE error('the window must be at least 1 step, got ' || steps) END;

-- @macro _dsa_access_prefix(bs)
-- Per request of the access stream: blocks of its cached prefix region at block size bs,
-- ceil(prefix_cached_tokens / bs) for a prefix-cache hit, else 0 (pin_prefix pins them).
CREATE MACRO _dsa_access_prefix(bs) AS TABLE
SELECT a.run_id, a.request_id,
       CASE WHEN r.prefix_cache_hit THEN ceil(coalesce(r.prefix_cached_tokens, 0) / bs)::BIGINT
            ELSE 0 END AS prefix_blocks
FROM (SELECT DISTINCT run_id, request_id FROM _dsa_access_rows) AS a
LEFT JOIN requests AS r USING (run_id, request_id);

-- @macro dsa_access(bs, granularity)
-- The access stream: one row per (request, decode step) at granularity 'block' (the
-- default), per (request, decode step, layer) at 'layer_block'; order by run_id,
-- request_id, step_idx, layer_id to read it in stream order.
-- @column run_id       the run
-- @column request_id   request
-- @column step_idx     decode position
-- @column layer_id     layer (NULL at granularity block: the row is the union of all layers)
-- @column batch_step   the collector's batched step counter (NULL when ingested)
-- @column block_size   the block size asked for
-- @column granularity  block or layer_block
-- @column blocks       distinct block ids accessed, ascending
CREATE MACRO dsa_access(bs, granularity := 'block') AS TABLE
SELECT run_id, request_id, step_idx, layer_id, batch_step,
       _dsa_checked_block_size(bs) AS block_size, granularity AS granularity, blocks
FROM (
    SELECT run_id, request_id, step_idx, NULL::SMALLINT AS layer_id,
           min(batch_step) AS batch_step,
           list_sort(list_distinct(flatten(list(
               kvtrace_touched_blocks(selected_pos, _dsa_checked_block_size(bs))))))
               AS blocks
    FROM _dsa_access_rows
    WHERE _dsa_checked_granularity(granularity) = 'block'
    GROUP BY ALL
    UNION ALL
    SELECT run_id, request_id, step_idx, layer_id, batch_step,
           kvtrace_touched_blocks(selected_pos, _dsa_checked_block_size(bs)) AS blocks
    FROM _dsa_access_rows
    WHERE _dsa_checked_granularity(granularity) = 'layer_block'
);

-- @macro dsa_step_overlap(bs)
-- Per stored row: how much of this step's selection the same (request, layer) selected
-- at its previous traced step, and the previous layer at the same step (block size bs).
-- Example: blocks {1, 2, 3} after {2, 3, 4}: Jaccard 2/4 = 0.5, reused share 2/3.
-- @column run_id                the run
-- @column request_id            request
-- @column step_idx              decode position
-- @column layer_id              layer
-- @column block_size            the block size asked for
-- @column blocks                distinct blocks this row selected
-- @column prev_step_jaccard     |A ∩ P| / |A ∪ P| with P the previous traced step's blocks (NULL at the first step)
-- @column prev_step_reused      |A ∩ P| / |A|: share of this step's blocks already selected at the previous step
-- @column prev_layer_jaccard    the same Jaccard index against the previous layer at this step (NULL for the first layer)
-- @column prev_layer_reused     share of this layer's blocks the previous layer at this step also selected
CREATE MACRO dsa_step_overlap(bs) AS TABLE
WITH rows AS (
    SELECT run_id, request_id, step_idx, layer_id,
           kvtrace_touched_blocks(selected_pos, _dsa_checked_block_size(bs)) AS b
    FROM _dsa_access_rows
), neighbours AS (
    SELECT *,
           lag(b) OVER (PARTITION BY run_id, request_id, layer_id ORDER BY step_idx) AS p,
           lag(b) OVER (PARTITION BY run_id, request_id, step_idx ORDER BY layer_id) AS l
    FROM rows
)
SELECT run_id, request_id, step_idx, layer_id, bs::INTEGER AS block_size, len(b) AS blocks,
       len(list_intersect(b, p)) / nullif(len(b) + len(p) - len(list_intersect(b, p)), 0)
           AS prev_step_jaccard,
       CASE WHEN p IS NOT NULL THEN len(list_intersect(b, p)) / nullif(len(b), 0) END
           AS prev_step_reused,
       len(list_intersect(b, l)) / nullif(len(b) + len(l) - len(list_intersect(b, l)), 0)
           AS prev_layer_jaccard,
       CASE WHEN l IS NOT NULL THEN len(list_intersect(b, l)) / nullif(len(b), 0) END
           AS prev_layer_reused
FROM neighbours;

-- @macro dsa_working_set(bs, steps, granularity)
-- Per request and decode step: distinct items (granularity 'block' by default, or
-- 'layer_block') touched in the last `steps` traced steps of the request, this one
-- included.  Example: blocks [0, 1], [1], [2] at window 2 give 2, 2, 2; at window 3,
-- 2, 2, 3.
-- @column run_id       the run
-- @column request_id   request
-- @column step_idx     decode position
-- @column block_size   the block size asked for
-- @column granularity  block or layer_block
-- @column window_steps  steps in the window
-- @column working_set  distinct items touched in the window
CREATE MACRO dsa_working_set(bs, steps, granularity := 'block') AS TABLE
WITH steps AS (
    SELECT *, dense_rank() OVER (PARTITION BY run_id, request_id ORDER BY step_idx) AS step_no
    FROM dsa_access(bs, granularity)
), touches AS (
    SELECT run_id, request_id, step_no, layer_id, unnest(blocks) AS block_id FROM steps
), spans AS (  -- an access keeps its item in the window until its next access or expiry
    SELECT run_id, request_id, step_no AS opens,
           least(coalesce(lead(step_no) OVER (
                     PARTITION BY run_id, request_id, layer_id, block_id ORDER BY step_no),
                     step_no + _dsa_checked_window(steps)),
                 step_no + _dsa_checked_window(steps)) AS closes
    FROM touches
), deltas AS (
    SELECT run_id, request_id, step_no, sum(change) AS change
    FROM (SELECT run_id, request_id, opens AS step_no, 1 AS change FROM spans
          UNION ALL
          SELECT run_id, request_id, closes, -1 FROM spans)
    GROUP BY ALL
)
SELECT s.run_id, s.request_id, s.step_idx, bs::INTEGER AS block_size,
       granularity AS granularity, steps::INTEGER AS window_steps,
       (sum(coalesce(d.change, 0)) OVER (PARTITION BY s.run_id, s.request_id
                                         ORDER BY s.step_no))::BIGINT AS working_set
FROM (SELECT DISTINCT run_id, request_id, step_idx, step_no FROM steps) AS s
LEFT JOIN deltas AS d USING (run_id, request_id, step_no);

-- @macro dsa_reuse(bs, granularity, scope)
-- Per run: the histogram of LRU reuse (stack) distances, the number of distinct other
-- items touched since the item's last access.  First touches are the row with distance
-- NULL.  An LRU cache of C items hits exactly the accesses with distance < C.
-- Defaults: granularity 'block', scope 'request'.
-- @column run_id       the run
-- @column block_size   the block size asked for
-- @column granularity  block or layer_block
-- @column scope        request (a cache per request) or run (one cache per run)
-- @column distance     stack distance (NULL: first touches)
-- @column accesses     accesses at that distance
-- @column share        accesses / all accesses of the run
CREATE MACRO dsa_reuse(bs, granularity := 'block', scope := 'request') AS TABLE
SELECT r.*, r.accesses / sum(r.accesses) OVER (PARTITION BY r.run_id) AS share
FROM (SELECT unnest(kvtrace_reuse(bs, granularity, scope), recursive := true)) AS r;

-- @macro dsa_hit_curve(bs, policy, granularity, scope, capacities)
-- Per run: hits of a cache of each capacity under a policy: 'lru' (the default; every
-- capacity from one stack-distance pass), 'opt' (Belady: the ceiling no online policy
-- beats), 'fifo', or 'pin_prefix' (a prefix-cache hit's prefix region pinned, LRU for the
-- rest).  Capacities: 1, 2, 4, ... up to the first power of two at or above the largest
-- working set (distinct items of a unit), plus those listed in `capacities`.
-- Defaults: granularity 'block', scope 'request'.
-- @column run_id           the run
-- @column block_size       the block size asked for
-- @column policy           lru, opt, fifo or pin_prefix
-- @column granularity      block or layer_block
-- @column scope            request or run
-- @column capacity_blocks  cache capacity, in items of the granularity
-- @column accesses         accesses of the run
-- @column hits             accesses the cache served
-- @column hit_rate         hits / accesses
-- @column missed_blocks    accesses - hits (first touches included)
CREATE MACRO dsa_hit_curve(bs, policy := 'lru', granularity := 'block', scope := 'request',
                           capacities := []::BIGINT[]) AS TABLE
SELECT unnest(kvtrace_hit_curve(bs, policy, granularity, scope, capacities::BIGINT[]),
              recursive := true);
