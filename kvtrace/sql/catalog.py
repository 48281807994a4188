"""The SQL library: load ``kvtrace/sql/queries/*.sql`` into DuckDB and read their documentation.

Each file opens with comments that document its objects::

    -- @view dsa_offsets            (or: -- @macro dsa_blocks(bs))
    -- What the object answers.
    -- @column offset_p50   median offset (linear interpolation)

``-- @alias old_name`` keeps a former name for one release; ``-- @columns_of name``
documents an object with the columns of one documented above it in the same file.

A file names the files whose objects it uses in its header, as Perfetto's standard
library includes its modules::

    -- @requires dsa_steps.sql

and is loaded after them (a test checks each declaration against what the file uses).
"""

from __future__ import annotations

import importlib
import re
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

import duckdb

from kvtrace.errors import QueryError
from kvtrace.warehouse import Warehouse, snapshot_cache
from kvtrace.warehouse.schema import TABLE_NAMES

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "FALLBACK_FILE",
    "LIST_FUNCTIONS",
    "SqlFile",
    "SqlObject",
    "alias_sql",
    "base_views_sql",
    "calls_functions",
    "cursor_of",
    "documented_objects",
    "files_for",
    "install_functions",
    "library",
    "literal_table_sql",
    "named_definitions",
    "open_connection",
    "parse_docs",
    "quote_literal",
    "shell_init_sql",
    "table_sources",
]

FALLBACK_FILE = "udf_fallback.sql"
_OBJECT = re.compile(r"^--\s*@(view|macro)\s+([A-Za-z_][\w]*)(\([^)]*\))?\s*$")
_COLUMN = re.compile(r"^--\s*@column\s+(\w+)\s+(.*)$")
_ALIAS = re.compile(r"^--\s*@alias\s+(\w+)\s*$")
_COLUMNS_OF = re.compile(r"^--\s*@columns_of\s+(\w+)\s*$")  # the columns of an object above
_CREATES = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:VIEW|MACRO)\s+(\w+)", re.IGNORECASE)
_REQUIRES = re.compile(r"^--\s*@requires\s+(\S+)\s*$", re.MULTILINE)


@dataclass
class SqlObject:
    """A documented view or macro."""

    name: str
    kind: str  # "view" | "macro"
    signature: str
    description: str
    columns: dict[str, str] = field(default_factory=dict)
    file: str = ""
    aliases: list[str] = field(default_factory=list)  # former names, kept one release

    @property
    def public(self) -> bool:
        return not self.name.startswith("_")


@dataclass
class SqlFile:
    name: str
    text: str
    creates: list[str]
    objects: list[SqlObject]
    requires: tuple[str, ...] = ()  # files it uses objects of (its @requires lines)


def quote_literal(value: str) -> str:
    """A SQL string literal (the one place kvtrace quotes text into SQL)."""
    return "'" + value.replace("'", "''") + "'"


def parse_docs(name: str, text: str) -> list[SqlObject]:
    """The documented objects of one SQL file."""
    objects: list[SqlObject] = []
    current: SqlObject | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("--"):
            current = None
            continue
        if match := _OBJECT.match(stripped):
            current = SqlObject(match[2], match[1], match[2] + (match[3] or ""), "", file=name)
            objects.append(current)
        elif current is not None and (match := _COLUMN.match(stripped)):
            current.columns[match[1]] = match[2].strip()
        elif current is not None and (match := _ALIAS.match(stripped)):
            current.aliases.append(match[1])
        elif current is not None and (match := _COLUMNS_OF.match(stripped)):
            source = next((obj for obj in objects if obj.name == match[1]), None)
            if source is None:
                raise QueryError(f"{name}: @columns_of {match[1]} names no object above it")
            current.columns.update(source.columns)
        elif current is not None and not current.columns:
            text_line = stripped[2:].strip()
            current.description = " ".join(filter(None, [current.description, text_line]))
    return objects


@cache
def _read_files() -> tuple[SqlFile, ...]:
    """The library's files, read and parsed once per process (they are package data)."""
    folder = resources.files("kvtrace.sql") / "queries"
    files = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        text = entry.read_text()
        files.append(
            SqlFile(
                entry.name,
                text,
                _CREATES.findall(text),
                parse_docs(entry.name, text),
                tuple(_REQUIRES.findall(text)),
            )
        )
    return tuple(files)


def _dependency_order(files: list[SqlFile]) -> list[SqlFile]:
    """``files`` ordered so that each comes after the files it requires."""
    known = {f.name for f in files}
    for f in files:
        if unknown := set(f.requires) - known:
            raise QueryError(
                f"{f.name} requires {', '.join(sorted(unknown))}, which the SQL library lacks"
            )
    needs = {f.name: set(f.requires) for f in files}
    ordered: list[SqlFile] = []
    done: set[str] = set()
    pending = list(files)
    while pending:
        ready = [f for f in pending if needs[f.name] <= done]
        if not ready:
            raise QueryError(
                "the SQL library has a dependency cycle: " + ", ".join(f.name for f in pending)
            )
        for f in ready:
            ordered.append(f)
            done.add(f.name)
            pending.remove(f)
    return ordered


@cache
def library() -> tuple[SqlFile, ...]:
    """The SQL files of the library in load order (the shell fallback file excluded),
    worked out once per process."""
    return tuple(_dependency_order([f for f in _read_files() if f.name != FALLBACK_FILE]))


def documented_objects() -> list[SqlObject]:
    return [obj for f in library() for obj in f.objects]


def alias_sql(sql_file: SqlFile) -> str:
    """The statements that create the former names of ``sql_file``'s objects: a view or
    a macro of the same parameters over the object of the new name."""
    statements = []
    for obj in sql_file.objects:
        for alias in obj.aliases:
            if obj.kind == "view":
                statements.append(f"CREATE VIEW {alias} AS SELECT * FROM {obj.name};")
                continue
            match = re.search(rf"CREATE\s+MACRO\s+{obj.name}\s*\(([^)]*)\)", sql_file.text)
            if match is None:
                raise QueryError(f"{sql_file.name}: no CREATE MACRO {obj.name} for its alias")
            parameters = match[1]
            arguments = ", ".join(
                (f"{name} := {name}" if ":=" in part else name)
                for part in parameters.split(",")
                if (name := part.split(":=")[0].strip())
            )
            statements.append(
                f"CREATE MACRO {alias}({parameters}) AS TABLE "
                f"SELECT * FROM {obj.name}({arguments});"
            )
    return "\n".join(statements)


def table_sources(warehouse: Warehouse, files: list[tuple[str, str]]) -> dict[str, list[str]]:
    """For each table, the Parquet files a view must read: the empty schema file first,
    then its visible ``files`` (table, path relative to the root)."""
    by_table: dict[str, list[str]] = {}
    for table, path in files:
        by_table.setdefault(table, []).append(warehouse.uri(path))
    return {name: [warehouse.schema_file(name), *by_table.get(name, [])] for name in TABLE_NAMES}


def base_views_sql(
    warehouse: Warehouse, files: list[tuple[str, str]], tables: set[str] | None = None
) -> str:
    """``CREATE VIEW _<table>_files`` statements over the visible ``files`` (of every
    table, or of ``tables``)."""
    statements = []
    for name, sources in table_sources(warehouse, files).items():
        if tables is not None and name not in tables:
            continue
        listed = ", ".join(quote_literal(f) for f in sources)
        statements.append(
            f"CREATE VIEW _{name}_files AS SELECT * FROM read_parquet([{listed}], "
            "union_by_name = true, hive_partitioning = false);"
        )
    return "\n".join(statements)


# What each open connection was handed by name (Arrow datasets): a cursor of the
# connection shares its views but not these, so `cursor_of` hands them again.
_REGISTERED: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, dict[str, object]] = (
    weakref.WeakKeyDictionary()
)


def _register(con: duckdb.DuckDBPyConnection, name: str, data: object) -> None:
    con.register(name, data)
    _REGISTERED.setdefault(con, {})[name] = data


def cursor_of(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A cursor of ``con`` that sees everything ``con`` sees."""
    from kvtrace.sql._library_cache import with_search_path

    if not isinstance(con, duckdb.DuckDBPyConnection):  # a guarded one: its own cursor
        return con.cursor()
    cursor = con.cursor()
    for name, data in _REGISTERED.get(con, {}).items():
        cursor.register(name, data)
    with_search_path(cursor, con)
    return cursor


def _snapshot_tables(con: duckdb.DuckDBPyConnection, warehouse: Warehouse) -> list[tuple[str, str]]:
    """Create ``_snapshot_commits`` and ``_snapshot_files`` (the journal's standing rows
    and the visible data files of the version the warehouse shows) and return the files
    as (table, path) pairs.

    They come from where the snapshot is kept (DuckDB reads it: no Arrow, no Delta Lake
    library), or where it cannot be kept, from the snapshot in Arrow.  One snapshot
    either way, so every view reads the same version.
    """
    place = warehouse.stored_snapshot()
    if place is not None:
        try:
            for name, path in (
                ("_snapshot_commits", place.commits),
                ("_snapshot_files", place.files),
            ):
                con.execute(f"CREATE TABLE {name} AS FROM read_parquet({quote_literal(str(path))})")
        except duckdb.Error:  # removed meanwhile, or damaged: computed again
            con.execute("DROP TABLE IF EXISTS _snapshot_commits")
            snapshot_cache.forget(place)
            place = None
    if place is None:
        snapshot = warehouse.snapshot()
        for name, data in (
            ("_snapshot_commits", snapshot.commits),
            ("_snapshot_files", snapshot.files),
        ):
            con.register("_snapshot_arrow", data)
            con.execute(f"CREATE TABLE {name} AS FROM _snapshot_arrow")
            con.unregister("_snapshot_arrow")
    rows = con.execute('SELECT "table", path FROM _snapshot_files ORDER BY ALL').fetchall()
    return [(table, path) for table, path in rows]


def _register_datasets(
    con: duckdb.DuckDBPyConnection,
    warehouse: Warehouse,
    files: list[tuple[str, str]],
    tables: set[str],
) -> None:
    """``_<table>_files`` as Arrow datasets over an object store's ``files``: DuckDB scans
    them through Arrow's file system, reading no file until a query needs it."""
    import pyarrow.dataset as ds

    from kvtrace.warehouse.schema.tables import TABLES

    filesystem, base = warehouse.storage.arrow_filesystem()
    for name, spec in TABLES.items():
        if name not in tables:
            continue
        paths = [f"{base}/{path}" for table, path in files if table == name]
        dataset = ds.dataset(paths, schema=spec.schema, format="parquet", filesystem=filesystem)
        _register(con, f"_{name}_dataset", dataset)
        con.execute(f"CREATE VIEW _{name}_files AS SELECT * FROM _{name}_dataset")


LIST_FUNCTIONS = "kvtrace.sql.functions"  # the list functions every view may call


def install_functions(con: duckdb.DuckDBPyConnection, modules: Sequence[str]) -> None:
    """Install the SQL functions of ``modules`` (each has ``register(con)``) on ``con``."""
    for module in modules:
        importlib.import_module(module).register(con)


def open_connection(
    warehouse: Warehouse,
    *,
    functions: Sequence[str] = (),
    for_sql: str | None = None,
    with_files: Iterable[str] = (),
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the warehouse's tables, the library's views and
    its list functions.

    ``functions`` names the modules whose SQL functions the library's macros call besides
    the list functions (the analysis layer's, `kvtrace.analysis.functions`).  With
    ``for_sql``, only what that SQL names is bound: the library files defining its names
    with the files they require, and the tables those read (a command answers sooner;
    see `files_for`), and the files named in ``with_files`` with theirs; the functions
    are installed only when one of them calls a kvtrace function.
    The library comes built (`kvtrace.sql._library_cache`) where the cache folder can
    hold it; the files that read the snapshot's own tables are created here.
    """
    from kvtrace.sql import _library_cache as library_cache

    chosen, tables = (
        (library(), set(TABLE_NAMES)) if for_sql is None else files_for(for_sql, with_files)
    )
    sql_files = list(chosen)
    modules = (LIST_FUNCTIONS, *functions)
    con = duckdb.connect(":memory:")
    # data files never change once written, so their footers are parsed once: a footer
    # of hundreds of row groups otherwise costs each query a tenth of a second
    con.execute("SET parquet_metadata_cache = true")
    filesystem = warehouse.storage.duckdb_filesystem()
    if filesystem is not None:
        con.register_filesystem(filesystem)  # for SQL that names warehouse files
    if tables or any(_SNAPSHOT_TABLES.search(f.text) for f in sql_files):
        files = _snapshot_tables(con, warehouse)
        if filesystem is not None and tables:
            _register_datasets(con, warehouse, files, tables)
        elif tables:
            con.execute(base_views_sql(warehouse, files, tables))
    built = [f for f in library() if not _SNAPSHOT_TABLES.search(f.text)]
    attached = library_cache.attach(con, built, modules)
    if attached:
        in_library = {f.name for f in built}
        sql_files = [f for f in sql_files if f.name not in in_library]
    if (
        for_sql is None
        or (attached and calls_functions(for_sql))
        or any(_CALLS.search(t) for t in (for_sql, *(f.text for f in sql_files)))
    ):
        install_functions(con, modules)
    for sql_file in sql_files:
        try:
            con.execute(sql_file.text)
            if aliases := alias_sql(sql_file):
                con.execute(aliases)
        except duckdb.Error as exc:
            raise QueryError(f"loading {sql_file.name} failed: {exc}") from exc
    return con


_WORD = re.compile(r"[A-Za-z_]\w*")
_TABLE_FILES = re.compile(r"\b_(\w+?)_(?:files|dataset)\b")
_SNAPSHOT_TABLES = re.compile(r"\b_snapshot_(?:commits|files)\b")
_COMMENT = re.compile(r"--[^\n]*")
_CALLS = re.compile(r"\bkvtrace_\w+\s*\(")  # a call of one of kvtrace's SQL functions


@cache
def _definers() -> dict[str, str]:
    """Which library file creates each name (aliases included), lower-cased."""
    found: dict[str, str] = {}
    for sql_file in library():
        for name in sql_file.creates:
            found[name.lower()] = sql_file.name
        for obj in sql_file.objects:
            for alias in obj.aliases:
                found[alias.lower()] = sql_file.name
    return found


_STATEMENT_START = re.compile(r"^(?=CREATE\s)", re.IGNORECASE | re.MULTILINE)
_VIEW_OR_MACRO = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:VIEW|MACRO)\s+(\w+)", re.IGNORECASE)


@cache
def _statements() -> dict[str, str]:
    """Each library object's CREATE statement, by its name and its aliases' (lower-cased)."""
    found: dict[str, str] = {}
    for sql_file in library():  # a statement runs from its CREATE to the next one's
        for statement in _STATEMENT_START.split(sql_file.text)[1:]:
            if match := _VIEW_OR_MACRO.match(statement):
                found[match[1].lower()] = statement
    for sql_file in library():
        for obj in sql_file.objects:
            for alias in obj.aliases:
                found[alias.lower()] = found.get(obj.name.lower(), "")
    return found


def calls_functions(sql: str) -> bool:
    """Whether ``sql`` calls one of kvtrace's SQL functions, itself or through the library
    objects it names and those they name in turn."""
    statements = _statements()
    seen: set[str] = set()
    pending = [sql]
    while pending:
        text = _COMMENT.sub("", pending.pop())  # a comment may name any object
        if _CALLS.search(text):
            return True
        for word in _WORD.findall(text):
            name = word.lower()
            if name in statements and name not in seen:
                seen.add(name)
                pending.append(statements[name])
    return False


def named_definitions(sql: str) -> str:
    """The CREATE statements of the library objects ``sql`` names, one after another."""
    statements = _statements()
    return "\n".join(statements.get(word.lower(), "") for word in set(_WORD.findall(sql)))


def files_for(sql: str, also: Iterable[str] = ()) -> tuple[tuple[SqlFile, ...], set[str]]:
    """The library files ``sql`` needs (those creating a name it uses, and the files they
    require, in load order), with the files ``also`` names and theirs, and the warehouse
    tables all of them and ``sql`` read."""
    definers = _definers()
    by_name = {f.name: f for f in library()}
    wanted = {definers[word.lower()] for word in _WORD.findall(sql) if word.lower() in definers}
    wanted |= set(also)
    pending = list(wanted)
    while pending:
        for required in by_name[pending.pop()].requires:
            if required not in wanted:
                wanted.add(required)
                pending.append(required)
    chosen = tuple(f for f in library() if f.name in wanted)
    tables = {
        name
        for text in (sql, *(f.text for f in chosen))
        for name in _TABLE_FILES.findall(text)
        if name in TABLE_NAMES
    }
    return chosen, tables


def _literal(value: object) -> str:
    """``value`` (a Python value of an Arrow row) as a DuckDB literal."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, datetime):
        return f"TIMESTAMPTZ {quote_literal(value.isoformat())}"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{quote_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    return quote_literal(str(value))


def literal_table_sql(name: str, data: pa.Table) -> str:
    """``CREATE TABLE name`` holding ``data``, as SQL text (for scripts that cannot be
    handed Arrow tables)."""
    con = duckdb.connect()
    con.register("_data", data)
    columns = ", ".join(
        f'"{column}" {kind}' for column, kind, *_ in con.execute("DESCRIBE _data").fetchall()
    )
    con.close()
    statements = [f"CREATE TABLE {name} ({columns});"]
    for row in data.to_pylist():
        values = ", ".join(_literal(v) for v in row.values())
        statements.append(f"INSERT INTO {name} VALUES ({values});")
    return "\n".join(statements)


def shell_init_sql(warehouse: Warehouse) -> str:
    """A script that gives a plain ``duckdb`` shell the same views (``duckdb -init FILE``).

    The vectorised functions become SQL macros with the same results (slower), and the
    file lists are those of the warehouse version the script was written from.
    """
    fallback = next(f for f in _read_files() if f.name == FALLBACK_FILE)
    snapshot = warehouse.snapshot()
    files = snapshot.files
    pairs = list(zip(files["table"].to_pylist(), files["path"].to_pylist(), strict=True))
    parts = [
        f"-- kvtrace views over {warehouse.location} (version {snapshot.version}).",
        "-- Written by 'kvtrace shell-init'; run it again after new ingests.",
        base_views_sql(warehouse, pairs),
        literal_table_sql("_snapshot_commits", snapshot.commits),
        literal_table_sql("_snapshot_files", files),
        fallback.text,
        *(text for f in library() for text in (f.text, alias_sql(f)) if text),
    ]
    return "\n\n".join(parts) + "\n"
