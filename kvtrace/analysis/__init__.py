"""The analysis layer: what kvtrace computes beyond SQL, and the connection that has it all.

- `kv_access`: the access stream of a DSA trace, cache policies over it (hit curves,
  reuse) and the tier what-if;
- `prefix_cache`: a prefix cache over a workload's block hashes;
- `cost_model`: batch times fitted on the work they did;
- `summary` / `summary_shares`: ``summary.json`` from exact counts of request shares;
- `function_specs`: the SQL functions the library's macros call into these, one entry
  each (`functions` installs them on a connection);
- `policies`: the cache policies, one entry each, and the simulator passes they have;
- `shares`: the one seam every heavy analysis runs through (plan shares, run each here
  or on an executor, merge in order).

It stands on the SQL library (`kvtrace.sql`): an analysis reads the library's views
through a connection, and the library never imports it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from kvtrace.defaults import default_path

__all__ = ["connect", "open_analysis_connection"]

if TYPE_CHECKING:
    import duckdb

    from kvtrace.sql.guard import GuardedConnection
    from kvtrace.warehouse import Warehouse


def connect(
    warehouse: Warehouse | str | os.PathLike[str] | None = None,
    *,
    read_only: bool = True,
    memory_limit: str | None = None,
    for_sql: str | None = None,
) -> GuardedConnection:
    """A DuckDB connection with every table, view, macro and function of a warehouse,
    which cannot write into the warehouse.

    ``warehouse`` is an open `Warehouse` or its path (default: `default_path`).  The
    connection runs SELECT-like SQL only, as ``kvtrace sql`` does; with
    ``read_only=False`` it is a scratch connection that runs any statement that names no
    path inside the warehouse (temporary tables, ``COPY ... TO`` a file elsewhere).
    Relations write files (``write_parquet``) only outside the warehouse.  A query may
    use ``memory_limit`` ("8GB", "25%"; default: half the memory) and spill twice that
    into a temporary folder of its own.  With ``for_sql``, only the views, macros and
    tables that SQL names are bound (with what they require): faster to open, for that
    SQL alone.

    Examples
    --------
    >>> con = kvtrace.connect("kvtrace-warehouse")  # doctest: +SKIP
    >>> con.sql("SELECT * FROM dsa_summary").pl()  # doctest: +SKIP
    """
    from kvtrace.sql.guard import GuardedConnection, WarehousePaths
    from kvtrace.warehouse import Warehouse

    if not isinstance(warehouse, Warehouse):
        warehouse = Warehouse(warehouse or default_path())
    con = open_analysis_connection(warehouse, for_sql=for_sql, memory_limit=memory_limit)
    paths = WarehousePaths(warehouse.location, warehouse.root)
    return GuardedConnection(con, paths, read_only=read_only)


def open_analysis_connection(
    warehouse: Warehouse, *, for_sql: str | None = None, memory_limit: str | None = None
) -> duckdb.DuckDBPyConnection:
    """The connection kvtrace's own commands use: every name of the warehouse and the
    analysis layer's functions, unguarded; with ``for_sql``, only what that SQL names is
    bound (with what they require): faster to open, for that SQL alone."""
    from kvtrace.analysis.function_specs import reads
    from kvtrace.sql.catalog import named_definitions, open_connection
    from kvtrace.sql.limits import memory_bound

    also: list[str] = []
    if for_sql is not None:  # an analysis reads views it names only when it runs
        called = named_definitions(for_sql) + for_sql
        also = [file for name, files in reads().items() if name in called for file in files]
    con = open_connection(
        warehouse, functions=("kvtrace.analysis.functions",), for_sql=for_sql, with_files=also
    )
    memory_bound(memory_limit).apply(con)
    return con
