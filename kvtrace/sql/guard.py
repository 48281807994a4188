"""The connection `kvtrace.connect` hands out: it reads the warehouse and never writes it.

A DuckDB connection can write anywhere its process may: ``COPY ... TO`` over a data file,
``ATTACH`` a database file inside a table's folder, ``relation.write_parquet``.  The
guard stands between the user and the connection:

- read-only (the default): SQL runs only when every statement is SELECT-like, by the same
  rule as ``kvtrace sql`` (`read_only_statements`); relations write files only outside
  the warehouse;
- scratch (``read_only=False``): every statement runs, in the connection's own in-memory
  database, except one that names a path inside the warehouse (a string literal or a
  parameter), and relations write files only outside the warehouse.

Everything else a DuckDB connection or relation offers passes through; relations come
back guarded too, and so do cursors.  A statement reads the caller's Python variables
(a DataFrame by its name) as on a plain connection: DuckDB looks for them in every frame
(``python_scan_all_frames``), not only the guard's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from kvtrace.errors import QueryError
from kvtrace.sql.query import read_only_statements

_SCRATCH_HINT = (
    "kvtrace.connect(..., read_only=False) gives a scratch connection, which runs any "
    "statement that names no path inside the warehouse"
)
_RELATION_WRITES = frozenset({"write_csv", "to_csv", "write_parquet", "to_parquet"})


class WarehousePaths:
    """Says whether a path given to DuckDB lies inside the warehouse (a local folder, or
    an object-store prefix)."""

    def __init__(self, location: str, root: Path | None) -> None:
        self.location = location.rstrip("/") + "/"
        self.root = root.resolve() if root is not None else None

    def inside(self, text: str) -> bool:
        if self.root is None:
            return text.startswith(self.location) or text.rstrip("/") + "/" == self.location
        path = text.removeprefix("file://")
        if "://" in path:
            return False
        try:
            return Path(path).expanduser().resolve().is_relative_to(self.root)
        except (OSError, ValueError):  # not a path at all (a NUL byte, a loop)
            return False

    def refuse_inside(self, texts: list[str], what: str) -> None:
        """Raise when one of ``texts`` names a path inside the warehouse."""
        for text in texts:
            if self.inside(text):
                raise QueryError(
                    f"{what} names {text!r}, inside the warehouse {self.location.rstrip('/')}: "
                    "the warehouse is written by kvtrace's commands only; write elsewhere"
                )


def string_literals(statement: duckdb.Statement) -> list[str]:
    """The single-quoted string literals of one parsed statement ('' is a quote)."""
    text, found, at = statement.query, [], 0
    while (start := text.find("'", at)) >= 0:
        end, value = start + 1, []
        while end < len(text):
            if text[end] == "'":
                if text.startswith("''", end):
                    value.append("'")
                    end += 2
                    continue
                break
            value.append(text[end])
            end += 1
        found.append("".join(value))
        at = end + 1
    return found


class GuardedConnection:
    """A DuckDB connection that cannot write into its warehouse (see the module)."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection, paths: WarehousePaths, *, read_only: bool
    ) -> None:
        self._con = con
        self._paths = paths
        self.read_only = read_only
        # a statement's Python variables live in the caller's frame, not the guard's
        con.execute("SET python_scan_all_frames = true")

    def check(self, sql: str, parameters: object = None) -> None:
        """Refuse ``sql`` (with its ``parameters``) if it could write the warehouse."""
        if self.read_only:
            try:
                read_only_statements(self._con, sql, "a kvtrace.connect connection")
            except QueryError as exc:
                raise QueryError(f"{exc}; {_SCRATCH_HINT}") from None
            return
        try:
            statements = self._con.extract_statements(sql)
        except duckdb.Error:
            return  # DuckDB itself says what does not parse
        writing = [s for s in statements if s.type.name != "SELECT"]
        texts = [text for s in writing for text in string_literals(s)]
        if writing:
            texts += _parameter_strings(parameters)
        self._paths.refuse_inside(texts, "the statement")

    def sql(self, query: str, **kwargs: Any) -> GuardedRelation | None:
        self.check(query, kwargs.get("params"))
        relation: GuardedRelation | None = self._wrap(self._con.sql(query, **kwargs))
        return relation

    query = sql

    def from_query(self, query: str, **kwargs: Any) -> GuardedRelation | None:
        self.check(query, kwargs.get("params"))
        relation: GuardedRelation | None = self._wrap(self._con.from_query(query, **kwargs))
        return relation

    def execute(self, query: str, parameters: object = None) -> GuardedConnection:
        self.check(query, parameters)
        self._con.execute(query, parameters)
        return self

    def executemany(self, query: str, parameters: object = None) -> GuardedConnection:
        rows = parameters if isinstance(parameters, (list, tuple)) else []
        self.check(query, [text for row in rows for text in _parameter_strings(row)])
        self._con.executemany(query, parameters)
        return self

    def cursor(self) -> GuardedConnection:
        """A cursor that sees everything this connection sees, guarded as it is."""
        from kvtrace.sql.catalog import cursor_of

        return GuardedConnection(cursor_of(self._con), self._paths, read_only=self.read_only)

    duplicate = cursor

    def __getattr__(self, name: str) -> Any:
        return _guarded(getattr(self._con, name), self._wrap)

    def __enter__(self) -> GuardedConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self._con.close()

    def _wrap(self, value: Any) -> Any:
        """Relations come back guarded; the connection itself (methods that chain) as
        this guard."""
        if isinstance(value, duckdb.DuckDBPyRelation):
            return GuardedRelation(value, self)
        if isinstance(value, duckdb.DuckDBPyConnection):
            return (
                self
                if value is self._con
                else GuardedConnection(value, self._paths, read_only=self.read_only)
            )
        return value


class GuardedRelation:
    """A DuckDB relation of a guarded connection: it writes files outside the warehouse
    only, and its ``query`` runs SQL under the connection's rule."""

    def __init__(self, relation: duckdb.DuckDBPyRelation, con: GuardedConnection) -> None:
        self._relation = relation
        self._con = con

    def query(self, virtual_table_name: str, sql_query: str) -> Any:
        self._con.check(sql_query)
        return self._con._wrap(self._relation.query(virtual_table_name, sql_query))

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._relation, name)
        if name in _RELATION_WRITES:
            return self._checked_write(attribute, name)
        return _guarded(attribute, self._con._wrap)

    def _checked_write(self, write: Callable[..., Any], name: str) -> Callable[..., Any]:
        def checked(file_name: str, *args: Any, **kwargs: Any) -> Any:
            self._con._paths.refuse_inside([str(file_name)], f"relation.{name}")
            return write(file_name, *args, **kwargs)

        return checked

    def __repr__(self) -> str:
        return repr(self._relation)

    def __str__(self) -> str:
        return str(self._relation)

    def __len__(self) -> int:
        return len(self._relation)


def _guarded(attribute: Any, wrap: Callable[[Any], Any]) -> Any:
    """A method whose relations come back guarded; any other attribute as it is."""
    if not callable(attribute):
        return attribute

    def call(*args: Any, **kwargs: Any) -> Any:
        return wrap(attribute(*args, **kwargs))

    return call


def _parameter_strings(parameters: object) -> list[str]:
    if isinstance(parameters, dict):
        parameters = list(parameters.values())
    if isinstance(parameters, (list, tuple)):
        return [value for value in parameters if isinstance(value, str)]
    return []
