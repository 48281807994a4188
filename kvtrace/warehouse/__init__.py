"""The warehouse layer: layout, commits, the storage seam, row writers and bookkeeping.

Everything that puts rows on disk lives here, and nothing here imports the SQL library
(`kvtrace.sql`), a reader (`kvtrace.ingest`) or a collector (`kvtrace.collectors`):

- `store`: `Warehouse` and its commits;
- `journal` / `delta_log`: the Delta Lake tables, the journal of commits, snapshots;
- `storage` / `object_lock`: the seam to a folder or an object store (publish, locks);
- `maintenance`: optimize, vacuum and migrate;
- `schema`: the tables' contracts (columns, partitioning, sort order);
- `dsa_columns`: the canonical DSA columns every DSA source is mapped onto;
- `dsa_writer` / `dsa_checks`: the one writer of DSA rows and its source checks;
- `serving_rows`: pool snapshot and request rows from records, with type checks;
- `bookkeeping` / `rejects`: run ids, ``runs`` rows and quarantine rows.
"""

from kvtrace.warehouse.store import Commit, Warehouse

__all__ = ["Commit", "Warehouse"]
