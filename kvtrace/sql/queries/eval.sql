-- Evaluation outputs: accuracy, error classes, run-to-run diffs and needle recall.
--
-- eval_samples holds one scored sample per row, from RULER prediction files
-- (`kvtrace ingest <pred folder>`) or from `kvtrace collect dsa --dataset ruler`, which
-- scores the model's answers the same way and links each sample to its traced request.
-- Scores follow RULER: string_match_all (the share of references found in the
-- prediction, ignoring case) for needle, variable-tracking and word-extraction tasks,
-- string_match_part (1 when any reference is found) for QA; a sample is right when its
-- score is 1.  Error classes (kvtrace/warehouse/rows/eval.py) are, first rule that
-- applies: empty (nothing but punctuation and end-of-text markers), format (every
-- reference appears once spaces and punctuation are removed), repetition_loop (the
-- prediction's letters and digits repeat a pattern of 1 to 8 characters at least 3 times
-- in a row, the copies covering at least 8 characters: `:361361361...`, `: 500b 500b
-- 500b`, not `: 29351113.`), partial (some references of several, or a piece of a
-- reference at least half its length), wrong_value.  Classes are set when a sample is
-- scored: samples ingested before repetition_loop existed keep theirs until ingested
-- into a new run.
--
-- Worked example of needle recall at B = 4: a needle value spans tokens 10..13 and its
-- key tokens 4..5, so the needle tokens are {4, 5, 10, 11, 12, 13} and the needle blocks
-- {1, 2, 3}.  A selection {0, 5, 11, 30} holds 2 of the 6 needle tokens (recall 0.333)
-- and touches blocks {0, 1, 2, 7}: 2 of the 3 needle blocks (block recall 0.667).
--
-- @requires dsa_access.sql
-- @requires runs.sql

-- @view eval_samples
-- One scored evaluation sample per row (one row per run, task and sample index).
-- @column run_id           the run
-- @column task             RULER task, e.g. niah_single_1, qa_2 (the prediction file's name)
-- @column sample_index     the sample's index in its task
-- @column request_id       the traced request, for collected runs (NULL for ingested files)
-- @column context_length   the prompt's length in tokens, when known
-- @column prediction       the model's answer (NULL when it gave none)
-- @column answers          the reference answers
-- @column metric           string_match_all or string_match_part
-- @column score            RULER's per-sample score in [0, 1]
-- @column null_prediction  true when the prediction is missing
-- @column error_class      empty, format, repetition_loop, partial or wrong_value (NULL when right)
CREATE VIEW eval_samples AS
SELECT * EXCLUDE (_row)
FROM (
    SELECT *, row_number() OVER (PARTITION BY run_id, task, sample_index) AS _row
    FROM _eval_samples_files
)
WHERE _row = 1;

-- @view needle_spans
-- Where each traced prompt hid its needle, in token positions.
-- @column run_id       the run
-- @column request_id   the request
-- @column part         value (the answer) or key (what the question asks about)
-- @column text         the needle text at that span
-- @column token_start  first token position of the span
-- @column token_end    one past its last token position
CREATE VIEW needle_spans AS
SELECT DISTINCT * FROM _needle_spans_files;

-- @macro _eval_run(name_or_id)
-- The run id a name or id stands for: the id itself, else the latest run of that name.
CREATE MACRO _eval_run(name_or_id) AS (
    SELECT run_id FROM runs_named([name_or_id])
    ORDER BY by_id DESC, started_at DESC NULLS LAST
    LIMIT 1
);

-- @view eval_accuracy
-- Accuracy per run, task and context length (RULER's score is accuracy x 100).
-- @column run_id          the run
-- @column run_name        its name
-- @column task            the task
-- @column context_tokens  the context-length class: the power of two at or above the prompt length (NULL when unknown)
-- @column samples         samples scored
-- @column right_answers   samples with score 1
-- @column accuracy        mean score
-- @column ruler_score     mean score x 100, as RULER reports it
-- @column null_predictions  samples without a prediction
CREATE VIEW eval_accuracy AS
SELECT
    e.run_id, r.run_name, e.task,
    CASE WHEN e.context_length > 0
         THEN (2 ** ceil(log2(e.context_length)))::BIGINT END AS context_tokens,
    count(*) AS samples,
    count(*) FILTER (WHERE e.score >= 1) AS right_answers,
    avg(e.score) AS accuracy,
    round(avg(e.score) * 100, 2) AS ruler_score,
    count(*) FILTER (WHERE e.null_prediction) AS null_predictions
FROM eval_samples AS e
LEFT JOIN runs AS r USING (run_id)
GROUP BY e.run_id, r.run_name, e.task, context_tokens
ORDER BY e.run_id, e.task, context_tokens;

-- @view eval_error_classes
-- The mix of error classes among each task's wrong samples.
-- @column run_id       the run
-- @column task         the task
-- @column error_class  empty, format, repetition_loop, partial or wrong_value
-- @column samples      wrong samples of that class
-- @column share        their share of the task's wrong samples
CREATE VIEW eval_error_classes AS
SELECT run_id, task, error_class, count(*) AS samples,
       count(*) / sum(count(*)) OVER (PARTITION BY run_id, task) AS share
FROM eval_samples
WHERE error_class IS NOT NULL
GROUP BY run_id, task, error_class
ORDER BY run_id, task, samples DESC, error_class;

-- @view eval_errors
-- Every wrong sample, for reading by eye: what was expected and what came out.
-- @column run_id        the run
-- @column task          the task
-- @column sample_index  the sample
-- @column expected      the references, comma-separated
-- @column prediction    the prediction (its first 120 characters)
-- @column score         its score
-- @column error_class   empty, format, repetition_loop, partial or wrong_value
CREATE VIEW eval_errors AS
SELECT run_id, task, sample_index, array_to_string(answers, ', ') AS expected,
       left(prediction, 120) AS prediction, score, error_class
FROM eval_samples
WHERE score < 1
ORDER BY run_id, task, sample_index;

-- @macro eval_diff(run_a, run_b)
-- Sample by sample, what changed from run a to run b (runs by name or id); samples
-- present in both.
-- @column task          the task
-- @column sample_index  the sample
-- @column score_a       its score in run a
-- @column score_b       its score in run b
-- @column outcome       fixed (wrong in a, right in b), broken, still_wrong or still_right
-- @column prediction_a  run a's prediction
-- @column prediction_b  run b's prediction
CREATE MACRO eval_diff(run_a, run_b) AS TABLE
SELECT
    a.task, a.sample_index, a.score AS score_a, b.score AS score_b,
    CASE WHEN a.score < 1 AND b.score >= 1 THEN 'fixed'
         WHEN a.score >= 1 AND b.score < 1 THEN 'broken'
         WHEN a.score < 1 THEN 'still_wrong'
         ELSE 'still_right' END AS outcome,
    a.prediction AS prediction_a, b.prediction AS prediction_b
FROM eval_samples AS a
JOIN eval_samples AS b USING (task, sample_index)
WHERE a.run_id = _eval_run(run_a) AND b.run_id = _eval_run(run_b)
ORDER BY a.task, a.sample_index;

-- @macro _mcnemar_exact_p(b, c)
-- Exact two-sided McNemar p-value for b and c discordant pairs: twice the binomial
-- (n = b + c, p = 1/2) probability of a count at most min(b, c), capped at 1.
CREATE MACRO _mcnemar_exact_p(b, c) AS
    CASE WHEN b + c = 0 THEN 1.0 ELSE least(1.0, 2 * (
        SELECT sum(exp(lgamma(b + c + 1) - lgamma(i + 1) - lgamma(b + c - i + 1)
                       - (b + c) * ln(2)))
        FROM range(0, least(b, c) + 1) AS t(i))) END;

-- @macro eval_diff_summary(run_a, run_b)
-- Did run b fix what run a got wrong?  Outcome counts over the shared samples, both
-- accuracies, and the exact McNemar test on the discordant samples (fixed vs broken).
-- @column samples      samples in both runs
-- @column fixed        wrong in a, right in b
-- @column broken       right in a, wrong in b
-- @column still_wrong  wrong in both
-- @column still_right  right in both
-- @column accuracy_a   share right in run a
-- @column accuracy_b   share right in run b
-- @column mcnemar_p    exact two-sided McNemar p-value (binomial on fixed vs broken)
CREATE MACRO eval_diff_summary(run_a, run_b) AS TABLE
WITH counts AS (
    SELECT
        count(*) AS samples,
        count(*) FILTER (WHERE outcome = 'fixed') AS fixed,
        count(*) FILTER (WHERE outcome = 'broken') AS broken,
        count(*) FILTER (WHERE outcome = 'still_wrong') AS still_wrong,
        count(*) FILTER (WHERE outcome = 'still_right') AS still_right
    FROM eval_diff(run_a, run_b)
)
SELECT samples, fixed, broken, still_wrong, still_right,
       (broken + still_right) / nullif(samples, 0) AS accuracy_a,
       (fixed + still_right) / nullif(samples, 0) AS accuracy_b,
       _mcnemar_exact_p(fixed, broken) AS mcnemar_p
FROM counts;

-- @macro eval_needle_recall(bs)
-- @alias dsa_needle_recall
-- Per traced (request, step, layer): how much of the needle the top-k selection held,
-- as tokens and as blocks of bs tokens, beside the sample's score.  Runs stored at
-- several block sizes are read once, at the smallest.
-- @column run_id                   the run
-- @column request_id               the request
-- @column step_idx                 decode step (position being decoded)
-- @column layer_id                 the layer
-- @column needle_tokens            token positions inside needle spans
-- @column needle_tokens_selected   of those, positions the selection holds
-- @column needle_token_recall      needle_tokens_selected / needle_tokens
-- @column needle_blocks            blocks of bs tokens holding a needle token
-- @column needle_blocks_selected   of those, blocks the selection touches
-- @column needle_block_recall      needle_blocks_selected / needle_blocks
-- @column score                    the sample's score (NULL when it was not scored)
CREATE MACRO eval_needle_recall(bs) AS TABLE
WITH needles AS (
    SELECT run_id, request_id, _dsa_checked_block_size(bs) AS block_size,
           list_distinct(flatten(list(range(token_start, token_end)))) AS positions
    FROM needle_spans
    GROUP BY run_id, request_id
), counted AS (
    SELECT
        s.run_id, s.request_id, s.step_idx, s.layer_id,
        len(n.positions) AS needle_tokens,
        len(list_intersect(s.selected_pos, n.positions)) AS needle_tokens_selected,
        len(list_distinct(list_transform(n.positions, lambda p: p // n.block_size)))
            AS needle_blocks,
        len(list_intersect(
            list_distinct(list_transform(s.selected_pos, lambda p: p // n.block_size)),
            list_distinct(list_transform(n.positions, lambda p: p // n.block_size))))
            AS needle_blocks_selected
    FROM _dsa_access_rows AS s
    JOIN needles AS n USING (run_id, request_id)
    WHERE len(n.positions) > 0
)
SELECT
    c.run_id, c.request_id, c.step_idx, c.layer_id,
    c.needle_tokens, c.needle_tokens_selected,
    c.needle_tokens_selected / c.needle_tokens AS needle_token_recall,
    c.needle_blocks, c.needle_blocks_selected,
    c.needle_blocks_selected / c.needle_blocks AS needle_block_recall,
    e.score
FROM counted AS c
LEFT JOIN eval_samples AS e USING (run_id, request_id)
ORDER BY c.run_id, c.request_id, c.step_idx, c.layer_id;

-- @macro eval_needle_recall_by_layer(bs)
-- @alias dsa_needle_recall_by_layer
-- Needle recall per layer, for right answers (score 1) and wrong ones apart: did the
-- wrong answers see less of the needle, and at which layers?
-- @column run_id               the run
-- @column layer_id             the layer
-- @column answer               right, wrong or unscored
-- @column requests             requests behind the row
-- @column steps                traced (request, step) rows behind the row
-- @column needle_token_recall  mean share of needle tokens selected
-- @column needle_block_recall  mean share of needle blocks touched
-- @column full_block_recall    share of steps whose selection touched every needle block
CREATE MACRO eval_needle_recall_by_layer(bs) AS TABLE
SELECT
    run_id, layer_id,
    CASE WHEN score IS NULL THEN 'unscored' WHEN score >= 1 THEN 'right'
         ELSE 'wrong' END AS answer,
    count(DISTINCT request_id) AS requests,
    count(*) AS steps,
    avg(needle_token_recall) AS needle_token_recall,
    avg(needle_block_recall) AS needle_block_recall,
    avg((needle_block_recall = 1)::INTEGER) AS full_block_recall
FROM eval_needle_recall(bs)
GROUP BY run_id, layer_id, answer
ORDER BY run_id, layer_id, answer;
