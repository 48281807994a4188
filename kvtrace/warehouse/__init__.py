"""The warehouse layer: layout, commits and the storage seam, its row builders and its operations.

Everything that puts rows on disk lives here, and nothing here imports the SQL library
(`kvtrace.sql`), a reader (`kvtrace.ingest`) or a collector (`kvtrace.collectors`).  The
core, this folder, is what every other layer may rely on:

- `_store` / `_commit`: `Warehouse` and its commits (exported here);
- `_journal` / `_delta_log` / `_log_entry`: the Delta Lake tables, the journal of commits,
  snapshots;
- `_storage` / `_object_storage` / `_object_lock` / `_open_storage`: the seam to a folder or
  an object store (publish, locks) and the choice between them;
- `table_file` / `snapshot_cache` / `no_pandas`: one table's data files, cached snapshots,
  Arrow without pandas;
- `schema`: the tables' contracts (columns, partitioning, sort order).

Two sub-packages build on the core and are never imported by it: `rows` (the row builders
readers and collectors share) and `ops` (optimize, vacuum, check, repair, migrate).
"""

from kvtrace.warehouse._commit import Commit
from kvtrace.warehouse._store import Warehouse

__all__ = ["Commit", "Warehouse"]
