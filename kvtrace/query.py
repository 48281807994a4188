"""Run user SQL against a warehouse connection, read-only, and write results out."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Literal

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from kvtrace.errors import QueryError

OutputFormat = Literal["table", "csv", "json", "parquet"]
READ_ONLY = {"SELECT", "EXPLAIN"}


def check_read_only(sql: str) -> None:
    """Refuse anything but SELECT / EXPLAIN statements (so nothing can write or attach)."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"the SQL does not parse: {_first_line(exc)}") from None
    if not statements:
        raise QueryError("the SQL holds no statement")
    for statement in statements:
        kind = statement.type.name
        if kind not in READ_ONLY:
            raise QueryError(
                f"kvtrace sql is read-only: {kind} statements are refused "
                "(use SELECT, DESCRIBE, SUMMARIZE, SHOW or EXPLAIN)")


def run_query(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    """Execute ``sql`` (read-only) and return the result of its last statement."""
    check_read_only(sql)
    statements = duckdb.extract_statements(sql)
    try:
        for statement in statements[:-1]:
            con.execute(statement.query)
        return con.sql(statements[-1].query).to_arrow_table()
    except duckdb.Error as exc:
        message = _first_line(exc)
        own = _OWN_ERROR.match(message)
        if own:  # a kvtrace function refused its arguments: its sentence alone
            raise QueryError(own[1]) from None
        raise QueryError(message + '; "kvtrace views" lists the views') from None


_OWN_ERROR = re.compile(r"Invalid Input Error: Python exception occurred while executing "
                        r"the UDF: (?:QueryError|InputError): (.*)")


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0]


def render(table: pa.Table, fmt: OutputFormat) -> bytes:
    """The result as bytes in ``fmt`` (``table`` is plain aligned text)."""
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(table.column_names)
        writer.writerows(zip(*(col.to_pylist() for col in table.columns), strict=True)
                         if table.num_rows else [])
        return buffer.getvalue().encode()
    if fmt == "json":
        return (json.dumps(table.to_pylist(), default=str, indent=1) + "\n").encode()
    if fmt == "parquet":
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        return sink.getvalue().to_pybytes()
    return _text_table(table).encode()


def _text_table(table: pa.Table) -> str:
    rows = [[_cell(v) for v in row] for row in zip(
        *(col.to_pylist() for col in table.columns), strict=True)] if table.num_rows else []
    header = table.column_names
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.append(f"({table.num_rows} row{'s' if table.num_rows != 1 else ''})")
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _cell(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    text = json.dumps(value, default=str) if isinstance(value, (dict, list)) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def write_output(data: bytes, output: Path) -> None:
    """Write ``data`` to ``output`` atomically (a temporary file renamed into place)."""
    temp = output.with_name(f".{output.name}.kvtrace-tmp")
    temp.write_bytes(data)
    temp.replace(output)
