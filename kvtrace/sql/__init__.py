"""The SQL library: documented views over a warehouse, their Python functions, exports.

- `queries/*.sql`: one documented file per family of views and macros;
- `catalog`: loads them into a DuckDB connection and reads their headers;
- `functions`: the vectorised Python functions the views call;
- `kv_access`: the access stream, cache simulation and tier what-if behind
  ``dsa_hit_curve`` and ``kvtrace whatif``;
- `query`: runs a statement and formats or streams its result;
- `summary`: ``summary.json``, the per-run export.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from kvtrace.defaults import default_path

if TYPE_CHECKING:
    import duckdb

    from kvtrace.warehouse import Warehouse


def connect(warehouse: Warehouse | str | os.PathLike[str] | None = None
            ) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with every table, view and function of a warehouse.

    ``warehouse`` is an open `Warehouse` or its path (default: `default_path`).

    Examples
    --------
    >>> con = kvtrace.connect("kvtrace-warehouse")  # doctest: +SKIP
    >>> con.sql("SELECT * FROM dsa_summary").pl()  # doctest: +SKIP
    """
    from kvtrace.sql.catalog import open_connection
    from kvtrace.warehouse import Warehouse

    if not isinstance(warehouse, Warehouse):
        warehouse = Warehouse(warehouse or default_path())
    return open_connection(warehouse)
