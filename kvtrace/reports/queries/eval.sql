-- Queries of the eval report.  Every query reads only the runs in report_runs; the
-- needle-recall query works at getvariable('block_size') tokens.

-- @query accuracy
-- Accuracy per run, task and context-length class: samples, right answers, RULER's
-- score (mean score x 100) and samples without a prediction.
SELECT a.run_name AS run, a.task, a.context_tokens, a.samples, a.right_answers, a.ruler_score,
       a.null_predictions
FROM eval_accuracy AS a
WHERE a.run_id IN (SELECT run_id FROM report_runs)
ORDER BY run, a.task, a.context_tokens;

-- @query error_classes
-- The error-class mix of each run's wrong samples, all tasks together: run, error_class,
-- samples, share of the run's wrong samples.
SELECT r.run_name AS run, e.error_class, count(*) AS samples,
       count(*) / sum(count(*)) OVER (PARTITION BY e.run_id) AS share
FROM eval_samples AS e
JOIN report_runs AS r USING (run_id)
WHERE e.error_class IS NOT NULL
GROUP BY r.run_name, e.run_id, e.error_class
ORDER BY run, samples DESC;

-- @query errors
-- The wrong samples, as the error listing of a bug hunt: task, index, expected answer,
-- prediction (first 120 characters), error class.
SELECT r.run_name AS run, e.task, e.sample_index, e.expected, e.prediction, e.error_class
FROM eval_errors AS e
JOIN report_runs AS r USING (run_id)
ORDER BY run, e.task, e.sample_index;

-- @query diff
-- Between the first two selected runs (in the order given): outcome counts and the
-- exact McNemar p-value of fixed against broken samples.
SELECT getvariable('run_a') AS run_a, getvariable('run_b') AS run_b, *
FROM eval_diff_summary(getvariable('run_a'), getvariable('run_b'))
WHERE getvariable('run_b') IS NOT NULL;

-- @query needle_recall
-- Mean share of needle blocks the top-k touched, per layer, for right and wrong answers:
-- run, layer_id, answer, requests, needle_block_recall, needle_token_recall.
SELECT r.run_name AS run, n.layer_id, n.answer, n.requests, n.needle_block_recall,
       n.needle_token_recall
FROM eval_needle_recall_by_layer(getvariable('block_size')) AS n
JOIN report_runs AS r USING (run_id)
ORDER BY run, n.layer_id, n.answer;
