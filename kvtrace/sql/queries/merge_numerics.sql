-- Merge numerics: how far chunked attention's merged output and LSE stray from a
-- reference, against the number of chunks merged, and beside the runs' accuracy.
--
-- merge_numerics holds one row per (run, layer, chunk count, merge step, method), ingested
-- from JSONL (`kvtrace ingest numerics.jsonl`, family numerics; the record format is in
-- docs/guides/needle-recall.md): the maximum and mean absolute difference of the LSE and
-- of the output against the reference (full attention).  A row with no merge step was
-- measured after all chunks - 1 merges.  Maxima are maxima over layers, means are means
-- over layers of each layer's mean (no percentiles).  A numerics file ingested under an
-- evaluation's run name shares its run_id, so merge_error_runs joins eval_accuracy by
-- run_id.
--
-- Worked example: run r, merge pairwise, final rows (no merge step) layer 0 chunks 4
-- out_max_diff 0.01 out_mean_diff 0.001, layer 1 chunks 4 out_max_diff 0.03
-- out_mean_diff 0.003, layer 0 chunks 32 out_max_diff 0.2 out_mean_diff 0.02.
-- merge_error_by_chunks: chunks 4 -> layers 2, out_max_diff 0.03, out_mean_diff 0.002,
-- out_max_growth 1; chunks 32 -> layers 1, out_max_diff 0.2, out_mean_diff 0.02,
-- out_max_growth 0.2 / 0.03 = 6.67.  merge_error_runs: max_chunks 32, out_max_diff 0.2,
-- out_mean_diff (0.001 + 0.003 + 0.02) / 3 = 0.008.
--
-- @requires runs.sql

-- @view merge_numerics
-- One measured difference against the reference per row (one row per run, layer, chunk
-- count, merge step and method).
-- @column run_id         the run
-- @column layer_id       the layer (NULL: a kernel test outside a model)
-- @column chunks         key/value chunks merged into the output
-- @column merge_step     merges done when measured, 1 to chunks - 1 (NULL: all of them)
-- @column method         the merge's name, e.g. pairwise, nway, hierarchical (NULL when not given)
-- @column dtype          the data type computed in, when given
-- @column lse_max_diff   max |LSE - reference LSE| (natural-log units)
-- @column lse_mean_diff  mean |LSE - reference LSE|
-- @column out_max_diff   max |output - reference output| (the output's units)
-- @column out_mean_diff  mean |output - reference output|
CREATE VIEW merge_numerics AS
SELECT * EXCLUDE (_row)
FROM (
    SELECT *, row_number() OVER (
        PARTITION BY run_id, layer_id, chunks, merge_step, method) AS _row
    FROM _merge_numerics_files
)
WHERE _row = 1;

-- @view merge_error_by_chunks
-- Error against the number of chunks: the differences after all merges, per run, merge
-- method, dtype and chunk count, over the layers measured.
-- @column run_id          the run
-- @column run_name        its name
-- @column method          the merge's name (NULL when not given)
-- @column dtype           the data type (NULL when not given)
-- @column chunks          key/value chunks merged
-- @column layers          rows (layers) behind the row
-- @column lse_max_diff    max over layers of max |LSE - reference|
-- @column lse_mean_diff   mean over layers of mean |LSE - reference|
-- @column out_max_diff    max over layers of max |output - reference|
-- @column out_mean_diff   mean over layers of mean |output - reference|
-- @column out_max_growth  out_max_diff / out_max_diff at the fewest chunks of the same run, method and dtype
CREATE VIEW merge_error_by_chunks AS
WITH final AS (
    SELECT run_id, method, dtype, chunks,
           count(*) AS layers,
           max(lse_max_diff) AS lse_max_diff, avg(lse_mean_diff) AS lse_mean_diff,
           max(out_max_diff) AS out_max_diff, avg(out_mean_diff) AS out_mean_diff
    FROM merge_numerics
    WHERE merge_step IS NULL OR merge_step = chunks - 1
    GROUP BY run_id, method, dtype, chunks
)
SELECT f.run_id, r.run_name, f.method, f.dtype, f.chunks, f.layers,
       f.lse_max_diff, f.lse_mean_diff, f.out_max_diff, f.out_mean_diff,
       f.out_max_diff / nullif(first(f.out_max_diff) OVER (
           PARTITION BY f.run_id, f.method, f.dtype ORDER BY f.chunks), 0) AS out_max_growth
FROM final AS f
LEFT JOIN (SELECT run_id, any_value(run_name) AS run_name FROM runs GROUP BY run_id) AS r
    USING (run_id)
ORDER BY f.run_id, f.method, f.dtype, f.chunks;

-- @view merge_error_by_step
-- Error as merges accumulate inside one chunked computation: per run, method, dtype,
-- chunk count and merges done (a row with no merge step counts as chunks - 1 merges).
-- @column run_id         the run
-- @column method         the merge's name (NULL when not given)
-- @column dtype          the data type (NULL when not given)
-- @column chunks         key/value chunks of the computation
-- @column merges         merges done when measured
-- @column layers         rows (layers) behind the row
-- @column lse_max_diff   max over layers of max |LSE - reference|
-- @column lse_mean_diff  mean over layers of mean |LSE - reference|
-- @column out_max_diff   max over layers of max |output - reference|
-- @column out_mean_diff  mean over layers of mean |output - reference|
CREATE VIEW merge_error_by_step AS
SELECT run_id, method, dtype, chunks, coalesce(merge_step, chunks - 1) AS merges,
       count(*) AS layers,
       max(lse_max_diff) AS lse_max_diff, avg(lse_mean_diff) AS lse_mean_diff,
       max(out_max_diff) AS out_max_diff, avg(out_mean_diff) AS out_mean_diff
FROM merge_numerics
GROUP BY run_id, method, dtype, chunks, merges
ORDER BY run_id, method, dtype, chunks, merges;

-- @view merge_error_runs
-- One row per run: its largest merge error after all merges, to join eval_accuracy by
-- run_id ("does accuracy fall as merge error grows?").
-- @column run_id         the run
-- @column run_name       its name
-- @column methods        the merge methods measured, comma-separated
-- @column max_chunks     the most chunks merged
-- @column lse_max_diff   max over its final rows of max |LSE - reference|
-- @column lse_mean_diff  mean over its final rows of mean |LSE - reference|
-- @column out_max_diff   max over its final rows of max |output - reference|
-- @column out_mean_diff  mean over its final rows of mean |output - reference|
CREATE VIEW merge_error_runs AS
SELECT n.run_id, any_value(r.run_name) AS run_name,
       string_agg(DISTINCT n.method, ', ' ORDER BY n.method) AS methods,
       max(n.chunks) AS max_chunks,
       max(n.lse_max_diff) AS lse_max_diff, avg(n.lse_mean_diff) AS lse_mean_diff,
       max(n.out_max_diff) AS out_max_diff, avg(n.out_mean_diff) AS out_mean_diff
FROM merge_numerics AS n
LEFT JOIN (SELECT run_id, any_value(run_name) AS run_name FROM runs GROUP BY run_id) AS r
    USING (run_id)
WHERE n.merge_step IS NULL OR n.merge_step = n.chunks - 1
GROUP BY n.run_id
ORDER BY n.run_id;
