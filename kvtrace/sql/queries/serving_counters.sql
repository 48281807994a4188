-- The serving engines' own counters in kvtrace's terms: vLLM's, SGLang's and LMCache's
-- Prometheus metrics (engine_metrics) mapped onto named quantities with their per-scrape
-- increases, and a warning when a run met a cache an earlier run of its experiment had
-- warmed.
--
-- engine_metric_map (engine_metric_maps.sql, generated from
-- kvtrace/collectors/engine_metric_maps.py) says which engine metric, as the engine names
-- it, gives which quantity with which unit.  serving_counters
-- has one row per (run, worker, scrape, quantity, part): the series of one quantity are
-- combined over their other labels (model, engine index, ranks) by the map's `combine`
-- (sum; mean for shares; max for a count every rank reports alike), and a label the map
-- names (`split_by`: vLLM's transfer_type, SGLang's cache_source, ...) keeps its values
-- apart as `part`.  A counter's `delta` is the sum of its series' increases since their
-- previous scrape (engine_counter_deltas: a drop is a restart of the engine, the increase
-- is then the new value), so a run's own traffic is the sum of its deltas, whatever the
-- counters held when the run began.
--
-- Worked example (serving_counters): worker w scrapes a vLLM server with two engine cores
-- (label engine="0" and "1") at t = 0, 10 and 20 s.  vllm:prefix_cache_hits_total reads
-- engine 0: 100, 160, 40 (core 0 restarted between 10 and 20 s) and engine 1: 50, 70, 90.
-- prefix_cache_hit_tokens: t = 0: value 150, delta NULL (no earlier scrape); t = 10: value
-- 230, delta 60 + 20 = 80; t = 20: value 130, delta 40 (a reset: 40 < 160) + 20 = 60,
-- reset true.  The run's hits are 80 + 60 = 140.  vllm:kv_cache_usage_perc 0.2 and 0.4
-- at one scrape give kv_usage_share 0.3 (combine mean).
--
-- Worked example (serving_warm_cache_runs): runs A (started 10:00) and B (11:00) of
-- experiment exp1 replayed one trace: B's workload_requests hold prompt-block hashes
-- {1, 2, 3, 4}, A's {1, 2, 3, 9}.  B repeats 3 of its 4 hashes (overlap 0.75).  A's
-- vLLM deltas add up to 300 hit of 1,000 queried tokens (0.30), B's to 800 of 1,000
-- (0.80): a jump of 0.50 >= 0.20 with an overlap >= 0.50, so the row warns that B met a
-- cache A warmed.

-- @requires engine_metrics.sql
-- @requires engine_metric_maps.sql
-- @requires runs.sql
-- @requires kv_events.sql
-- @requires request.sql
-- @requires timing.sql
-- @requires workload.sql

-- @view serving_counters
-- One row per (run, worker, scrape, quantity, part): an engine metric in kvtrace's terms.
-- @column run_id      the run
-- @column experiment  experiment label
-- @column worker_id   the scraped endpoint's name
-- @column ts          when the scrape was taken (UTC)
-- @column t_s         seconds since the run's first scrape
-- @column engine      vllm, sglang or lmcache
-- @column quantity    kvtrace's name for it (engine_metric_map)
-- @column part        the value of the map's split_by label (e.g. GPU_to_CPU), NULL when none
-- @column unit        tokens, requests, share (0-1), blocks, bytes, seconds, events, ...
-- @column kind        counter or gauge
-- @column value       the value at the scrape, the series combined (a counter's runs from the engine's start)
-- @column delta       counters: the increase since the previous scrape, resets handled (NULL on the first)
-- @column reset       counters: whether a series restarted from 0 since the previous scrape
-- @column series      how many series (label sets) were combined
CREATE VIEW serving_counters AS
WITH mapped AS (
    SELECT e.run_id, e.experiment, e.worker_id, e.ts, e.t_s, m.engine, m.quantity, m.unit,
           m.kind, m.combine,
           CASE WHEN m.split_by IS NOT NULL THEN e.labels->>m.split_by END AS part,
           CASE WHEN m.value_label IS NULL THEN e.value
                ELSE TRY_CAST(e.labels->>m.value_label AS DOUBLE) END AS value,
           d.delta, d.reset
    FROM engine_metrics AS e
    JOIN engine_metric_map AS m ON e.metric = m.sample
    LEFT JOIN engine_counter_deltas AS d
        ON m.kind = 'counter' AND d.run_id = e.run_id AND d.worker_id = e.worker_id
       AND d.metric = e.metric AND d.labels = e.labels AND d.ts = e.ts
)
SELECT run_id, any_value(experiment) AS experiment, worker_id, ts, min(t_s) AS t_s, engine,
       quantity, part, any_value(unit) AS unit, any_value(kind) AS kind,
       CASE any_value(combine)
           WHEN 'mean' THEN avg(value) WHEN 'max' THEN max(value) ELSE sum(value) END AS value,
       CASE any_value(combine) WHEN 'max' THEN max(delta) ELSE sum(delta) END AS delta,
       CASE WHEN any_value(kind) = 'counter' THEN coalesce(bool_or(reset), false) END AS reset,
       count(*) AS series
FROM mapped
GROUP BY run_id, worker_id, ts, engine, quantity, part
ORDER BY run_id, worker_id, ts, engine, quantity, part;

-- @view _serving_run_hit_rates
-- Per run: prompt tokens looked up and found in a prefix cache, from the engines' counter
-- deltas (vLLM: prefix_cache_hit / query tokens; SGLang: cached / prompt tokens; LMCache:
-- retrieve hit / query tokens), else from request_metrics' or request_timings' cached
-- tokens over their input tokens; and when the run began (runs.started_at, else its first
-- scrape; a run whose start is unknown is paired with none).
CREATE VIEW _serving_run_hit_rates AS
WITH per_engine AS (
    SELECT run_id, engine, any_value(experiment) AS experiment,
           sum(delta) FILTER (WHERE quantity = CASE engine
               WHEN 'vllm' THEN 'prefix_cache_hit_tokens'
               WHEN 'sglang' THEN 'cached_prompt_tokens_by_tier'
               ELSE 'retrieve_hit_tokens' END) AS hit_tokens,
           sum(delta) FILTER (WHERE quantity = CASE engine
               WHEN 'vllm' THEN 'prefix_cache_query_tokens'
               WHEN 'sglang' THEN 'prompt_tokens'
               ELSE 'retrieve_query_tokens' END) AS query_tokens
    FROM serving_counters
    WHERE kind = 'counter'
    GROUP BY run_id, engine
), counted AS (  -- the serving engine's own cache first: vLLM, SGLang, then LMCache
    SELECT run_id, any_value(experiment) AS experiment,
           arg_min(hit_tokens / query_tokens, CASE engine WHEN 'vllm' THEN 0
               WHEN 'sglang' THEN 1 ELSE 2 END) FILTER (WHERE query_tokens > 0) AS hit_rate
    FROM per_engine
    GROUP BY run_id
), requested AS (
    SELECT run_id, any_value(experiment) AS experiment, sum(cached_tokens) AS hit_tokens,
           sum(input_tokens) FILTER (WHERE cached_tokens IS NOT NULL) AS query_tokens
    FROM request_metrics GROUP BY run_id
    UNION ALL
    SELECT run_id, NULL, sum(cached_tokens),
           sum(input_tokens) FILTER (WHERE cached_tokens IS NOT NULL)
    FROM request_timings GROUP BY run_id
), recorded AS (
    SELECT run_id, any_value(experiment) AS experiment,
           sum(hit_tokens) / nullif(sum(query_tokens), 0) AS hit_rate
    FROM requested GROUP BY run_id
), scraped AS (
    SELECT run_id, min(ts) AS began FROM engine_metrics GROUP BY run_id
), run_ids AS (
    SELECT run_id FROM counted UNION SELECT run_id FROM recorded
)
SELECT i.run_id,
       coalesce(c.experiment, q.experiment, r.collector_config->>'experiment', r.run_name)
           AS experiment,
       coalesce(r.started_at, e.began) AS began,
       CASE WHEN c.hit_rate IS NOT NULL THEN 'engine counters'
            WHEN q.hit_rate IS NOT NULL THEN 'request records' END AS source,
       coalesce(c.hit_rate, q.hit_rate) AS hit_rate
FROM run_ids AS i
LEFT JOIN counted AS c USING (run_id)
LEFT JOIN recorded AS q USING (run_id)
LEFT JOIN scraped AS e USING (run_id)
LEFT JOIN runs AS r USING (run_id);

-- @view _serving_run_prompt_hashes
-- Per run, the distinct prompt fingerprints it saw: the prefix-block hashes of its
-- workload_requests, the block hashes its engines stored (kv_events), the prefix keys of
-- its requests; each kept apart by its source, so only like compares with like.
CREATE VIEW _serving_run_prompt_hashes AS
SELECT DISTINCT run_id, 'workload:' || CAST(unnest(hash_ids) AS VARCHAR) AS fingerprint
FROM workload_requests WHERE hash_ids IS NOT NULL
UNION
SELECT DISTINCT run_id, 'kv:' || block_hash
FROM kv_events WHERE kind = 'stored' AND block_hash IS NOT NULL
UNION
SELECT DISTINCT run_id, 'prefix:' || prefix_key FROM requests WHERE prefix_key IS NOT NULL;

-- @macro serving_warm_cache(min_overlap, min_jump)
-- Every pair of runs of one experiment, the later one beside each earlier one: the share
-- of the later run's prompt fingerprints (prefix-block hashes, stored KV block hashes or
-- prompt prefix keys) the earlier run saw, both runs' prefix-cache hit rates, and a
-- warning when the later run repeats at least `min_overlap` (default 0.5) of them and its
-- hit rate exceeds the earlier run's by at least `min_jump` (default 0.2): it most likely
-- met a cache the earlier run had warmed (restart the server or reset its prefix cache
-- between runs, e.g. vLLM's POST /reset_prefix_cache, SGLang's /flush_cache).
-- @column experiment           the experiment both runs belong to
-- @column earlier_run          the run that began first
-- @column later_run            the run that began after it
-- @column later_fingerprints   distinct prompt fingerprints of the later run (NULL: none recorded)
-- @column overlap_share        share of them the earlier run saw too (NULL: no fingerprints)
-- @column earlier_hit_rate     the earlier run's prefix-cache hit rate (0-1)
-- @column later_hit_rate       the later run's prefix-cache hit rate (0-1)
-- @column hit_rate_jump        later - earlier hit rate
-- @column hit_rate_source      engine counters or request records (the later run's)
-- @column warning              a sentence when both thresholds are met, else NULL
CREATE MACRO serving_warm_cache(min_overlap := 0.5, min_jump := 0.2) AS TABLE
WITH pairs AS (
    SELECT a.experiment, a.run_id AS earlier_run, b.run_id AS later_run,
           a.hit_rate AS earlier_hit_rate, b.hit_rate AS later_hit_rate,
           b.source AS hit_rate_source
    FROM _serving_run_hit_rates AS a
    JOIN _serving_run_hit_rates AS b
      ON a.experiment = b.experiment
     AND (a.began < b.began OR (a.began = b.began AND a.run_id < b.run_id))
), shared AS (
    SELECT p.earlier_run, p.later_run, count(*) AS later_fingerprints,
           count(e.fingerprint) AS repeated
    FROM pairs AS p
    JOIN _serving_run_prompt_hashes AS l ON l.run_id = p.later_run
    LEFT JOIN _serving_run_prompt_hashes AS e
      ON e.run_id = p.earlier_run AND e.fingerprint = l.fingerprint
    GROUP BY p.earlier_run, p.later_run
), judged AS (
    SELECT p.experiment, p.earlier_run, p.later_run, s.later_fingerprints,
           s.repeated / s.later_fingerprints AS overlap_share, p.earlier_hit_rate,
           p.later_hit_rate, p.later_hit_rate - p.earlier_hit_rate AS hit_rate_jump,
           p.hit_rate_source
    FROM pairs AS p LEFT JOIN shared AS s USING (earlier_run, later_run)
)
SELECT *,
       CASE WHEN overlap_share >= min_overlap AND hit_rate_jump >= min_jump THEN printf(
           'run %s repeats %.0f%% of the prompt blocks of run %s and its prefix-cache hit '
           || 'rate rose from %.0f%% to %.0f%%: it likely met a cache the earlier run warmed; '
           || 'reset the prefix cache or restart the server between runs',
           later_run, 100 * overlap_share, earlier_run, 100 * earlier_hit_rate,
           100 * later_hit_rate) END AS warning
FROM judged
ORDER BY experiment, later_run, earlier_run;

-- @view serving_warm_cache_runs
-- serving_warm_cache with its defaults (overlap 0.5, jump 0.2).
-- @columns_of serving_warm_cache
CREATE VIEW serving_warm_cache_runs AS SELECT * FROM serving_warm_cache();
