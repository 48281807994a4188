-- Block reuse in arrival traces, as characterisation studies of production traces measure
-- it (Wang et al., "KVCache Cache in the Wild", USENIX ATC'25, on Alibaba Bailian's
-- traces): how long after its previous read a block is read again, how few blocks take
-- most reuses, whether the request that reuses a block is a single-turn request or a
-- turn of a conversation, whether the block's previous reader was another session, and
-- what an infinite cache would serve per request type.
--
-- Definitions (a run's requests with hashes, in arrival order: arrival_s, then
-- request_idx, as in workload.sql):
--
-- - a read is a (request, block position); a reuse is a read of a hash id an earlier
--   arrival read (the seen_before blocks of workload_prefix_reuse: their count is the
--   run's reuses, and every reuse is a hit of an infinite cache);
-- - the previous read of a reuse is the latest earlier arrival that read the block, and
--   its reuse time is the seconds between the two arrivals (0 between requests that
--   arrive at the same time: ties are ordered by request_idx);
-- - a request's turn is the trace's turn, else its place among its session's requests
--   in arrival order (from 1), NULL when the trace records neither;
-- - the reusing request is a follow-up when its turn is above 1 or it has a parent
--   (parent_id), else a first turn when its session holds more requests, else a
--   single-turn request (a session of one request, or a turn 1 without a session);
--   NULL when the trace records no turn, session or parent.  Single-turn reuses are
--   those of single-turn requests; multi-turn reuses those of first turns and
--   follow-ups: the study's split of hits between single- and multi-turn requests, by
--   this rule (a request is multi-turn when its conversation has several turns);
-- - a reuse is in-session when its previous read was by a request of the same session,
--   cross-session when by another session, neither (NULL) when either request has no
--   session.  (workload_session_reuse instead asks whether the session itself had read
--   the block at any time before.)
-- - request_type and turn group as recorded: NULL (a trace without them) is a group of
--   its own.
--
-- Worked example: session s reads [1, 2] at 0 s (turn 1, text) and [1, 2, 3] at 5 s
-- (turn 2, text); a single-turn request t (image) reads [1, 4] at 5 s, after s's second
-- turn by request_idx.  Three reuses: s's turn 2 reads 1 and 2 again (reuse time 5 s,
-- in-session, follow-ups); t reads 1, last read by s at 5 s (reuse time 0, a
-- cross-session single-turn reuse).  Block 1 takes 2 of the 3 reuses: the top 25 % of
-- the 4 blocks (1 block) take 2/3.  An infinite cache serves text 2 of 5 blocks and
-- image 1 of 2.
--
-- @requires runs.sql
-- @requires workload.sql

-- @view _workload_reuse_requests
-- Every request with hashes: its place in its run's arrival order (arrival_rank, from 1,
-- as _workload_blocks numbers it), its hashes, session, type, turn and turn kind.
CREATE VIEW _workload_reuse_requests AS
WITH ranked AS (
    SELECT run_id, request_idx, arrival_s, hash_ids, session_id, request_type, parent_id,
           turn AS recorded_turn,
           row_number() OVER (PARTITION BY run_id ORDER BY arrival_s, request_idx)
               AS arrival_rank,
           row_number() OVER (PARTITION BY run_id, session_id ORDER BY arrival_s, request_idx)
               AS session_rank,
           count(*) OVER (PARTITION BY run_id, session_id) AS session_requests
    FROM workload_requests
    WHERE hash_ids IS NOT NULL
)
SELECT run_id, request_idx, arrival_rank, arrival_s, hash_ids, session_id, request_type,
       parent_id, coalesce(recorded_turn, CASE WHEN session_id IS NOT NULL THEN session_rank END)
           AS turn,
       CASE WHEN turn > 1 OR parent_id IS NOT NULL THEN 'follow_up'
            WHEN turn IS NULL THEN NULL
            WHEN session_id IS NOT NULL AND session_requests > 1 THEN 'first_turn'
            ELSE 'single_turn' END AS turn_kind
FROM ranked;

-- @view _workload_block_reads
-- Every read of a block (request and position, with the request's arrival, type, turn,
-- turn kind and session) and the arrival_rank of the latest earlier arrival that read
-- it: NULL when none did, else the read is a reuse (a seen_before block of
-- _workload_blocks).  One window over the reads, no aggregate joined back: at 200,000
-- requests (2.7 M reads) the reuse views take about as long as workload_prefix_reuse.
CREATE VIEW _workload_block_reads AS
WITH blocks AS (
    SELECT run_id, request_idx, arrival_rank, arrival_s, request_type, turn, turn_kind,
           session_id, unnest(hash_ids) AS hash_id, generate_subscripts(hash_ids, 1) AS position
    FROM _workload_reuse_requests
)
SELECT *,
       max(arrival_rank) OVER (
           PARTITION BY run_id, hash_id ORDER BY arrival_rank
           RANGE BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
       ) AS previous_rank
FROM blocks;

-- @view _workload_reuse_reads
-- workload_reuses' rows in no order, with the reusing request's arrival_rank (what the
-- aggregates read: a sort of every reuse saved).
CREATE VIEW _workload_reuse_reads AS
SELECT b.run_id, b.request_idx, b.position, b.hash_id, b.arrival_s, b.request_type, b.turn,
       b.turn_kind, b.session_id, p.request_idx AS previous_request_idx,
       p.arrival_s AS previous_arrival_s, b.arrival_s - p.arrival_s AS reuse_time_s,
       p.session_id AS previous_session_id, b.session_id = p.session_id AS same_session,
       b.arrival_rank
FROM _workload_block_reads AS b
JOIN _workload_reuse_requests AS p
    ON p.run_id = b.run_id AND p.arrival_rank = b.previous_rank;

-- @view workload_reuses
-- One row per reuse of a block (a read of a hash id an earlier arrival read), with its
-- previous read, in arrival order.  In the header example: three rows, reuse times 5, 5
-- and 0 s.
-- @column run_id                the run
-- @column request_idx           the reusing request (its data row)
-- @column position              the block's place in the request's hash_ids (from 1)
-- @column hash_id               the block
-- @column arrival_s             the reusing request's arrival
-- @column request_type          its type (NULL when the trace has none)
-- @column turn                  its turn: the trace's, else its place in its session (NULL without either)
-- @column turn_kind             single_turn, first_turn or follow_up (NULL: the trace records no turn, session or parent)
-- @column session_id            its session
-- @column previous_request_idx  the latest earlier arrival that read the block
-- @column previous_arrival_s    that request's arrival
-- @column reuse_time_s          arrival_s - previous_arrival_s
-- @column previous_session_id   that request's session
-- @column same_session          true: in-session; false: cross-session; NULL when either has no session
CREATE VIEW workload_reuses AS
SELECT * EXCLUDE (arrival_rank)
FROM _workload_reuse_reads
ORDER BY run_id, arrival_rank, position;

-- @view workload_reuse_time
-- The distribution of reuse times per request type and turn of the reusing request
-- (quantiles interpolated).  In the header example: text, turn 2: 2 reuses of 5 s;
-- image, turn 1: 1 reuse of 0 s.
-- @column run_id        the run
-- @column request_type  the reusing request's type (NULL: none recorded)
-- @column turn          its turn (NULL: none recorded or derived)
-- @column reuses        reuses of the group
-- @column mean_s        mean reuse time in seconds
-- @column p50_s         median reuse time
-- @column p90_s         90th percentile of the reuse times
-- @column p99_s         99th percentile of the reuse times
CREATE VIEW workload_reuse_time AS
WITH times AS (
    SELECT run_id, request_type, turn, count(*) AS reuses, avg(reuse_time_s) AS mean_s,
           quantile_cont(reuse_time_s, [0.5, 0.9, 0.99]) AS q
    FROM _workload_reuse_reads
    GROUP BY run_id, request_type, turn
)
SELECT run_id, request_type, turn, reuses, mean_s, q[1] AS p50_s, q[2] AS p90_s,
       q[3] AS p99_s
FROM times
ORDER BY run_id, request_type, turn;

-- @view _workload_block_ranks
-- Every distinct block of a run with hashes: its reuses, its rank by reuses (1: the most
-- reused; equal counts in any order) and the reuses of the blocks ranked up to it.
CREATE VIEW _workload_block_ranks AS
WITH per_block AS (
    SELECT run_id, hash_id, count(previous_rank) AS reuses
    FROM _workload_block_reads
    GROUP BY run_id, hash_id
)
SELECT run_id, reuses, row_number() OVER w AS block_rank,
       sum(reuses) OVER (w ROWS UNBOUNDED PRECEDING) AS cumulative_reuses,
       count(*) OVER (PARTITION BY run_id) AS blocks,
       sum(reuses) OVER (PARTITION BY run_id) AS total_reuses
FROM per_block
WINDOW w AS (PARTITION BY run_id ORDER BY reuses DESC);

-- @view workload_reuse_lorenz
-- The concentration of reuses on blocks, per run: for x = 1 %, 2 %, ... 100 % of the
-- distinct blocks (blocks never reused included), the share of all reuses the top x %
-- take, the most reused first, x % of the blocks rounded up to a whole block.  (The
-- Lorenz curve L read from the top: reuse_share(x) = 1 - L(1 - x).)  In the header
-- example 4 blocks take 3 reuses (2, 1, 0, 0): 1 % to 25 % of the blocks is the top
-- block, 2/3; 26 % to 50 % two blocks, 3/3.
-- @column run_id        the run
-- @column block_share   x: the share of blocks, 0.01 to 1
-- @column top_blocks    ceil(x x blocks): the most reused blocks it counts
-- @column reuse_share   their reuses / all reuses (NULL without reuses)
CREATE VIEW workload_reuse_lorenz AS
WITH points AS (
    SELECT unnest(range(1, 101)) AS percent
)
SELECT r.run_id, p.percent / 100 AS block_share, r.block_rank AS top_blocks,
       r.cumulative_reuses / nullif(r.total_reuses, 0) AS reuse_share
FROM _workload_block_ranks AS r
JOIN points AS p ON r.block_rank = (p.percent * r.blocks + 99) // 100
ORDER BY r.run_id, p.percent;

-- @view workload_reuse_skew
-- How skewed reuse is, per run: the share of reuses the top 1 % and 10 % of blocks take
-- (as workload_reuse_lorenz counts them; the ATC'25 study reports 77 % for the top 10 %
-- on Bailian's traces), the smallest share of blocks that takes 80 % of the reuses, and
-- the Gini coefficient of reuses over blocks.  In the header example: 4 blocks, 2
-- reused, 3 reuses; top 1 % and top 10 % (1 block) 2/3; 80 % of the reuses needs 2
-- blocks (0.5); Gini (3 x 2 + 1 x 1) / (4 x 3) = 0.583.
-- @column run_id               the run
-- @column blocks               distinct blocks
-- @column reused_blocks        blocks reused at least once
-- @column reuses               reuses, all blocks together
-- @column top_1pct_share       share of the reuses the top 1 % of blocks take
-- @column top_10pct_share      share of the reuses the top 10 % of blocks take
-- @column blocks_for_80pct     the fewest blocks (a share of all) taking 80 % of the reuses
-- @column gini                 Gini coefficient of the blocks' reuse counts (0: even, towards 1: a few take all)
CREATE VIEW workload_reuse_skew AS
SELECT run_id, any_value(blocks) AS blocks,
       count(*) FILTER (WHERE reuses > 0) AS reused_blocks,
       any_value(total_reuses) AS reuses,
       any_value(cumulative_reuses) FILTER (WHERE block_rank = (blocks + 99) // 100)
           / nullif(any_value(total_reuses), 0) AS top_1pct_share,
       any_value(cumulative_reuses) FILTER (WHERE block_rank = (blocks + 9) // 10)
           / nullif(any_value(total_reuses), 0) AS top_10pct_share,
       min(block_rank) FILTER (WHERE cumulative_reuses >= 0.8 * total_reuses AND reuses > 0)
           / any_value(blocks) AS blocks_for_80pct,
       sum((blocks + 1 - 2 * block_rank) * reuses)
           / nullif(any_value(blocks) * any_value(total_reuses), 0) AS gini
FROM _workload_block_ranks
GROUP BY run_id
ORDER BY run_id;

-- @view workload_reuse_kinds
-- Who reuses blocks and whose blocks, per run and type of the reusing request: reuses
-- of single-turn requests, of first turns and of follow-ups, and in-session against
-- cross-session reuses (see the definitions above).  In the header example: text, 2
-- follow-up reuses, both in-session; image, 1 single-turn reuse, cross-session.
-- @column run_id                the run
-- @column request_type          the reusing request's type (NULL: none recorded)
-- @column reuses                reuses
-- @column single_turn_reuses    ... by single-turn requests
-- @column first_turn_reuses     ... by the first turn of a session of several
-- @column follow_up_reuses      ... by later turns (turn above 1, or a parent)
-- @column single_turn_share     single-turn reuses / reuses of a known turn kind
-- @column multi_turn_share      first-turn and follow-up reuses / reuses of a known turn kind
-- @column in_session_reuses     reuses whose previous read was by the same session
-- @column cross_session_reuses  reuses whose previous read was by another session
-- @column cross_session_share   cross-session / (in-session + cross-session) reuses
CREATE VIEW workload_reuse_kinds AS
SELECT run_id, request_type, count(*) AS reuses,
       count(*) FILTER (WHERE turn_kind = 'single_turn') AS single_turn_reuses,
       count(*) FILTER (WHERE turn_kind = 'first_turn') AS first_turn_reuses,
       count(*) FILTER (WHERE turn_kind = 'follow_up') AS follow_up_reuses,
       single_turn_reuses
           / nullif(single_turn_reuses + first_turn_reuses + follow_up_reuses, 0)
           AS single_turn_share,
       (first_turn_reuses + follow_up_reuses)
           / nullif(single_turn_reuses + first_turn_reuses + follow_up_reuses, 0)
           AS multi_turn_share,
       count(*) FILTER (WHERE same_session) AS in_session_reuses,
       count(*) FILTER (WHERE NOT same_session) AS cross_session_reuses,
       cross_session_reuses / nullif(in_session_reuses + cross_session_reuses, 0)
           AS cross_session_share
FROM _workload_reuse_reads
GROUP BY run_id, request_type
ORDER BY run_id, request_type;

-- @view workload_hit_rate_by_type
-- What an infinite cache serves per run and request type, the requests in arrival
-- order: blocks any earlier arrival read (a block cache), and the leading run of them
-- (a prefix cache, as workload_prefix_hits counts it), in blocks and in tokens.  Summed
-- over the types, seen and hit blocks are workload_prefix_reuse's; on traces whose hash
-- ids chain (a block's hash stands for its whole prefix, as in Mooncake's and Bailian's)
-- the token rate over all types is workload_prefix_tree's infinite_hit_rate.  In the
-- header example (16-token blocks, full): text 2 of 5 blocks, image 1 of 2.
-- @column run_id            the run
-- @column request_type      the type (NULL: none recorded)
-- @column requests          requests with hashes
-- @column blocks            blocks they read
-- @column seen_blocks       blocks an earlier arrival read
-- @column block_hit_rate    seen_blocks / blocks: an infinite block cache
-- @column hit_blocks        leading runs of seen blocks: an infinite prefix cache
-- @column hit_tokens        input tokens of those blocks
-- @column hashed_tokens     input tokens in hashed blocks
-- @column prefix_hit_rate   hit_tokens / hashed_tokens
CREATE VIEW workload_hit_rate_by_type AS
SELECT h.run_id, r.request_type, count(*) AS requests, sum(h.blocks) AS blocks,
       sum(h.seen_blocks) AS seen_blocks, sum(h.seen_blocks) / sum(h.blocks) AS block_hit_rate,
       sum(h.hit_blocks) AS hit_blocks, sum(h.hit_tokens) AS hit_tokens,
       sum(least(h.blocks * r.hash_block_tokens, r.input_tokens)) AS hashed_tokens,
       sum(h.hit_tokens) / nullif(hashed_tokens, 0) AS prefix_hit_rate
FROM workload_prefix_hits AS h
JOIN workload_requests AS r USING (run_id, request_idx)
GROUP BY h.run_id, r.request_type
ORDER BY h.run_id, r.request_type;
