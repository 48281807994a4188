-- Where DSA's KV reads were served from, as the tracer's tier model recorded them.
--
-- Each stored row carries, per tier (hbm, local_pool, remote_pool), the blocks it read,
-- the bytes, the read operations and the latency (kv_fetch of seed 000_* section 3.3).
-- A run stored at several block sizes is counted at each.
--
-- @requires dsa_steps.sql

-- @view dsa_kv_fetch
-- Per run, stored block size and tier: totals and per-row statistics.  Latency
-- percentiles are linear over the rows that measured one.
-- @column run_id              the run
-- @column block_size          block size the rows were stored with
-- @column tier                hbm, local_pool or remote_pool
-- @column rows                (request, step, layer) rows
-- @column blocks              blocks served by the tier, over all rows
-- @column bytes_read          bytes read from the tier, over all rows
-- @column read_ops            read operations on the tier, over all rows
-- @column block_share         blocks / blocks of all tiers
-- @column bytes_per_row_mean  mean bytes per row
-- @column latency_us_mean     mean latency of the rows that measured one, microseconds
-- @column latency_us_p50      median latency, microseconds
-- @column latency_us_p95      95th percentile latency, microseconds
CREATE VIEW dsa_kv_fetch AS
WITH tiers AS (
    SELECT run_id, block_size, 'hbm' AS tier, hbm_blocks AS blocks, hbm_bytes_read AS bytes,
           hbm_read_ops AS ops, hbm_latency_us AS latency_us FROM dsa_steps
    UNION ALL
    SELECT run_id, block_size, 'local_pool', local_pool_blocks, local_pool_bytes_read,
           local_pool_read_ops, local_pool_latency_us FROM dsa_steps
    UNION ALL
    SELECT run_id, block_size, 'remote_pool', remote_pool_blocks, remote_pool_bytes_read,
           remote_pool_read_ops, remote_pool_latency_us FROM dsa_steps
), totals AS (
    SELECT
    run_id, block_size, tier, count(*) AS rows,
    sum(blocks) AS blocks, sum(bytes) AS bytes_read, sum(ops) AS read_ops,
    sum(blocks) / sum(sum(blocks)) OVER (PARTITION BY run_id, block_size) AS block_share,
    avg(bytes) AS bytes_per_row_mean,
    avg(latency_us) AS latency_us_mean,
    quantile_cont(latency_us, 0.5) AS latency_us_p50,
    quantile_cont(latency_us, 0.95) AS latency_us_p95
FROM tiers
GROUP BY run_id, block_size, tier
)
SELECT * FROM totals
ORDER BY run_id, block_size, list_position(['hbm', 'local_pool', 'remote_pool'], tier);
