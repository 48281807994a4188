-- The warehouse tables as views, one row per logical record.
--
-- kvtrace reads only the files of one warehouse version (see `warehouse_files`); the raw
-- files are the private views `_<table>_files`.  Several ingests may describe the same
-- run or request (for example the block16/ and block64/ folders of one run): these views
-- keep one row per key.

-- @view runs
-- One row per run (collection or ingest) and rank.
-- @column run_id            stable id: a slug of the run name and a hash of (name, source)
-- @column run_name          the name the run was given
-- @column kind              trace family: dsa, pool, serving
-- @column dataset           dataset label (comma-separated when a run spans several)
-- @column dataset_variant   exact dataset variant: hub id or file, split, revision, sha256
-- @column model             model name or path
-- @column model_config      model configuration (JSON text)
-- @column collector_config  collector or ingest settings (JSON text): format, block sizes, ...
-- @column rank              process rank that wrote the trace
-- @column world_size        number of ranks of the run
-- @column source            collect or ingest
-- @column host              host that collected or ingested it
-- @column started_at        when the run started (UTC), when known
-- @column kvtrace_version   kvtrace version that wrote the row
CREATE VIEW runs AS
SELECT * EXCLUDE (_row)
FROM (
    SELECT *, row_number() OVER (PARTITION BY run_id, rank ORDER BY started_at) AS _row
    FROM _runs_files
)
WHERE _row = 1;

-- @macro runs_named(selectors)
-- The runs a list of run ids or run names stands for: every run whose id or name is one
-- of them (a name may stand for several runs: each collection under it is one).  The one
-- place kvtrace resolves a --run value.
-- Example: runs_named(['demo']) -> both runs named demo; runs_named(['demo-1a2b3c4d'])
-- -> that run alone, by_id true.
-- @column selector    the id or name given
-- @column run_id      a run it stands for
-- @column run_name    that run's name
-- @column started_at  when the run started (UTC), when known
-- @column by_id       whether the selector is the run's id (not its name)
CREATE MACRO runs_named(selectors) AS TABLE
SELECT s.selector, r.run_id, r.run_name, r.started_at, r.run_id = s.selector AS by_id
FROM (SELECT unnest(selectors::VARCHAR[]) AS selector) AS s
JOIN (SELECT run_id, any_value(run_name) AS run_name, min(started_at) AS started_at
      FROM runs GROUP BY run_id) AS r
    ON r.run_id = s.selector OR r.run_name = s.selector;

-- @view requests
-- One row per request of a run.
-- @column run_id                the run
-- @column dataset               dataset label
-- @column request_id            dense integer id within the run
-- @column request_key           the source's own id when it was a string, else NULL
-- @column prompt_tokens         prompt length in tokens (for ingested DSA traces: the first traced decode position)
-- @column new_tokens            generated tokens, when known
-- @column prefix_key            hash of the first prompt tokens (SHA-1 hex)
-- @column prefix_cache_hit      whether an earlier request had the same prefix key
-- @column prefix_cached_tokens  on a prefix-cache hit, the cached length in tokens (the longest key seen before); 0 on a miss
-- @column prefix_region_tokens  the prefix region: the cached length on a hit, the request's own key region min(prompt_len, N) on a miss (ingested dumps: min(first decode position, N), hit or miss; N is the run's prefix_key_tokens)
-- @column arrival_s             arrival time, seconds since run start
-- @column finish_s              finish time, seconds since run start
-- @column latency_ms            end-to-end latency in milliseconds
-- @column status                ok, skipped, error, ...
-- @column skip_reason           why a request was not run (e.g. prompt longer than max_prompt_tokens)
CREATE VIEW requests AS
SELECT * EXCLUDE (_row)
FROM (
    SELECT *, row_number() OVER (
        PARTITION BY run_id, request_id ORDER BY prompt_tokens NULLS LAST, dataset
    ) AS _row
    FROM _requests_files
)
WHERE _row = 1;

-- @view quarantine
-- Input lines that ingest rejected, with the reason; nothing of them entered the tables.
-- @column run_id         run the line was meant for
-- @column source_path    file the line came from
-- @column source_sha256  SHA-256 of that file
-- @column line_no        1-based line number in the (uncompressed) file
-- @column reason         why the line was rejected
-- @column raw            the line's text (first 64 KiB)
CREATE VIEW quarantine AS SELECT * FROM _quarantine_files;

-- @view ingest_checks
-- Statistics a source precomputed that disagree with those recomputed from its positions.
-- The warehouse always stores the recomputed values.
-- @column run_id            the run
-- @column source_path       the source file
-- @column statistic         the source field (src_offset_p50 = the record's offset_p50, ...)
-- @column rows_checked      rows where the source gave this statistic
-- @column rows_disagreeing  rows where it disagreed
-- @column first_line        line of the first disagreement
-- @column source_value      the source's value on that line
-- @column recomputed_value  kvtrace's value on that line
CREATE VIEW ingest_checks AS SELECT * FROM _ingest_checks_files;
