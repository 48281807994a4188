-- Generic statistics helpers, independent of any trace family.

-- @macro _hist_value_at(value, before, rank)
-- Inside an aggregate over a histogram sorted by value: the value at 0-based `rank`,
-- where `before` is the number of observations below the bucket.
CREATE MACRO _hist_value_at(value, before, rank) AS max(value) FILTER (WHERE before <= rank);

-- @macro _hist_quantile(value, before, total, q)
-- Linear-interpolated quantile `q` (DuckDB quantile_cont, numpy's default) of the
-- observations a histogram describes; `total` must be constant within the group.
-- Example: buckets (value 0, n 2) and (value 10, n 2): ranks 0..3 hold 0, 0, 10, 10;
-- q = 0.5 gives h = 1.5 and 0 + 0.5 * (10 - 0) = 5.
CREATE MACRO _hist_quantile(value, before, total, q) AS
    _hist_value_at(value, before, floor((total - 1) * q))::DOUBLE
    + ((total - 1) * q - floor((total - 1) * q))::DOUBLE
      * (_hist_value_at(value, before, least(floor((total - 1) * q) + 1, total - 1))
         - _hist_value_at(value, before, floor((total - 1) * q)));

-- @macro _summary_stats(x)
-- Aggregate: {count, min, p50, p95, max, mean} of x, percentiles linear-interpolated.
CREATE MACRO _summary_stats(x) AS {
    'count': count(x),
    'min': min(x),
    'p50': quantile_cont(x::DOUBLE, 0.5),
    'p95': quantile_cont(x::DOUBLE, 0.95),
    'max': max(x),
    'mean': avg(x)
};

-- @macro _hist_summary(histogram)
-- {count, min, p50, p95, max, mean} of the observations that the table named `histogram`
-- describes, per (run_id, dataset, block_size); its columns are those keys plus value, n.
-- Exact: the same numbers _summary_stats gives over the expanded observations.
CREATE MACRO _hist_summary(histogram) AS TABLE
WITH buckets AS (
    SELECT run_id, dataset, block_size, value, sum(n) AS n
    FROM query_table(histogram)
    GROUP BY ALL
), ranked AS (
    SELECT
        *,
        sum(n) OVER (PARTITION BY run_id, dataset, block_size ORDER BY value) - n AS before,
        sum(n) OVER (PARTITION BY run_id, dataset, block_size) AS total
    FROM buckets
)
SELECT
    run_id, dataset, block_size,
    {
        'count': total,
        'min': min(value),
        'p50': _hist_quantile(value, before, total, 0.5),
        'p95': _hist_quantile(value, before, total, 0.95),
        'max': max(value),
        'mean': sum(value * n) / total
    } AS stats
FROM ranked
GROUP BY run_id, dataset, block_size, total;

-- @macro _natural_sort_key(text)
-- A key that sorts text naturally: digit runs compare as numbers, so 'sess-9' comes
-- before 'sess-10' and '9' before '10'.
CREATE MACRO _natural_sort_key(text) AS array_to_string(list_transform(
    regexp_extract_all(text, '\d+|\D+'),
    lambda part: CASE WHEN regexp_full_match(part, '\d+') THEN lpad(part, 24, '0')
                      ELSE part END), '');

-- @macro _bin_width(lo, hi, bins)
-- A histogram's bin width for values from lo to hi: the smallest 1, 2 or 5 times a power
-- of ten that covers the range in at most `bins` bins (one more where lo is not on a bin
-- edge; a width a rounding error above a nice one counts as it); 1 when the range is
-- empty.  Bin a value with floor(x / width) * width.
-- Example: lo 0.057, hi 0.113, 20 bins: (0.113 - 0.057) / 20 = 0.0028, so 0.005 (12 bins,
-- 0.055 to 0.115).
CREATE MACRO _bin_width(lo, hi, bins) AS
    CASE
        WHEN hi IS NULL OR lo IS NULL THEN NULL
        WHEN hi <= lo THEN 1.0
        ELSE pow(10, floor(log10((hi - lo) / bins)))
             * CASE
                   WHEN (hi - lo) / bins / pow(10, floor(log10((hi - lo) / bins))) <= 1 + 1e-9 THEN 1
                   WHEN (hi - lo) / bins / pow(10, floor(log10((hi - lo) / bins))) <= 2 + 1e-9 THEN 2
                   WHEN (hi - lo) / bins / pow(10, floor(log10((hi - lo) / bins))) <= 5 + 1e-9 THEN 5
                   ELSE 10
               END
    END;
