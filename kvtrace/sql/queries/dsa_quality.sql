-- Invariant checks over the stored DSA traces: what a careful reader would verify by hand.
--
-- @requires dsa_steps.sql
-- @requires runs.sql

-- @view dsa_quality
-- One row per (run, check) that found violations; an empty result means every check passed.
-- Checks: duplicate_row (the same request, step, layer and stored block size twice),
-- seq_len_not_step_plus_one, more_than_topk, fewer_than_min_topk_seq_len (a selection
-- shorter than min(topk, seq_len)), incomplete_step (a step with fewer layers than
-- the run's usual count), quarantined_lines and source_stat_disagreement (from ingest).
-- @column run_id      the run
-- @column check_name  which invariant
-- @column violations  rows (or lines) that break it
-- @column example     one offending key or detail
CREATE VIEW dsa_quality AS
WITH keyed AS (
    SELECT run_id, block_size, request_id, step_idx, layer_id, count(*) AS copies
    FROM dsa_steps
    GROUP BY ALL
    HAVING count(*) > 1
), layers_per_step AS (
    SELECT run_id, block_size, request_id, step_idx, count(DISTINCT layer_id) AS layers
    FROM dsa_steps
    GROUP BY ALL
), usual AS (
    SELECT run_id, block_size, max(layers) AS layers FROM layers_per_step GROUP BY ALL
), found AS (
    SELECT run_id, 'duplicate_row' AS check_name, sum(copies - 1) AS violations,
           min(format('request {} step {} layer {}', request_id, step_idx, layer_id)) AS example
    FROM keyed GROUP BY run_id
    UNION ALL
    SELECT run_id, 'seq_len_not_step_plus_one', count(*),
           min(format('request {} step {} seq_len {}', request_id, step_idx, seq_len))
    FROM dsa_steps WHERE seq_len <> step_idx + 1 GROUP BY run_id
    UNION ALL
    SELECT run_id, 'more_than_topk', count(*),
           min(format('request {} step {} layer {}: {} > {}', request_id, step_idx, layer_id,
                      len(selected_pos), topk))
    FROM dsa_steps WHERE len(selected_pos) > topk GROUP BY run_id
    UNION ALL
    SELECT run_id, 'fewer_than_min_topk_seq_len', count(*),
           min(format('request {} step {} layer {}: {} < {}', request_id, step_idx, layer_id,
                      len(selected_pos), least(topk, seq_len)))
    FROM dsa_steps
    WHERE topk IS NOT NULL AND len(selected_pos) < least(topk, seq_len)
    GROUP BY run_id
    UNION ALL
    SELECT l.run_id, 'incomplete_step', count(*),
           min(format('request {} step {}: {} of {} layers', l.request_id, l.step_idx,
                      l.layers, u.layers))
    FROM layers_per_step AS l JOIN usual AS u USING (run_id, block_size)
    WHERE l.layers < u.layers GROUP BY l.run_id
    UNION ALL
    SELECT run_id, 'quarantined_lines', count(*),
           min(format('{}:{}: {}', source_path, line_no, reason))
    FROM quarantine GROUP BY run_id
    UNION ALL
    SELECT run_id, 'source_stat_disagreement', sum(rows_disagreeing),
           min(format('{} in {} (line {}: source {} vs {})', statistic, source_path,
                      first_line, source_value, recomputed_value))
    FROM ingest_checks GROUP BY run_id
)
SELECT * FROM found ORDER BY run_id, check_name;
