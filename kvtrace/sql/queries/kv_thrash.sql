-- Thrash in KV-cache event streams: blocks a pool removed and stored again soon after,
-- the work a larger pool (or a lower tier that kept them) would have saved.
--
-- A block is its hash within a worker, medium and epoch, as kv_pool_residency follows
-- it (`_kv_block_events`: a clear or a restart starts it afresh); it is reloaded when
-- the pool stores it again after removing it, and thrashed when that happens within
-- window_s seconds of the removal.  (Thrash from an offloader's own counters:
-- timeline_counter_thrash.)
--
-- Worked example (kv_thrash(1.0)): a worker stores blocks a and b at 0 s, removes a at
-- 2 s and stores it again at 2.4 s; it removes b at 3 s and stores b again at 5 s.  Two
-- removals, both reloaded (after 0.4 and 2 s, median 1.2 s), one within 1 s: thrash
-- share 0.5.
--
-- @requires kv_events.sql

-- @macro kv_thrash(window_s)
-- Per worker and medium, from KV-cache events: blocks the pool removed, how many it
-- stored again later, and how many within window_s seconds of their removal (thrash:
-- the pool evicted a block it soon needed again).  An engine that publishes no removals
-- for a medium (LMCache's host tier) shows none here.
-- @column run_id           the run
-- @column worker           the engine
-- @column medium           where the blocks live, when sent
-- @column removed          blocks removed
-- @column reloaded         removed blocks stored again later
-- @column thrashed         ... within window_s seconds
-- @column thrash_share     thrashed / removed
-- @column blocks_thrashed  distinct blocks thrashed
-- @column median_reload_s  median time from removal to the next store, of those reloaded
CREATE MACRO kv_thrash(window_s := 1.0) AS TABLE
SELECT run_id, worker, medium,
       count(*) FILTER (WHERE kind = 'removed') AS removed,
       count(*) FILTER (WHERE kind = 'stored' AND previous_kind = 'removed') AS reloaded,
       count(*) FILTER (
           WHERE kind = 'stored' AND previous_kind = 'removed' AND since_previous_s <= window_s
       ) AS thrashed,
       thrashed / nullif(removed, 0) AS thrash_share,
       count(DISTINCT block_hash) FILTER (
           WHERE kind = 'stored' AND previous_kind = 'removed' AND since_previous_s <= window_s
       ) AS blocks_thrashed,
       median(since_previous_s) FILTER (WHERE kind = 'stored' AND previous_kind = 'removed')
           AS median_reload_s
FROM _kv_block_events
GROUP BY run_id, worker, medium
ORDER BY run_id, worker, medium;
