"""The warehouse layer: layout, commits, the storage seam, row writers and bookkeeping.

Everything that puts rows on disk lives here, and nothing here imports the SQL library
(`kvtrace.sql`), a reader (`kvtrace.ingest`) or a collector (`kvtrace.collectors`):

- `store`: `Warehouse`, its manifest and its commits;
- `storage`: the file-system seam (atomic publish, locks, partition names);
- `schema`: the tables' contracts (columns, partitioning, sort order);
- `dsa_columns`: the canonical DSA columns every DSA source is mapped onto;
- `dsa_writer` / `dsa_checks`: the one writer of DSA rows and its source checks;
- `serving_rows`: pool snapshot and request rows from records, with type checks;
- `bookkeeping` / `rejects`: run ids, ``runs`` rows and quarantine rows.
"""

from kvtrace.warehouse.store import Commit, TableFile, Warehouse

__all__ = ["Commit", "TableFile", "Warehouse"]
