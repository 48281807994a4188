"""`kvtrace sql`'s output read as DuckDB's Python rows equals the output read through
Arrow, the way it was read before, for every format and for types of every kind."""

from __future__ import annotations

import io

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kvtrace.sql.query import run_query, write_stream

STATEMENTS = [
    "SELECT range AS n, range * 1.5 AS x, 'row ' || range AS label, range % 2 = 0 AS even, "
    "NULL::INTEGER AS missing FROM range(2500)",
    "SELECT DATE '2024-01-02' AS d, TIMESTAMP '2024-01-01 10:00:00.5' AS ts, 1.25::DECIMAL(10,2) "
    "AS dec, [1, 2, NULL] AS l, {'a': 1, 'b': ['x']} AS s, 'nan'::DOUBLE AS nan, 'ab'::BLOB AS raw",
    "SELECT TIMESTAMPTZ '2024-01-01 10:00:00+00' AS tz, MAP {'k': 1} AS m, INTERVAL 3 SECOND "
    "AS i, 170141183460469231731687303715884105727::HUGEINT AS h",
    "SELECT 1 AS a WHERE false",
]


def _through_arrow(con: duckdb.DuckDBPyConnection, sql: str, fmt: str) -> bytes:
    """The output of the earlier path: every batch through Arrow."""
    from kvtrace.sql._json_text import json_text
    from kvtrace.sql.query import TABLE_ROW_CAP
    from kvtrace.sql.text_table import text_table

    table = con.sql(sql).to_arrow_table()
    rows = list(zip(*(c.to_pylist() for c in table.columns), strict=True))
    if fmt == "table":
        cut_at = TABLE_ROW_CAP if len(rows) > TABLE_ROW_CAP else None
        return text_table(table.column_names, rows[:TABLE_ROW_CAP], cut_at=cut_at).encode()
    if fmt == "json":
        body = ",\n".join(json_text(row) for row in table.to_pylist())
        return ("[\n" + body + "\n]\n" if body else "[\n]\n").encode()
    sink = io.StringIO()
    import csv

    writer = csv.writer(sink, lineterminator="\n")
    writer.writerow(table.column_names)
    writer.writerows(rows)
    return sink.getvalue().encode()


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
@pytest.mark.parametrize("sql", STATEMENTS)
def test_rows_print_as_they_did_through_arrow(sql, fmt):
    sink = io.BytesIO()
    write_stream(run_query(duckdb.connect(), sql, fmt), fmt, sink)  # type: ignore[arg-type]
    assert sink.getvalue() == _through_arrow(duckdb.connect(), sql, fmt)


@pytest.mark.parametrize("sql", [s for s in STATEMENTS if "INTERVAL" not in s])
def test_parquet_holds_every_row_with_its_types(sql):
    sink = io.BytesIO()
    write_stream(run_query(duckdb.connect(), sql, "parquet"), "parquet", sink)
    written = pq.read_table(pa.BufferReader(sink.getvalue()))
    expected = duckdb.connect().sql(sql).to_arrow_table()
    assert written.column_names == expected.column_names
    assert repr(written.to_pylist()) == repr(expected.to_pylist())  # NaN is not NaN


def test_a_table_cut_at_the_cap_leaves_the_connection_free():
    con = duckdb.connect()
    write_stream(run_query(con, "FROM range(5000)"), "table", io.BytesIO())
    assert con.sql("SELECT 42").fetchall() == [(42,)]
