"""The SQL library: documented views over a warehouse, their list functions, queries.

- `queries/*.sql`: one documented file per family of views and macros;
- `catalog`: loads them into a DuckDB connection (`open_connection`) and reads their
  headers;
- `functions`: the vectorised list functions the views call;
- `query`: runs a statement and formats or streams its result.

`kvtrace.connect` (`kvtrace.analysis.connect`) opens a connection with the library and
the analysis functions its macros call.
"""

__all__ = ["catalog", "functions", "guard", "interrupt", "limits", "query", "runs", "text_table"]
