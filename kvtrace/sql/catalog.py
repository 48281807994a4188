"""The SQL library: load ``kvtrace/sql/queries/*.sql`` into DuckDB and read their documentation.

Each file opens with comments that document its objects::

    -- @view dsa_offsets            (or: -- @macro dsa_blocks(bs))
    -- What the object answers.
    -- @column offset_p50   median offset (linear interpolation)

Files are loaded in dependency order: a file that mentions an object another file
creates is loaded after it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

import duckdb

from kvtrace.errors import QueryError
from kvtrace.sql import functions as udf
from kvtrace.warehouse.schema import TABLES

FALLBACK_FILE = "udf_fallback.sql"
_OBJECT = re.compile(r"^--\s*@(view|macro)\s+([A-Za-z_][\w]*)(\([^)]*\))?\s*$")
_COLUMN = re.compile(r"^--\s*@column\s+(\w+)\s+(.*)$")
_CREATES = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:VIEW|MACRO)\s+(\w+)", re.IGNORECASE)


@dataclass
class SqlObject:
    """A documented view or macro."""

    name: str
    kind: str  # "view" | "macro"
    signature: str
    description: str
    columns: dict[str, str] = field(default_factory=dict)
    file: str = ""

    @property
    def public(self) -> bool:
        return not self.name.startswith("_")


@dataclass
class SqlFile:
    name: str
    text: str
    creates: list[str]
    objects: list[SqlObject]


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
        files.append(SqlFile(entry.name, text, _CREATES.findall(text),
                             parse_docs(entry.name, text)))
    return tuple(files)


def _dependency_order(files: list[SqlFile]) -> list[SqlFile]:
    creator = {obj: f.name for f in files for obj in f.creates}
    words = {f.name: set(re.findall(r"\w+", re.sub(r"--[^\n]*", "", f.text))) for f in files}
    needs = {
        f.name: {creator[o] for o in creator if creator[o] != f.name and o in words[f.name]}
        for f in files
    }
    ordered: list[SqlFile] = []
    done: set[str] = set()
    pending = list(files)
    while pending:
        ready = [f for f in pending if needs[f.name] <= done]
        if not ready:
            raise QueryError("the SQL library has a dependency cycle: "
                             + ", ".join(f.name for f in pending))
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


def table_sources(warehouse) -> dict[str, list[str]]:
    """For each table, the Parquet files a view must read: the empty schema file first."""
    manifest = warehouse.manifest()
    by_table: dict[str, list[str]] = {}
    for table, path in zip(manifest["table"].to_pylist(), manifest["path"].to_pylist(),
                           strict=True):
        by_table.setdefault(table, []).append(str(warehouse.root / path))
    return {
        name: [str(warehouse.schema_file(name)), *sorted(set(by_table.get(name, [])))]
        for name in TABLES
    }


def base_views_sql(warehouse) -> str:
    """``CREATE VIEW _<table>_files`` statements over the published files."""
    statements = []
    for name, files in table_sources(warehouse).items():
        listed = ", ".join(quote_literal(f) for f in files)
        statements.append(
            f"CREATE VIEW _{name}_files AS SELECT * FROM read_parquet([{listed}], "
            "union_by_name = true, hive_partitioning = false);"
        )
    return "\n".join(statements)


def open_connection(warehouse) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the warehouse's tables, views and functions."""
    con = duckdb.connect(":memory:")
    con.execute(base_views_sql(warehouse))
    con.register("_manifest_arrow", warehouse.manifest())
    con.execute("CREATE VIEW manifest AS SELECT * FROM _manifest_arrow")
    udf.register(con)
    for sql_file in library():
        try:
            con.execute(sql_file.text)
        except duckdb.Error as exc:
            raise QueryError(f"loading {sql_file.name} failed: {exc}") from exc
    return con


def shell_init_sql(warehouse) -> str:
    """A script that gives a plain ``duckdb`` shell the same views (``duckdb -init FILE``).

    The vectorised functions become SQL macros with the same results (slower), and the
    file lists are those of the manifest when the script was written.
    """
    fallback = next(f for f in _read_files() if f.name == FALLBACK_FILE)
    parts = [
        f"-- kvtrace views over {warehouse.root} (manifest {warehouse.fingerprint()}).",
        "-- Written by 'kvtrace shell-init'; run it again after new ingests.",
        base_views_sql(warehouse),
        fallback.text,
        *(f.text for f in library()),
    ]
    return "\n\n".join(parts) + "\n"
