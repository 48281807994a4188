-- Do the traced ranks of a multi-process DSA collection select alike?
--
-- Seed 000 traces rank 0 only because its model is tensor-parallel: every rank runs
-- every request and the indexer broadcasts rank 0's top-k and asserts that each rank
-- computed the same, so one rank's trace stands for all.  A collection traced on every
-- rank (`kvtrace.trace(..., all_ranks=True)`; each rank a run of its own, with its rank
-- and world_size in `runs`, under one run name) can check that claim: for every
-- (request, decode step, layer) that any traced rank of a run name holds, the lowest
-- rank holding it is the reference, and the row is reported when a traced rank lacks it
-- or selected other positions.  Ranks are compared at each run's smallest stored block
-- size (selected_pos is the same at every stored size).  Give each collection its own
-- run name: two collections under one name are compared as one.
-- Example: run name tp2, ranks 0 and 1 traced; request 3, step 100, layer 5: rank 0
-- selected [0, 7, 99], rank 1 [0, 8, 99] -> one row, reference_rank 0, differing_ranks
-- [1], missing_ranks []; layer 6 traced on rank 0 only -> one row, missing_ranks [1].
-- An empty result means every traced rank selected alike.
--
-- @requires dsa_steps.sql
-- @requires runs.sql

-- @view dsa_rank_disagreements
-- One row per (run name, request, decode step, layer) where the traced ranks disagree.
-- @column run_name         the collection's run name, shared by its ranks' runs
-- @column request_id       request
-- @column step_idx         decode position
-- @column layer_id         layer
-- @column traced_ranks     the ranks traced under the run name, ascending
-- @column reference_rank   the lowest rank that holds the row
-- @column missing_ranks    traced ranks without the row
-- @column differing_ranks  ranks whose selection differs from the reference rank's
CREATE VIEW dsa_rank_disagreements AS
WITH ranked AS (
    SELECT run_id, run_name, rank
    FROM runs
    WHERE kind = 'dsa' AND world_size > 1 AND rank IS NOT NULL
), traced AS (
    SELECT run_name, list(DISTINCT rank ORDER BY rank) AS traced_ranks
    FROM ranked
    GROUP BY run_name
    HAVING count(DISTINCT rank) > 1
), smallest AS (
    SELECT run_id, min(block_size) AS block_size FROM dsa_steps GROUP BY run_id
), compared AS (
    SELECT r.run_name, r.rank, s.request_id, s.step_idx, s.layer_id,
           first_value(r.rank) OVER w AS reference_rank,
           s.selected_pos IS DISTINCT FROM first_value(s.selected_pos) OVER w AS differs
    FROM dsa_steps AS s
    JOIN smallest USING (run_id, block_size)
    JOIN ranked AS r USING (run_id)
    SEMI JOIN traced USING (run_name)
    WINDOW w AS (PARTITION BY r.run_name, s.request_id, s.step_idx, s.layer_id ORDER BY r.rank)
), keyed AS (
    SELECT run_name, request_id, step_idx, layer_id,
           min(reference_rank) AS reference_rank,
           list(rank ORDER BY rank) AS present,
           coalesce(list(rank ORDER BY rank) FILTER (WHERE differs), []) AS differing_ranks
    FROM compared
    GROUP BY ALL
)
SELECT k.run_name, k.request_id, k.step_idx, k.layer_id, t.traced_ranks, k.reference_rank,
       list_filter(t.traced_ranks, lambda r: NOT list_contains(k.present, r)) AS missing_ranks,
       k.differing_ranks
FROM keyed AS k
JOIN traced AS t USING (run_name)
WHERE len(k.present) < len(t.traced_ranks) OR len(k.differing_ranks) > 0;
