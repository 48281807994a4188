"""Run user SQL against a warehouse connection, read-only, and write results out."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import duckdb

from kvtrace.defaults import OutputFormat
from kvtrace.errors import QueryError
from kvtrace.sql._json_text import json_text
from kvtrace.sql.text_table import text_table

if TYPE_CHECKING:
    import pyarrow as pa

    from kvtrace.sql.catalog import SqlObject

READ_ONLY = {"SELECT", "EXPLAIN"}


_EXPLAIN = re.compile(r"^\s*EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\([^)]*\)\s*)?", re.IGNORECASE)
TABLE_ROW_CAP = 1000  # rows the table format prints; the file formats stream every row


def read_only_statements(
    con: duckdb.DuckDBPyConnection, sql: str, who: str = "kvtrace sql"
) -> list[duckdb.Statement]:
    """The statements of ``sql``, parsed by ``con`` (DuckDB's module-level parser would
    open its default database first: 16 ms); anything but SELECT / EXPLAIN is refused (so
    nothing can write or attach; the error says ``who`` is read-only), and an EXPLAIN is
    judged by the statement it explains (EXPLAIN ANALYZE runs it)."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"the SQL does not parse: {_first_line(exc)}") from None
    if not statements:
        raise QueryError("the SQL holds no statement")
    for statement in statements:
        kind = statement.type.name
        if kind == "EXPLAIN":
            inner = _EXPLAIN.sub("", statement.query, count=1)
            if inner.strip() and inner != statement.query:
                read_only_statements(con, inner, who)
                continue
        if kind not in READ_ONLY:
            raise QueryError(
                f"{who} is read-only: {kind} statements are refused "
                "(use SELECT, DESCRIBE, SUMMARIZE, SHOW or EXPLAIN)"
            )
    return statements


def restrict_to(con: duckdb.DuckDBPyConnection, location: str) -> None:
    """Let ``con`` read no file outside ``location`` (a folder or object-store URI) and
    change no setting from now on (DuckDB's enable_external_access = false with the
    warehouse as allowed directory)."""
    con.execute("SET allowed_directories = [$folder]", {"folder": location.rstrip("/") + "/"})
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


@dataclass
class QueryResult:
    """The last statement's result, running, to be read once in batches: from DuckDB's
    cursor as Python rows, or, for Parquet and for values only Arrow turns into Python
    without more libraries (zone-aware times, maps, intervals, 128-bit integers, UUIDs,
    unions), as Arrow record batches."""

    names: list[str]
    cursor: duckdb.DuckDBPyConnection | None = None
    reader: pa.RecordBatchReader | None = None

    def row_batches(self) -> Iterator[list[tuple[Any, ...]]]:
        if self.reader is not None:
            for batch in self.reader:
                yield list(zip(*(column.to_pylist() for column in batch.columns), strict=True))
        elif self.cursor is not None:
            while batch := self.cursor.fetchmany(TABLE_ROW_CAP):
                yield batch


_NOT_PLAIN = re.compile(r"TIME ZONE|MAP\(|INTERVAL|HUGEINT|UUID|UNION\(")


def run_query(con: duckdb.DuckDBPyConnection, sql: str, fmt: OutputFormat = "table") -> QueryResult:
    """Execute ``sql`` (read-only): its statements run in turn and the last one's result
    comes back running, to be written in ``fmt`` (an error before its first rows raises
    here)."""
    statements = read_only_statements(con, sql)
    try:
        for statement in statements[:-1]:
            con.execute(statement.query).fetchall()  # consumed: the next may run
        last = statements[-1].query
        relation = con.sql(last)
        names = list(relation.columns)
        if fmt == "parquet" or any(_NOT_PLAIN.search(str(kind)) for kind in relation.types):
            return QueryResult(names, reader=relation.to_arrow_reader(TABLE_ROW_CAP))
        con.execute(last)
        return QueryResult(names, cursor=con)
    except duckdb.Error as exc:
        raise query_error(exc) from None


def query_error(exc: duckdb.Error) -> QueryError:
    """One sentence for a failed statement: a kvtrace function's own, or DuckDB's with
    what to do next (a file the warehouse cannot read points to ``kvtrace check``)."""
    message = _first_line(exc)
    if isinstance(exc, duckdb.OutOfMemoryException):
        detail = message.removeprefix("Out of Memory Error: ").rstrip(".")
        return QueryError(
            f"out of memory: {detail}; raise --memory-limit (as 16GB or 75%) or narrow the query"
        )
    own = _OWN_ERROR.match(message)
    if own:  # a kvtrace function refused its arguments: its sentence alone
        return QueryError(own[1])
    if isinstance(exc, duckdb.IOException) or (
        not isinstance(exc, duckdb.CatalogException) and _DAMAGE.search(message)
    ):
        return QueryError(
            message + "; the warehouse may be damaged: 'kvtrace check' says what is wrong"
        )
    if macro := _macro_as_table(message):
        return QueryError(f"{macro.name} is a macro: call it with its arguments, {macro.signature}")
    return QueryError(message + _hint(exc) + '; "kvtrace views" lists the views')


_MISSING_TABLE = re.compile(r"Table with name (\w+) does not exist")
_HINT = re.compile(r"^(Did you mean .*|Candidate bindings: .*)$", re.MULTILINE)
_INTERNAL = re.compile(r'"(?:duckdb_|pg_|sqlite_|information_schema|_)')
_GUESS = re.compile(r'Did you mean "(\w+)"')
_NEAR = 0.6  # the least similarity (difflib's ratio) of a table name worth suggesting


def _macro_as_table(message: str) -> SqlObject | None:
    """The library macro a statement named as a table, without its arguments."""
    from kvtrace.sql.catalog import documented_objects

    missing = _MISSING_TABLE.search(message)
    if missing is None:
        return None
    name = missing[1].lower()
    return next((o for o in documented_objects() if o.kind == "macro" and o.name == name), None)


def _hint(exc: duckdb.Error) -> str:
    """DuckDB's suggestion after its first line (a near name, the columns in scope), as
    the rest of the sentence; none where it names DuckDB's own catalog or a private
    object, or a table whose name is not near the one asked for."""
    text = str(exc)
    hint = _HINT.search(text)
    if hint is None or _INTERNAL.search(hint[1]):
        return ""
    missing, guess = _MISSING_TABLE.search(text), _GUESS.match(hint[1])
    if missing and guess and SequenceMatcher(None, missing[1], guess[1]).ratio() < _NEAR:
        return ""  # DuckDB guesses a name however far ("nope": "engine_pool_snapshots")
    return " " + hint[1].rstrip()


_OWN_ERROR = re.compile(
    r"Invalid Input Error: Python exception occurred while executing "
    r"the UDF: (?:QueryError|InputError): (.*)"
)
_DAMAGE = re.compile(
    r"No files found|magic bytes|Could not open file|No such file or "
    r"directory|Invalid Parquet file|corrupt",
    re.IGNORECASE,
)


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0]


def write_stream(
    result: QueryResult, fmt: OutputFormat, sink: BinaryIO, width: int | None = None
) -> None:
    """Write a query's result to ``sink`` batch by batch: csv, json and parquet hold every
    row without the whole result in memory; table prints the first `TABLE_ROW_CAP` rows,
    ``width`` characters wide at most (None: as wide as it is)."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        assert result.reader is not None, "run_query(..., fmt='parquet') reads through Arrow"
        with pq.ParquetWriter(sink, result.reader.schema, compression="zstd") as writer:
            for record_batch in result.reader:
                writer.write_batch(record_batch)
        return
    batches = result.row_batches()
    if fmt == "table":
        rows: list[tuple[Any, ...]] = []
        for batch in batches:
            rows += batch
            if len(rows) > TABLE_ROW_CAP:
                break
        if result.cursor is not None:
            result.cursor.abort()  # the rows past the cap are not read
        cut_at = TABLE_ROW_CAP if len(rows) > TABLE_ROW_CAP else None
        text = text_table(result.names, rows[:TABLE_ROW_CAP], cut_at=cut_at, width=width)
        sink.write(text.encode())
    elif fmt == "csv":
        wrapper = io.TextIOWrapper(sink, encoding="utf-8", newline="", write_through=True)
        out = csv.writer(wrapper, lineterminator="\n")
        out.writerow(result.names)
        for batch in batches:
            out.writerows(batch)
        wrapper.detach()
    else:
        sink.write(b"[")
        first = True
        for batch in batches:
            for row in batch:
                record = dict(zip(result.names, row, strict=True))
                sink.write((b"\n" if first else b",\n") + json_text(record).encode())
                first = False
        sink.write(b"\n]\n")


def render(table: pa.Table, fmt: OutputFormat, width: int | None = None) -> bytes:
    """The result as bytes in ``fmt`` (``table`` is aligned text, ``width`` characters
    wide at most)."""
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(table.column_names)
        writer.writerows(
            zip(*(col.to_pylist() for col in table.columns), strict=True) if table.num_rows else []
        )
        return buffer.getvalue().encode()
    if fmt == "json":
        return (json_text(table.to_pylist(), indent=1) + "\n").encode()
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        data: bytes = sink.getvalue().to_pybytes()
        return data
    return _text_table(table, width=width).encode()


def _text_table(table: pa.Table, cut_at: int | None = None, width: int | None = None) -> str:
    rows = list(zip(*(col.to_pylist() for col in table.columns), strict=True))
    return text_table(table.column_names, rows, cut_at=cut_at, width=width)


def write_output(data: bytes, output: Path) -> None:
    """Write ``data`` to ``output`` atomically (a temporary file renamed into place)."""
    with atomic_output(output) as sink:
        sink.write(data)


@contextmanager
def atomic_output(output: Path) -> Iterator[BinaryIO]:
    """A file to write that appears at ``output`` only once complete; errors name
    ``output``, not the temporary file."""
    if not output.name:  # "", "." or "/"
        raise QueryError("--output names no file; give one such as rows.csv")
    temp = output.with_name(f".{output.name}.kvtrace-tmp")
    try:
        with open(temp, "wb") as sink:
            yield sink
        temp.replace(output)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise QueryError(f"cannot write {output}: {exc.strerror or exc}") from None
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def check_output_path(output: Path, warehouse_root: Path) -> None:
    """Refuse an output file inside the warehouse: it is for kvtrace's own files."""
    target = output.resolve()
    if target.is_relative_to(warehouse_root.resolve()):
        raise QueryError(
            f"{output} is inside the warehouse {warehouse_root}; write results elsewhere"
        )
