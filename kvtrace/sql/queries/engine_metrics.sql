-- Engines' own Prometheus metrics (`kvtrace collect metrics`, or saved scrapes read by
-- `kvtrace ingest`): every sample of every scrape, per-run counter increases and rates,
-- and histogram quantiles over time windows.
--
-- A row of engine_metrics is one sample as the engine exposed it: its name (`metric`,
-- e.g. vllm:prefix_cache_hits_total or vllm:e2e_request_latency_seconds_bucket), the
-- family it belongs to (`family`, e.g. vllm:prefix_cache_hits), its labels as JSON text
-- with sorted keys (`labels->>'le'` reads one), its value and the family's type.  A value
-- that is not a finite number (NaN, +Inf, -Inf) is NULL.  Every live scrape also gives
-- the series Prometheus adds to each scrape: `up` (1 when the scrape succeeded, else
-- 0), `scrape_duration_seconds`, `scrape_samples_scraped`, and on failure
-- `kvtrace_scrape_error` with the reason in its `error` label.
--
-- Counters run from the engine's start, not the run's: engine_counter_deltas gives each
-- scrape's increase over the previous scrape of the same series (run, worker, metric,
-- labels), with Prometheus' increase() semantics for resets: a value lower than the
-- previous one means the counter restarted from 0 (the engine restarted), so the
-- increase is the new value itself.  Unlike PromQL's increase() over a range, nothing
-- is extrapolated to the range's edges: the increases are exactly those between
-- scrapes, and a series' first scrape has none (NULL).  Counter series are the samples
-- of counter families (`..._total`) and the cumulative samples of histograms
-- (`_bucket`, `_count`, `_sum`) and summaries (`_count`, `_sum`).
--
-- Worked example (engine_counter_deltas): a worker's vllm:prefix_cache_hits_total reads
-- 100, 130, 130, 20, 50 at t = 0, 1, 2, 3, 4 s (the engine restarted between 2 and 3 s).
-- The deltas are NULL, 30, 0, 20 (a reset: 20 < 130, the increase is 20), 30;
-- engine_counter_totals gives increase 80 over 4 s, 20 per second, one reset.
--
-- Worked example (engine_histogram_quantiles(q := 0.5, window_s := 60)): in one window
-- the bucket counts of a latency histogram grew by le=0.1: 10, le=0.5: 30, le=1: 36,
-- le=+Inf: 40.  40 observations, rank 0.5 x 40 = 20: the first bucket whose count reaches
-- 20 is le=0.5, which holds 30 - 10 = 20 of them, the 10th of which (20 - 10) is the
-- rank; linear interpolation inside it gives 0.1 + (0.5 - 0.1) x 10 / 20 = 0.3 s, as
-- Prometheus' histogram_quantile(0.5, increase(..._bucket[60s])) computes it.

-- @view engine_metrics
-- One row per scraped Prometheus sample.
-- @column run_id      the run
-- @column experiment  experiment label (the run name when none was given)
-- @column worker_id   the endpoint's NAME (--endpoint NAME=URL), or the saved scrape's worker
-- @column ts          when the scrape was taken (UTC), or the sample's own timestamp
-- @column t_s         seconds since the run's first scrape
-- @column metric      the sample's name as exposed (counters end in _total)
-- @column family      the metric family's name
-- @column labels      the sample's labels, JSON object text with sorted keys ("{}": none)
-- @column value       the sample's value (NULL when not a finite number)
-- @column type        counter, gauge, histogram, summary, info, stateset, gaugehistogram or unknown
CREATE VIEW engine_metrics AS SELECT * FROM _engine_metrics_files;

-- @view engine_counter_deltas
-- Every scrape of every counter series with its increase over the series' previous
-- scrape (Prometheus' increase() semantics: a drop is a reset, the increase is then the
-- new value); NULL on a series' first scrape.
-- @column run_id          the run
-- @column experiment      experiment label
-- @column worker_id       the worker
-- @column metric          the sample's name (..._total, ..._bucket, ..._count, ..._sum)
-- @column family          the metric family's name
-- @column labels          the series' labels (JSON text)
-- @column type            counter, histogram or summary
-- @column ts              when the scrape was taken (UTC)
-- @column t_s             seconds since the run's first scrape
-- @column value           the counter's value, as exposed (it runs from the engine's start)
-- @column previous_value  the value at the series' previous scrape (NULL on its first)
-- @column interval_s      seconds since the series' previous scrape
-- @column delta           the increase since the previous scrape: value - previous, or value after a reset
-- @column reset           whether the value dropped (the counter restarted from 0)
-- @column rate_per_s      delta / interval_s
CREATE VIEW engine_counter_deltas AS
WITH series AS (
    SELECT run_id, experiment, worker_id, metric, family, labels, type, ts, t_s, value,
           lag(value) OVER scrapes AS previous_value,
           (epoch_us(ts) - epoch_us(lag(ts) OVER scrapes)) / 1e6 AS interval_s
    FROM engine_metrics
    WHERE value IS NOT NULL
      AND (type = 'counter'
           OR (type = 'histogram'
               AND metric IN (family || '_bucket', family || '_count', family || '_sum'))
           OR (type = 'summary' AND metric IN (family || '_count', family || '_sum')))
    WINDOW scrapes AS (PARTITION BY run_id, worker_id, metric, labels ORDER BY ts)
)
SELECT *,
       CASE WHEN value < previous_value THEN value ELSE value - previous_value END AS delta,
       value < previous_value AS reset,
       CASE WHEN value < previous_value THEN value ELSE value - previous_value END
           / nullif(interval_s, 0) AS rate_per_s
FROM series
ORDER BY run_id, worker_id, metric, labels, ts;

-- @view engine_counter_totals
-- Per run, worker and counter series: its increase over the run (the sum of the
-- scrape-to-scrape increases, resets handled) and its mean rate per second.
-- @column run_id       the run
-- @column experiment   experiment label
-- @column worker_id    the worker
-- @column metric       the sample's name
-- @column family       the metric family's name
-- @column labels       the series' labels (JSON text)
-- @column type         counter, histogram or summary
-- @column scrapes      scrapes of the series in the run
-- @column first_ts     its first scrape (UTC)
-- @column last_ts      its last scrape (UTC)
-- @column first_value  the value at the first scrape (what the engine had counted before the run)
-- @column last_value   the value at the last scrape
-- @column resets       times the counter restarted from 0 during the run
-- @column increase     the increase from the first to the last scrape (NULL with one scrape)
-- @column duration_s   seconds from the first to the last scrape
-- @column rate_per_s   increase / duration_s
CREATE VIEW engine_counter_totals AS
SELECT run_id, any_value(experiment) AS experiment, worker_id, metric, family, labels, type,
       count(*) AS scrapes, min(ts) AS first_ts, max(ts) AS last_ts,
       arg_min(value, ts) AS first_value, arg_max(value, ts) AS last_value,
       count(*) FILTER (WHERE reset) AS resets,
       sum(delta) AS increase,
       (epoch_us(max(ts)) - epoch_us(min(ts))) / 1e6 AS duration_s,
       sum(delta) / nullif((epoch_us(max(ts)) - epoch_us(min(ts))) / 1e6, 0) AS rate_per_s
FROM engine_counter_deltas
GROUP BY run_id, worker_id, metric, family, labels, type
ORDER BY run_id, worker_id, metric, labels;

-- @macro engine_histogram_quantiles(q, window_s)
-- The q-quantile (default 0.5) of every histogram per window of window_s seconds (default
-- 60) of each run, as Prometheus' histogram_quantile(q, increase(x_bucket[window]))
-- computes it: each bucket's increase in the window (the scrape-to-scrape increases of
-- the scrapes inside it, so the windows add up to the run), buckets of equal bound
-- merged and any decrease across bounds flattened (Prometheus also takes counts within
-- a relative 1e-12 of each other as equal; kvtrace does not), rank = q x observations, linear
-- interpolation inside the first bucket whose count reaches the rank (from 0, or from
-- the lowest bound when it is not above 0); a rank in the +Inf bucket gives the highest
-- finite bound.  NULL without observations in the window, without a +Inf bucket, or for
-- q outside [0, 1].
-- @column run_id          the run
-- @column worker_id       the worker
-- @column family          the histogram's family name
-- @column labels          its labels without le (JSON text)
-- @column t_s             the window's start, seconds since the run's first scrape
-- @column window_s        the window's length in seconds
-- @column q               the quantile asked for
-- @column observations    observations in the window (the +Inf bucket's increase)
-- @column quantile_value  the estimated q-quantile, in the histogram's unit
CREATE MACRO engine_histogram_quantiles(q := 0.5, window_s := 60) AS TABLE
WITH buckets AS (
    SELECT run_id, worker_id, family, json_merge_patch(labels, '{"le":null}') AS labels,
           floor(t_s / window_s) AS window_idx, CAST(labels->>'le' AS DOUBLE) AS le,
           sum(delta) AS increase
    FROM engine_counter_deltas
    WHERE type = 'histogram' AND metric = family || '_bucket' AND delta IS NOT NULL
    GROUP BY ALL
),
flattened AS (
    SELECT *, max(increase) OVER (
               PARTITION BY run_id, worker_id, family, labels, window_idx ORDER BY le
               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
           ) AS count_le
    FROM buckets
),
envelope AS (
    SELECT *, lag(le) OVER histogram AS lower_le, lag(count_le) OVER histogram AS count_below
    FROM flattened
    WINDOW histogram AS (PARTITION BY run_id, worker_id, family, labels, window_idx ORDER BY le)
),
histograms AS (
    SELECT run_id, worker_id, family, labels, window_idx,
           max(le) AS top_le, count(*) AS bucket_count,
           arg_max(count_le, le) AS observations,
           max(le) FILTER (WHERE le < 'Infinity'::DOUBLE) AS top_finite_le
    FROM envelope
    GROUP BY ALL
),
chosen AS (
    SELECT e.run_id, e.worker_id, e.family, e.labels, e.window_idx,
           arg_min(e, e.le) AS bucket
    FROM envelope e
    JOIN histograms h USING (run_id, worker_id, family, labels, window_idx)
    WHERE e.le < 'Infinity'::DOUBLE AND e.count_le >= q * h.observations
    GROUP BY ALL
)
SELECT h.run_id, h.worker_id, h.family, h.labels, h.window_idx * window_s AS t_s,
       CAST(window_s AS DOUBLE) AS window_s, CAST(q AS DOUBLE) AS q, h.observations,
       CASE
           WHEN q < 0 OR q > 1 OR h.top_le <> 'Infinity'::DOUBLE OR h.bucket_count < 2
                OR h.observations <= 0 THEN NULL
           WHEN c.bucket IS NULL THEN h.top_finite_le
           WHEN c.bucket.lower_le IS NULL AND c.bucket.le <= 0 THEN c.bucket.le
           ELSE coalesce(c.bucket.lower_le, 0)
                + (c.bucket.le - coalesce(c.bucket.lower_le, 0))
                  * (q * h.observations - coalesce(c.bucket.count_below, 0))
                  / nullif(c.bucket.count_le - coalesce(c.bucket.count_below, 0), 0)
       END AS quantile_value
FROM histograms h
LEFT JOIN chosen c USING (run_id, worker_id, family, labels, window_idx)
ORDER BY h.run_id, h.worker_id, h.family, h.labels, t_s;
