-- The warehouse's own history: its commits and the files the shown version reads.
--
-- Every table is a Delta Lake table; the journal `_commits` (itself a Delta table) holds
-- one row per kvtrace commit, and its version is the warehouse version that
-- `--as-of VERSION` names.

-- @view warehouse_commits
-- One row per commit and table it wrote, up to the version shown.
-- @column commit_id         kvtrace commit id (its UTC time, then random hex)
-- @column warehouse_version the warehouse version the commit made: what `--as-of` takes to
--                           read the warehouse as it was right after it (NULL for commits
--                           recorded before kvtrace stamped versions)
-- @column operation         ingest (a file loaded), collect (a collector's batch), optimize,
--                           settle, cleanup, repair or migrate
-- @column run_id            the run the commit wrote
-- @column source_path       the ingested file, for ingests
-- @column source_sha256     sha256 of the ingested file's bytes
-- @column source_size       its size in bytes
-- @column kvtrace_version   kvtrace version that made the commit
-- @column created_at        when the commit was recorded (UTC)
-- @column retracted         commits this one took back (a cleanup of commits whose writers
--                           died, a repair): their rows are not shown, their sources may be
--                           ingested again
-- @column table_name        a table the commit wrote (NULL when it wrote none)
-- @column table_version     that table's Delta version after the commit
-- @column files             files the commit added to it
-- @column rows              rows the commit added to it
-- @column bytes             bytes the commit added to it
CREATE VIEW warehouse_commits AS
SELECT c.commit_id, c.warehouse_version,
       c.* EXCLUDE (commit_id, warehouse_version, tables, retracted),
       list_transform(c.retracted, lambda r: r.commit_id) AS retracted,
       t.entry['table'] AS table_name, t.entry['version'] AS table_version,
       t.entry['files'] AS files, t.entry['rows'] AS "rows", t.entry['bytes'] AS bytes
FROM _snapshot_commits AS c
LEFT JOIN LATERAL (SELECT unnest(c.tables) AS entry) AS t ON true;

-- @view warehouse_files
-- One row per data file of the version shown: what the views read.
-- @column table_name        the table
-- @column path              the file, relative to the warehouse root
-- @column rows              its rows
-- @column bytes             its size
-- @column commit_id         the commit that wrote it (NULL for files compaction wrote)
-- @column table_version     the table's Delta version the file list comes from
-- @column run_id            the run of that commit
-- @column source_path       the ingested file of that commit
-- @column source_sha256     its sha256
-- @column created_at        when that commit was recorded
CREATE VIEW warehouse_files AS
SELECT f."table" AS table_name, f.path, f."rows", f.bytes, f.commit_id, f.table_version,
       c.run_id, c.source_path, c.source_sha256, c.created_at
FROM _snapshot_files AS f
LEFT JOIN (
    SELECT DISTINCT entry['commit_id'] AS commit_id, run_id, source_path, source_sha256,
           created_at
    FROM (SELECT *, unnest(tables) AS entry FROM _snapshot_commits)
) AS c USING (commit_id);
