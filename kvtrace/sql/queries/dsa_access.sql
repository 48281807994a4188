-- KV access analytics: the access stream of a DSA run, and what caches would serve of it.
--
-- The access stream at block size B (any B: blocks are re-binned from the stored
-- positions, block_id = pos // B) and a granularity:
--   block        a step accesses the union of the blocks its layers selected, each once
--                (paged engines move all layers of a block);
--   layer_block  each (step, layer) accesses its blocks (layer-wise offload).
-- An access names an item.  With sharing 'private' an item is (request, block), as if
-- every request had its KV to itself.  With sharing 'content' a block is named by its
-- content, so requests that hold the same tokens read the same item of one shared pool:
--   token ids recorded (collected runs, `dsa_request_tokens`): a full block's key is the
--     chained hash of the tokens up to its end, as vLLM's prefix caching names blocks;
--   no token ids (the seed's JSONL): a block lying wholly inside the request's prefix key
--     region (min(prompt_len, N) tokens, N the run's prefix_key_tokens) is
--     (prefix_key, block); this undercounts sharing beyond the region;
--   anything else (a partly filled block, a request with neither) stays private.
-- At layer_block the item is (layer, item key).
-- Order: scope `request` gives each request its own cache and reads its decode steps
-- ascending; scope `run` shares one cache between a run's requests and follows time,
-- `pool_step`: the batched step counter (`batch_step`) where every row has one, else
-- the steps' timestamps (`ts_us`), else requests one after another (`stream_order` says
-- which).  Within a step: request id, then layers ascending, then block ids ascending.
-- A run stored at several block sizes is read once, at its smallest stored size.
-- Capacities count items of the chosen granularity; a first touch is always a miss.
-- Example (block granularity, B = 16): step 100 selects positions {3, 20} on layer 0 and
-- {21, 40} on layer 1 -> blocks [0, 1, 2]; step 101 selects {5} and {41} -> blocks [0, 2].
-- LRU stack distances: 0, 1, 2 are first touches; block 0 at step 101 has distance 2
-- (blocks 1 and 2 were touched since), block 2 then has distance 1 (block 0 since).
-- An LRU cache of 2 blocks hits 1 of the 5 accesses, one of 3 blocks hits 2.
-- Example (sharing): requests 0 and 1 both start with the same 32 tokens; at B = 16 their
-- blocks 0 and 1 have the same keys.  In one shared pool (scope run) request 1's first
-- touch of block 0 after request 0 read it is a hit, a "shared hit"; with sharing
-- 'private' it is a cold miss.
--
-- @requires dsa_steps.sql
-- @requires runs.sql

-- @view _dsa_access_rows
-- The DSA rows the access stream reads: each run at its smallest stored block size.
CREATE VIEW _dsa_access_rows AS
SELECT s.run_id, s.request_id, s.step_idx, s.layer_id, s.seq_len, s.batch_step, s.ts_us,
       s.block_size, s.selected_pos, s.touched_blocks
FROM dsa_steps AS s
JOIN (SELECT run_id, min(block_size) AS block_size FROM dsa_steps GROUP BY run_id) AS smallest
    USING (run_id, block_size);

-- @macro _dsa_checked_granularity(granularity)
-- The granularity, or an error naming the allowed ones.
CREATE MACRO _dsa_checked_granularity(granularity) AS
    CASE WHEN granularity IN ('block', 'layer_block') THEN granularity
         ELSE error('unknown granularity ''' || granularity || '''; expected block or layer_block')
    END;

-- @macro _dsa_checked_sharing(sharing)
-- The sharing, or an error naming the allowed ones.
CREATE MACRO _dsa_checked_sharing(sharing) AS
    CASE WHEN sharing IN ('private', 'content') THEN sharing
         ELSE error('unknown sharing ''' || sharing || '''; expected private or content')
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

-- @view _dsa_pool_steps
-- Per (run, request, decode step): its place in the run's time order, 1-based
-- (`pool_step`: steps of one batch share it), and the order used (`stream_order`):
-- 'batch_step' when every row of the run has one, else 'ts_us' when every row has a
-- timestamp (a step's time is its earliest row's), else 'request' (one after another).
CREATE VIEW _dsa_pool_steps AS
WITH steps AS (
    SELECT run_id, request_id, step_idx, min(batch_step) AS batch_step, min(ts_us) AS ts_us,
           bool_and(batch_step IS NOT NULL) AS batched, bool_and(ts_us IS NOT NULL) AS timed
    FROM _dsa_access_rows
    GROUP BY ALL
), orders AS (
    SELECT run_id, bool_and(batched) AS batched, bool_and(timed) AS timed
    FROM steps GROUP BY run_id
)
SELECT s.run_id, s.request_id, s.step_idx, s.batch_step, s.ts_us,
       CASE WHEN o.batched THEN 'batch_step' WHEN o.timed THEN 'ts_us' ELSE 'request' END
           AS stream_order,
       dense_rank() OVER (
           PARTITION BY s.run_id
           ORDER BY CASE WHEN o.batched THEN s.batch_step END,
                    CASE WHEN NOT o.batched AND o.timed THEN s.ts_us END,
                    CASE WHEN NOT (o.batched OR o.timed) THEN s.request_id END,
                    CASE WHEN NOT (o.batched OR o.timed) THEN s.step_idx END
       ) AS pool_step
FROM steps AS s
JOIN orders AS o USING (run_id);

-- @view _dsa_key_regions
-- Per request: the tokens its prefix key covers, min(prompt_len, N): from the collector's
-- prefix_tokens setting for collected runs, else the request's prefix region (an
-- ingested dump's is that region whether it hit or missed).
CREATE VIEW _dsa_key_regions AS
SELECT r.run_id, r.request_id, r.prefix_key,
       CASE WHEN c.prefix_tokens IS NOT NULL THEN least(r.prompt_tokens, c.prefix_tokens)
            ELSE r.prefix_region_tokens END AS key_tokens
FROM requests AS r
LEFT JOIN (
    SELECT run_id,
           try_cast(json_extract_string(any_value(collector_config), '$.prefix_tokens')
                    AS BIGINT) AS prefix_tokens
    FROM runs GROUP BY run_id
) AS c USING (run_id);

-- @macro dsa_block_keys(bs)
-- Per request of a DSA run: the content keys of its blocks at block size bs, the items a
-- shared pool holds (sharing 'content').  block_keys[j + 1] is block j's key; blocks past
-- the list are private.  Keys are 64-bit hashes in [2^62, 2^63) (kvtrace's own; a plain
-- duckdb shell's fallback uses DuckDB's hash: other values, the same equalities).
-- Example: two requests whose token ids agree on their first 40 tokens have equal keys
-- for blocks 0 and 1 at B = 16, and for blocks 0 .. 9 at B = 4.
-- @column run_id        the run
-- @column request_id    request
-- @column sharing_rule  token_ids (chained hash of the tokens up to the block's end, full blocks only) or prefix_key ((prefix_key, j) for the blocks wholly inside the key region)
-- @column block_keys    key of block j at position j + 1
CREATE MACRO dsa_block_keys(bs) AS TABLE
SELECT run_id, request_id, 'token_ids' AS sharing_rule,
       kvtrace_block_keys(token_ids, _dsa_checked_block_size(bs)) AS block_keys
FROM dsa_request_tokens
UNION ALL
SELECT k.run_id, k.request_id, 'prefix_key' AS sharing_rule,
       kvtrace_prefix_block_keys(k.prefix_key, k.key_tokens // _dsa_checked_block_size(bs))
           AS block_keys
FROM _dsa_key_regions AS k
ANTI JOIN dsa_request_tokens AS t USING (run_id, request_id)
WHERE k.prefix_key IS NOT NULL AND k.key_tokens IS NOT NULL;

-- @macro dsa_access(bs, granularity, sharing)
-- The access stream: one row per (request, decode step) at granularity 'block' (the
-- default), per (request, decode step, layer) at 'layer_block'; sharing 'private' (the
-- default) or 'content'.  Order by run_id, request_id, step_idx, layer_id for scope
-- request, by run_id, pool_step, request_id, layer_id for scope run.
-- @column run_id        the run
-- @column request_id    request
-- @column step_idx      decode position
-- @column layer_id      layer (NULL at granularity block: the row is the union of all layers)
-- @column batch_step    the collector's batched step counter (NULL when ingested)
-- @column pool_step     the step's place in the run's time order (scope run), 1-based
-- @column stream_order  what pool_step follows: batch_step, ts_us or request
-- @column block_size    the block size asked for
-- @column granularity   block or layer_block
-- @column sharing       private or content
-- @column sharing_rule  how the request's blocks are named: token_ids, prefix_key or private
-- @column blocks        distinct block ids accessed, ascending
-- @column items         the item key of each block: (request_id << 32) + block when private, else its content key (dsa_block_keys)
CREATE MACRO dsa_access(bs, granularity := 'block', sharing := 'private') AS TABLE
WITH accessed AS (
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
), keys AS (
    SELECT * FROM dsa_block_keys(bs) WHERE _dsa_checked_sharing(sharing) = 'content'
)
SELECT a.run_id, a.request_id, a.step_idx, a.layer_id, a.batch_step, p.pool_step,
       p.stream_order, _dsa_checked_block_size(bs) AS block_size, granularity AS granularity,
       sharing AS sharing, coalesce(k.sharing_rule, 'private') AS sharing_rule, a.blocks,
       list_transform(a.blocks, lambda b: coalesce(k.block_keys[b + 1],
                                                    (a.request_id::BIGINT << 32) + b))
           AS items
FROM accessed AS a
JOIN _dsa_pool_steps AS p USING (run_id, request_id, step_idx)
LEFT JOIN keys AS k USING (run_id, request_id);

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

-- @macro dsa_working_set(bs, steps, granularity, sharing)
-- Distinct items (granularity 'block' by default, or 'layer_block') touched in the last
-- `steps` steps, this one included.  With sharing 'private' (the default): per request
-- and decode step, over the request's traced steps.  With sharing 'content': per run and
-- pool step (request_id and step_idx NULL), over every request of the run, the items of
-- one shared pool (requests holding the same block count it once).
-- Example: blocks [0, 1], [1], [2] at window 2 give 2, 2, 2; at window 3, 2, 2, 3.
-- @column run_id        the run
-- @column request_id    request (NULL with sharing content)
-- @column step_idx      decode position (NULL with sharing content)
-- @column pool_step     the step's place in the run's time order (see dsa_access)
-- @column block_size    the block size asked for
-- @column granularity   block or layer_block
-- @column sharing       private or content
-- @column window_steps  steps in the window
-- @column working_set   distinct items touched in the window
CREATE MACRO dsa_working_set(bs, steps, granularity := 'block', sharing := 'private') AS TABLE
WITH units AS (  -- a unit is a request (private) or the whole run's pool (content: -1)
    SELECT *, CASE WHEN sharing = 'private' THEN request_id ELSE -1 END AS unit
    FROM dsa_access(bs, granularity, sharing)
), steps AS (
    SELECT *, dense_rank() OVER (
               PARTITION BY run_id, unit
               ORDER BY CASE WHEN sharing = 'private' THEN step_idx ELSE pool_step END
           ) AS step_no
    FROM units
), touches AS (
    SELECT DISTINCT run_id, unit, step_no, layer_id, unnest(items) AS item FROM steps
), spans AS (  -- an access keeps its item in the window until its next access or expiry
    SELECT run_id, unit, step_no AS opens,
           least(coalesce(lead(step_no) OVER (
                     PARTITION BY run_id, unit, layer_id, item ORDER BY step_no),
                     step_no + _dsa_checked_window(steps)),
                 step_no + _dsa_checked_window(steps)) AS closes
    FROM touches
), deltas AS (
    SELECT run_id, unit, step_no, sum(change) AS change
    FROM (SELECT run_id, unit, opens AS step_no, 1 AS change FROM spans
          UNION ALL
          SELECT run_id, unit, closes, -1 FROM spans)
    GROUP BY ALL
)
SELECT s.run_id, CASE WHEN sharing = 'private' THEN s.unit END AS request_id,
       CASE WHEN sharing = 'private' THEN s.step_idx END AS step_idx, s.pool_step,
       bs::INTEGER AS block_size, granularity AS granularity, sharing AS sharing,
       steps::INTEGER AS window_steps,
       (sum(coalesce(d.change, 0)) OVER (PARTITION BY s.run_id, s.unit
                                         ORDER BY s.step_no))::BIGINT AS working_set
FROM (SELECT DISTINCT run_id, unit, step_no,
             CASE WHEN sharing = 'private' THEN step_idx END AS step_idx,
             pool_step
      FROM steps) AS s
LEFT JOIN deltas AS d USING (run_id, unit, step_no);

-- @macro dsa_reuse(bs, granularity, scope, sharing)
-- Per run: the histogram of LRU reuse (stack) distances, the number of distinct other
-- items touched since the item's last access.  First touches are the row with distance
-- NULL.  An LRU cache of C items hits exactly the accesses with distance < C.
-- Defaults: granularity 'block', scope 'request', sharing 'private'.
-- @column run_id           the run
-- @column block_size       the block size asked for
-- @column granularity      block or layer_block
-- @column scope            request (a cache per request) or run (one cache per run)
-- @column sharing          private or content (see dsa_access)
-- @column distance         stack distance (NULL: first touches)
-- @column accesses         accesses at that distance
-- @column shared_accesses  of those, a request's first touch of an item another request brought in
-- @column share            accesses / all accesses of the run
CREATE MACRO dsa_reuse(bs, granularity := 'block', scope := 'request', sharing := 'private')
AS TABLE
SELECT r.*, r.accesses / sum(r.accesses) OVER (PARTITION BY r.run_id) AS share
FROM (SELECT unnest(kvtrace_reuse(bs, granularity, scope, sharing), recursive := true)) AS r;

-- @macro dsa_hit_curve(bs, policy, granularity, scope, capacities, sharing, sample)
-- Per run: hits of a cache of each capacity under a policy: 'lru' (the default; every
-- capacity from one stack-distance pass), 'opt' (Belady: the ceiling no online policy
-- that fetches on demand beats), 'fifo', 'pin_prefix' (the prefix regions of
-- prefix-cache hits pinned before they are read, so it can beat 'opt'; LRU for the
-- rest; in a shared pool each shared block is pinned once),
-- 'sliding_window' (the blocks of an active request's last 2,048 tokens kept above the
-- rest, LRU among equals; `kvtrace whatif --window-tokens` sets the window), 'lfu'
-- (fewest accesses since the stream began evicted first) or 'score' (the lowest
-- largest selected-position score at the latest read evicted first; needs stored
-- scores).  The last three rank their blocks whatever the capacity, so every capacity
-- comes from one pass.  Capacities: 1, 2,
-- 4, ... up to the first power of two at or above the largest working set (distinct
-- items of a unit), plus those listed in `capacities`.  A hit on a request's first touch
-- of an item another request brought in is also counted as a shared hit.
-- `sample` < 1 estimates an LRU curve from the accesses to a spatially hashed sample of
-- the items (SHARDS, FAST'15, with its size correction): a sampled stack distance d
-- stands for one in [d, d + 1) / sample and a sampled access for 1 / sample.  Hits are
-- then estimates, for streams too long to simulate whole; their error falls with the
-- number of items sampled (benchmarks/bench_whatif.py measures it), so keep
-- sample x distinct items in the tens of thousands.  LRU only.
-- Defaults: granularity 'block', scope 'request', sharing 'private', sample 1 (exact).
-- Example: FROM dsa_hit_curve(64, 'lru', scope := 'run', sharing := 'content',
--                             sample := 0.01)
-- @column run_id           the run
-- @column block_size       the block size asked for
-- @column policy           lru, opt, fifo, pin_prefix, sliding_window, lfu or score
-- @column granularity      block or layer_block
-- @column scope            request or run
-- @column sharing          private or content
-- @column capacity_blocks  cache capacity, in items of the granularity
-- @column accesses         accesses of the run
-- @column hits             accesses the cache served
-- @column shared_hits      of those, first touches by a request of items another request brought in
-- @column hit_rate         hits / accesses
-- @column missed_blocks    accesses - hits (first touches included)
CREATE MACRO dsa_hit_curve(bs, policy := 'lru', granularity := 'block', scope := 'request',
                           capacities := []::BIGINT[], sharing := 'private',
                           sample := 1.0) AS TABLE
SELECT unnest(kvtrace_hit_curve(bs, policy, granularity, scope, capacities::BIGINT[],
                                sharing, sample::DOUBLE),
              recursive := true);
