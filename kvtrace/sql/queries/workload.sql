-- Workload traces: the arrival process, request lengths and prefix-block reuse.
--
-- workload_requests holds arrival traces (Azure, BurstGPT, Splitwise/Vidur CSVs and
-- Mooncake JSONL), one row per request, arrival_s counted from the trace's earliest kept
-- arrival.  Every analysis takes a run's requests in arrival order: by arrival_s, then
-- request_idx (a stable sort of the file by arrival), whatever order the file lists
-- them in.  Definitions:
--
-- - inter-arrival time: arrival_s minus the previous arrival's, within a run;
-- - coefficient of variation (CV): standard deviation / mean of the inter-arrival times
--   (1 for a Poisson process, above 1 for bursty arrivals);
-- - burstiness index B = (sd - mean) / (sd + mean) of the inter-arrival times (Goh and
--   Barabasi): -1 periodic, 0 Poisson, towards 1 bursty;
-- - peak-to-mean: the busiest window's arrival rate over the run's mean rate;
-- - prefill:decode ratio: input tokens / output tokens, summed over the requests;
-- - an earlier arrival is a request of the run before this one in arrival order; a block
--   is seen before when an earlier arrival read the same hash id; a request's prefix hit
--   is its leading run of seen-before blocks.
--
-- Worked example: requests with hash_ids [1, 2, 3], [1, 2, 4], [5] read 7 blocks, 2 of
-- them seen before (reuse share 2/7); the second request's prefix hit is 2 blocks.
--
-- @requires runs.sql

-- @view workload_requests
-- One row per request of an arrival trace.
-- @column run_id             the run (one per trace file)
-- @column request_idx        the request's data row in the trace (from 0), its key; arrival order is arrival_s, then request_idx
-- @column arrival_s          seconds since the trace's earliest kept arrival
-- @column input_tokens       prompt tokens
-- @column output_tokens      generated tokens
-- @column hash_ids           prefix-block hashes, one per block (NULL when the trace has none)
-- @column hash_block_tokens  tokens per hashed block (512 for Mooncake traces)
-- @column model              model name, when the trace records it (BurstGPT)
-- @column log_type           log type, when the trace records it (BurstGPT: Conversation log, API log)
-- @column session_id         the session or conversation, when the trace records it (Bailian: the root chat of the request's parent chain)
-- @column turn               the request's turn in its session, 1-based as the trace writes it (Bailian, Dynamo agentic, mooncake-delta), else NULL
-- @column request_type       the trace's kind of request (Bailian: text, image, file, search; Dynamo agentic: the agent kind), else NULL
-- @column parent_id          the request it follows on from (Bailian parent_chat_id, a sub-agent's parent), NULL for a root
-- @column request_key        the trace's own id of the request (Bailian chat_id), NULL when it has none
CREATE VIEW workload_requests AS
SELECT * EXCLUDE (_row)
FROM (
    SELECT *, row_number() OVER (PARTITION BY run_id, request_idx) AS _row
    FROM _workload_requests_files
)
WHERE _row = 1;

-- @view _workload_gaps
-- Every request with the time since the previous arrival of its run.  A request stored
-- twice (by a kvtrace that did not key records at ingest) counts once, as in
-- workload_requests; here the window that orders a run's requests for their gaps finds
-- the repeats too, side by side as they share their arrival_s (one sort instead of two:
-- 0.09 s less at a million requests).
CREATE VIEW _workload_gaps AS
SELECT * EXCLUDE (_previous_idx)
FROM (
    SELECT *, lag(request_idx) OVER w AS _previous_idx,
           arrival_s - lag(arrival_s) OVER w AS gap_s
    FROM _workload_requests_files
    WINDOW w AS (PARTITION BY run_id ORDER BY arrival_s, request_idx)
)
WHERE _previous_idx IS DISTINCT FROM request_idx;

-- @view workload_arrival_summary
-- The arrival process of each run in one row.
-- @column run_id          the run
-- @column requests        requests kept
-- @column duration_s      last arrival - first arrival
-- @column rate_per_s      mean arrival rate: (requests - 1) / duration_s
-- @column gap_cv          coefficient of variation of the inter-arrival times
-- @column burstiness      (sd - mean) / (sd + mean) of the inter-arrival times
-- @column peak_to_mean    the busiest 60 s window's rate over the mean rate
CREATE VIEW workload_arrival_summary AS
WITH arrivals AS MATERIALIZED (  -- read once for both aggregates
    SELECT run_id, arrival_s, gap_s FROM _workload_gaps
), gaps AS (
    SELECT run_id, count(*) AS requests, max(arrival_s) - min(arrival_s) AS duration_s,
           avg(gap_s) AS gap_mean, stddev_pop(gap_s) AS gap_sd
    FROM arrivals
    GROUP BY run_id
), windows AS (
    SELECT run_id, max(n) AS busiest
    FROM (SELECT run_id, floor(arrival_s / 60) AS w, count(*) AS n
          FROM arrivals GROUP BY run_id, w)
    GROUP BY run_id
)
SELECT g.run_id, g.requests, g.duration_s,
       (g.requests - 1) / nullif(g.duration_s, 0) AS rate_per_s,
       g.gap_sd / nullif(g.gap_mean, 0) AS gap_cv,
       (g.gap_sd - g.gap_mean) / nullif(g.gap_sd + g.gap_mean, 0) AS burstiness,
       (w.busiest / 60.0) / nullif((g.requests - 1) / nullif(g.duration_s, 0), 0)
           AS peak_to_mean
FROM gaps AS g
JOIN windows AS w USING (run_id)
ORDER BY g.run_id;

-- @view workload_arrival_by_model
-- The arrival process of each model and log type of a trace (BurstGPT records both),
-- inter-arrival times taken within the group.
-- @column run_id      the run
-- @column model       model name (NULL when the trace has none)
-- @column log_type    log type (NULL when the trace has none)
-- @column requests    requests of the group
-- @column rate_per_s  (requests - 1) / (last - first arrival of the group)
-- @column gap_cv      coefficient of variation of the group's inter-arrival times
-- @column burstiness  (sd - mean) / (sd + mean) of the group's inter-arrival times
CREATE VIEW workload_arrival_by_model AS
WITH gaps AS (
    SELECT run_id, model, log_type, arrival_s,
           arrival_s - lag(arrival_s) OVER (PARTITION BY run_id, model, log_type
                                            ORDER BY arrival_s, request_idx) AS gap_s
    FROM workload_requests
)
SELECT run_id, model, log_type, count(*) AS requests,
       (count(*) - 1) / nullif(max(arrival_s) - min(arrival_s), 0) AS rate_per_s,
       stddev_pop(gap_s) / nullif(avg(gap_s), 0) AS gap_cv,
       (stddev_pop(gap_s) - avg(gap_s)) / nullif(stddev_pop(gap_s) + avg(gap_s), 0)
           AS burstiness
FROM gaps
GROUP BY run_id, model, log_type
ORDER BY run_id, model, log_type;

-- @macro workload_arrivals(window_s)
-- The arrival process window by window (default 60 s windows).  A run's last window ends
-- at its last arrival, so it may cover less than window_s: its rate is over the time it
-- covers and it is marked partial.  Example: the last 60 s window of Mooncake's
-- conversation trace holds 203 requests in the 57.0 s up to its last arrival: 3.56 req/s,
-- not 203 / 60 = 3.38 (with 2 s windows, 7 requests in 1.0 s: 7.0, not 3.5).
-- @column run_id         the run
-- @column window_start_s start of the window, in seconds since the first arrival
-- @column requests       arrivals in the window
-- @column rate_per_s     requests / covered_s (NULL when the window covers no time: one arrival at its start)
-- @column gap_cv         CV of the inter-arrival times of the window's requests
-- @column input_tokens   mean prompt length of the window's requests
-- @column output_tokens  mean output length of the window's requests
-- @column covered_s      seconds of the window the trace covers: window_s, or up to the run's last arrival
-- @column partial        true for a last window the trace ends inside (covered_s < window_s)
CREATE MACRO workload_arrivals(window_s := 60) AS TABLE
WITH windows AS (
    SELECT run_id, floor(arrival_s / window_s) * window_s AS window_start_s,
           count(*) AS requests, stddev_pop(gap_s) / nullif(avg(gap_s), 0) AS gap_cv,
           avg(input_tokens) AS input_tokens, avg(output_tokens) AS output_tokens,
           max(max(arrival_s)) OVER (PARTITION BY run_id) AS last_arrival_s
    FROM _workload_gaps
    GROUP BY run_id, window_start_s
), covered AS (
    SELECT *, least(window_s, last_arrival_s - window_start_s) AS covered_s FROM windows
)
SELECT run_id, window_start_s, requests, requests / nullif(covered_s, 0) AS rate_per_s,
       gap_cv, input_tokens, output_tokens, covered_s, covered_s < window_s AS partial
FROM covered
ORDER BY run_id, window_start_s;

-- @view workload_lengths
-- Request lengths per run, model and log type (NULL where the trace has none).
-- @column run_id                the run
-- @column model                 model name
-- @column log_type              log type
-- @column requests              requests
-- @column input_mean            mean prompt tokens
-- @column input_p50             median prompt tokens
-- @column input_p90             90th percentile of prompt tokens
-- @column input_p99             99th percentile of prompt tokens
-- @column output_mean           mean output tokens
-- @column output_p50            median output tokens
-- @column output_p90            90th percentile of output tokens
-- @column output_p99            99th percentile of output tokens
-- @column prefill_decode_ratio  sum of prompt tokens / sum of output tokens
CREATE VIEW workload_lengths AS
WITH lengths AS (  -- the three quantiles of a column in one pass: half the time of three
    SELECT run_id, model, log_type, count(*) AS requests,
           avg(input_tokens) AS input_mean,
           quantile_cont(input_tokens, [0.5, 0.9, 0.99]) AS input_q,
           avg(output_tokens) AS output_mean,
           quantile_cont(output_tokens, [0.5, 0.9, 0.99]) AS output_q,
           sum(input_tokens) / nullif(sum(output_tokens), 0) AS prefill_decode_ratio
    FROM workload_requests
    GROUP BY run_id, model, log_type
)
SELECT run_id, model, log_type, requests,
       input_mean, input_q[1] AS input_p50, input_q[2] AS input_p90, input_q[3] AS input_p99,
       output_mean, output_q[1] AS output_p50, output_q[2] AS output_p90,
       output_q[3] AS output_p99,
       prefill_decode_ratio
FROM lengths
ORDER BY run_id, model, log_type;

-- @view _workload_blocks
-- Every (request, block) of the runs with hashes: the request's place in its run's
-- arrival order (arrival_rank, from 1), and whether an earlier arrival read the block.
CREATE VIEW _workload_blocks AS
WITH requests AS (
    SELECT run_id, request_idx, hash_block_tokens, hash_ids,
           row_number() OVER (PARTITION BY run_id ORDER BY arrival_s, request_idx)
               AS arrival_rank
    FROM workload_requests
    WHERE hash_ids IS NOT NULL
), blocks AS (
    SELECT run_id, request_idx, arrival_rank, hash_block_tokens,
           unnest(hash_ids) AS hash_id, generate_subscripts(hash_ids, 1) AS position
    FROM requests
), first_use AS (
    SELECT run_id, hash_id, min(arrival_rank) AS first_rank
    FROM blocks
    GROUP BY run_id, hash_id
)
SELECT b.*, f.first_rank < b.arrival_rank AS seen_before
FROM blocks AS b
JOIN first_use AS f USING (run_id, hash_id);

-- @view workload_prefix_hits
-- Per request of a run with hashes, in arrival order: its blocks and how long a prefix an
-- infinite prefix cache would serve (the leading blocks earlier arrivals read).
-- @column run_id         the run
-- @column request_idx    the request (its data row)
-- @column blocks         its prompt's hashed blocks
-- @column seen_blocks    of those, blocks an earlier arrival read (anywhere in the prompt)
-- @column hit_blocks     the leading run of seen-before blocks: the prefix-cache hit
-- @column hit_tokens     hit_blocks x hash_block_tokens, capped at the prompt length
CREATE VIEW workload_prefix_hits AS
SELECT b.run_id, b.request_idx, count(*) AS blocks,
       count(*) FILTER (WHERE b.seen_before) AS seen_blocks,
       coalesce(min(b.position) FILTER (WHERE NOT b.seen_before) - 1, count(*)) AS hit_blocks,
       least(hit_blocks * any_value(b.hash_block_tokens), any_value(r.input_tokens))
           AS hit_tokens
FROM _workload_blocks AS b
JOIN workload_requests AS r USING (run_id, request_idx)
GROUP BY b.run_id, b.arrival_rank, b.request_idx
ORDER BY b.run_id, b.arrival_rank;

-- @view workload_prefix_reuse
-- Per run with hashes: how much of the prompt blocks an infinite cache would serve.
-- @column run_id               the run
-- @column requests             requests with hashes
-- @column blocks               blocks read, all requests together
-- @column distinct_blocks      distinct hash ids
-- @column seen_blocks          blocks an earlier arrival read
-- @column reuse_share          seen_blocks / blocks
-- @column hit_requests         requests whose first block was seen before
-- @column prefix_hit_share     prefix-hit blocks (leading runs) / blocks
-- @column mean_hit_tokens      mean prefix-hit tokens per request
CREATE VIEW workload_prefix_reuse AS
SELECT run_id, count(*) AS requests, sum(blocks) AS blocks,
       (SELECT count(DISTINCT hash_id) FROM _workload_blocks AS b WHERE b.run_id = h.run_id)
           AS distinct_blocks,
       sum(seen_blocks) AS seen_blocks, sum(seen_blocks) / sum(blocks) AS reuse_share,
       count(*) FILTER (WHERE hit_blocks > 0) AS hit_requests,
       sum(hit_blocks) / sum(blocks) AS prefix_hit_share,
       avg(hit_tokens) AS mean_hit_tokens
FROM workload_prefix_hits AS h
GROUP BY run_id
ORDER BY run_id;

-- @view workload_session_reuse
-- Per session of a trace with sessions and hashes: how much of its prompt blocks it had
-- read itself before (in arrival order), and how much only other sessions had.
-- @column run_id           the run
-- @column session_id       the session
-- @column requests         its requests
-- @column blocks           blocks its requests read
-- @column seen_in_session  blocks an earlier arrival of the same session read
-- @column seen_elsewhere   blocks only earlier arrivals of other sessions read
-- @column session_share    seen_in_session / blocks
-- @column elsewhere_share  seen_elsewhere / blocks
CREATE VIEW workload_session_reuse AS
WITH blocks AS (
    SELECT b.run_id, b.request_idx, b.arrival_rank, b.hash_id, b.seen_before, r.session_id
    FROM _workload_blocks AS b
    JOIN workload_requests AS r USING (run_id, request_idx)
    WHERE r.session_id IS NOT NULL
), first_in_session AS (
    SELECT run_id, session_id, hash_id, min(arrival_rank) AS first_rank
    FROM blocks
    GROUP BY run_id, session_id, hash_id
)
SELECT b.run_id, b.session_id, count(DISTINCT b.request_idx) AS requests,
       count(*) AS blocks,
       count(*) FILTER (WHERE s.first_rank < b.arrival_rank) AS seen_in_session,
       count(*) FILTER (WHERE s.first_rank = b.arrival_rank AND b.seen_before)
           AS seen_elsewhere,
       seen_in_session / count(*) AS session_share,
       seen_elsewhere / count(*) AS elsewhere_share
FROM blocks AS b
JOIN first_in_session AS s USING (run_id, session_id, hash_id)
GROUP BY b.run_id, b.session_id
ORDER BY b.run_id, b.session_id;

-- @macro workload_prefix_hit_curve(policy, capacities, semantics, weight, warmup, capacity_bytes, bytes_per_token, model)
-- Per run with hashes: hits of one prefix cache shared by all requests (in arrival
-- order), by capacity.  Capacities in blocks: `capacities` and each byte budget of
-- `capacity_bytes` as floor(budget / (bytes per token x tokens per block)), else (none
-- named) 1, 2, 4, ... up to the first power of two at or above the distinct blocks; the
-- bytes per token given or those of `model` (kvtrace/analysis/kv_layouts.py: Llama 2, 3, 3.1,
-- 3.2 and 3.3, Qwen, Qwen2.5 and Qwen3, DeepSeek V3, R1 and V3.2, ... by their Hugging
-- Face names, such as llama-3.1-8b or meta-llama/Llama-3.3-70B-Instruct).
-- semantics 'block' (the default): a block cache, every block read hits or misses on its
-- own, under 'lru' (every capacity from one stack-distance pass), 'opt' (Belady) or
-- 'fifo'; the largest default capacity reaches reuse_share of workload_prefix_reuse.
-- semantics 'prefix': what engines reuse, the leading run of the request's blocks cached
-- when it arrives; then 'lru' and 'fifo' touch every block of the request in order (a
-- hash-chained block pool, as vLLM's), 'radix_lru' refreshes the hit run and inserts
-- under cached parents, evicting least recently used leaves only (SGLang's radix tree),
-- 'opt' evicts the leaf needed again last and skips a block needed later than all
-- (Belady over the tree's leaves: the ceiling).
-- weight: 'blocks' (hit blocks / blocks read), 'tokens' (hit tokens / input tokens; a
-- block holds the trace's tokens per block, the last one what is left of the input) or
-- 'requests' (the mean of each request's token hit share).  warmup: the share of the
-- earliest requests left out of the counts (not out of the cache).
-- Example (prefix, blocks of 4 tokens, capacity 2, radix_lru): requests [a, b] (8
-- tokens), [a, c] (6 tokens), [a, b] (8 tokens).  The second finds a cached (1 block, 4
-- tokens), inserts c after evicting leaf b; the third finds a and not b: 1 block again.
-- Token hit rate 8 / 22; with warmup := 0.5 (the first request left out) 8 / 14.
-- @column run_id           the run
-- @column policy           lru, opt, fifo or radix_lru
-- @column capacity_blocks  cache capacity in blocks
-- @column accesses         blocks read by the counted requests
-- @column hits             of those, blocks the cache served
-- @column hit_rate         hits by the weight over the total by the weight
-- @column semantics        block or prefix
-- @column weight           blocks, tokens or requests
-- @column warmup           the share of requests left out of the counts
-- @column capacity_bytes   the byte budget the capacity comes from (NULL: given in blocks)
-- @column requests         requests counted
-- @column hit_tokens       input tokens of the served blocks
-- @column tokens           input tokens of the counted requests
CREATE MACRO workload_prefix_hit_curve(policy := 'lru', capacities := []::BIGINT[],
                                       semantics := 'block', weight := 'blocks',
                                       warmup := 0.0, capacity_bytes := []::BIGINT[],
                                       bytes_per_token := NULL, model := NULL) AS TABLE
SELECT unnest(kvtrace_prefix_hit_curve(policy, capacities::BIGINT[], semantics, weight,
                                       warmup::DOUBLE, capacity_bytes::BIGINT[],
                                       bytes_per_token::DOUBLE, model::VARCHAR),
              recursive := true);

-- @macro workload_prefix_requests(policy, capacities, semantics, warmup, capacity_bytes, bytes_per_token, model, prefill_tok_s, cost_run)
-- Per run, capacity (those named in blocks or bytes, as in workload_prefix_hit_curve) and
-- request, in arrival order: the blocks and input tokens the cache served when the request arrived, and
-- the time to first token they save: hit_tokens x the prefill seconds per token
-- (`prefill_tok_s`, else the warehouse's fitted batch timings, `cost_run` choosing
-- among several runs, else DeepSeek's published 73,700 tokens/s per H800 node).
-- Defaults: semantics 'prefix', warmup 0 (requests of the warm-up have counted false).
-- Example: the header example of workload_prefix_hit_curve at capacity 2 gives hit_blocks
-- 0, 1, 1 and hit_tokens 0, 4, 4; at 73,700 tokens/s each hit saves 0.054 ms.
-- @column run_id          the run
-- @column policy          lru, opt, fifo or radix_lru
-- @column semantics       block or prefix
-- @column capacity_blocks cache capacity in blocks
-- @column request_idx     the request (its data row)
-- @column counted         false for the warm-up's requests (the earliest arrivals)
-- @column tokens          its input tokens in hashed blocks
-- @column blocks          its blocks
-- @column hit_blocks      blocks the cache served
-- @column hit_tokens      input tokens of those blocks: prefill tokens saved
-- @column ttft_saved_ms   hit_tokens x prefill seconds per token, in ms
-- @column prefill_source  where the prefill cost comes from
CREATE MACRO workload_prefix_requests(policy := 'lru', capacities := []::BIGINT[],
                                      semantics := 'prefix', warmup := 0.0,
                                      capacity_bytes := []::BIGINT[], bytes_per_token := NULL,
                                      model := NULL, prefill_tok_s := NULL,
                                      cost_run := NULL) AS TABLE
SELECT unnest(kvtrace_prefix_requests(policy, capacities::BIGINT[], semantics,
                                      warmup::DOUBLE, capacity_bytes::BIGINT[],
                                      bytes_per_token::DOUBLE, model::VARCHAR,
                                      prefill_tok_s::DOUBLE, cost_run::VARCHAR),
              recursive := true);

-- @view workload_prefix_tree
-- Per run with hashes: the tree of prompt prefixes its requests form (a node is a
-- prefix: every block up to one, so requests share a node when they share everything
-- before it), what an infinite prefix cache would serve (requests in arrival order), and
-- the lengths of the requests.
-- @column run_id               the run
-- @column requests             requests with hashes
-- @column nodes                distinct prefixes (blocks of the tree)
-- @column leaves               prefixes no longer prefix extends
-- @column max_depth            blocks of the longest prompt
-- @column mean_depth           mean blocks per prompt
-- @column mean_branching       mean children of a prefix that has any
-- @column shared_nodes         prefixes two or more requests hold
-- @column shared_token_share   input tokens in blocks of shared prefixes / input tokens
-- @column infinite_hit_rate    input tokens an infinite prefix cache serves (leading runs of prefixes earlier arrivals held) / input tokens
-- @column isl_mean             mean input tokens
-- @column isl_p50              median input tokens
-- @column isl_p99              99th percentile of input tokens
-- @column osl_mean             mean output tokens
-- @column osl_p50              median output tokens
-- @column osl_p99              99th percentile of output tokens
CREATE VIEW workload_prefix_tree AS
WITH blocks AS (
    SELECT b.run_id, b.request_idx, b.arrival_rank, b.position,
           least(b.hash_block_tokens,
                 greatest(r.input_tokens - (b.position - 1) * b.hash_block_tokens, 0))
               AS tokens,
           hash(r.hash_ids[1:b.position]) AS node,
           hash(r.hash_ids[1:b.position - 1]) AS parent
    FROM _workload_blocks AS b
    JOIN workload_requests AS r USING (run_id, request_idx)
), uses AS (
    SELECT run_id, node, any_value(parent) AS parent, count(*) AS holders,
           min(arrival_rank) AS first_rank
    FROM blocks GROUP BY run_id, node
), served AS (
    SELECT b.run_id, b.request_idx, b.tokens,
           bool_and(u.first_rank < b.arrival_rank) OVER (
               PARTITION BY b.run_id, b.request_idx ORDER BY b.position
           ) AS leading_hit
    FROM blocks AS b JOIN uses AS u USING (run_id, node)
), branching AS (
    SELECT run_id, parent, count(*) AS children
    FROM uses WHERE parent IN (SELECT node FROM uses AS p WHERE p.run_id = uses.run_id)
    GROUP BY run_id, parent
), lengths AS (
    SELECT run_id, count(*) AS requests,
           avg(input_tokens) AS isl_mean, median(input_tokens) AS isl_p50,
           quantile_cont(input_tokens, 0.99) AS isl_p99,
           avg(output_tokens) AS osl_mean, median(output_tokens) AS osl_p50,
           quantile_cont(output_tokens, 0.99) AS osl_p99,
           max(len(hash_ids)) AS max_depth, avg(len(hash_ids)) AS mean_depth
    FROM workload_requests WHERE hash_ids IS NOT NULL GROUP BY run_id
)
SELECT l.run_id, l.requests,
       (SELECT count(*) FROM uses AS u WHERE u.run_id = l.run_id) AS nodes,
       (SELECT count(*) FROM uses AS u WHERE u.run_id = l.run_id
            AND u.node NOT IN (SELECT parent FROM uses AS c WHERE c.run_id = l.run_id))
           AS leaves,
       l.max_depth, l.mean_depth,
       (SELECT avg(children) FROM branching AS b WHERE b.run_id = l.run_id) AS mean_branching,
       (SELECT count(*) FROM uses AS u WHERE u.run_id = l.run_id AND u.holders >= 2)
           AS shared_nodes,
       (SELECT sum(b.tokens) FILTER (WHERE u.holders >= 2) / sum(b.tokens)
        FROM blocks AS b JOIN uses AS u USING (run_id, node) WHERE b.run_id = l.run_id)
           AS shared_token_share,
       (SELECT sum(tokens) FILTER (WHERE leading_hit) / sum(tokens)
        FROM served AS s WHERE s.run_id = l.run_id) AS infinite_hit_rate,
       l.isl_mean, l.isl_p50, l.isl_p99, l.osl_mean, l.osl_p50, l.osl_p99
FROM lengths AS l
ORDER BY l.run_id;
