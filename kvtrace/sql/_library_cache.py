"""The SQL library built once into a DuckDB file, which every connection attaches.

Creating the library's views binds each of them: about 0.4 s for the whole library, on
every connection.  So the library is built once into a DuckDB database in the user's
cache folder (``$KVTRACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/kvtrace``, else
``~/.cache/kvtrace``), named by a hash of everything that defines it: kvtrace's and
DuckDB's versions, the SQL files, the modules defining the tables' schemas and those
defining the functions its macros call.  A connection attaches it read-only (about a
millisecond) and puts it on its search path after its own catalog.

The built library reads the warehouse through forwarding views, ``_<table>_files AS
SELECT * FROM memory.main._<table>_files``: each connection creates the real ones over
its own snapshot, as before.  Files that read the snapshot's own tables
(``_snapshot_commits``, whose schema follows the journal a warehouse has) are
not built in; a connection creates them itself.  Where the cache cannot be written, or
a built file cannot be attached (it is then removed, to be built again), connections
build the library in memory as before.
Building removes libraries built more than `KEEP_DAYS` ago.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import time
import weakref
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import duckdb

from kvtrace._version import __version__
from kvtrace.defaults import cache_folder
from kvtrace.sql.catalog import SqlFile, alias_sql, install_functions, quote_literal
from kvtrace.warehouse.schema import TABLE_NAMES, schema_digest

LIBRARY = "kvtrace_library"
KEEP_DAYS = 30
SEARCH_PATH = f"SET search_path = 'memory.main,{LIBRARY}.main'"

_SEEN: set[Path] = set()  # built libraries this process has found
# the connections with the library attached: a cursor of one needs the search path too
_ATTACHED: weakref.WeakSet[duckdb.DuckDBPyConnection] = weakref.WeakSet()


def attach(
    con: duckdb.DuckDBPyConnection,
    files: Sequence[SqlFile],
    functions: Sequence[str],
) -> bool:
    """Attach the built library of ``files`` to ``con`` (building it first when no
    process has); False when it cannot be built here."""
    try:
        path = _built(files, functions)
    except (OSError, duckdb.Error):
        return False
    try:
        con.execute(f"ATTACH {quote_literal(str(path))} AS {LIBRARY} (READ_ONLY)")
    except duckdb.Error:  # a damaged file: built again by the next connection
        _SEEN.discard(path)
        path.unlink(missing_ok=True)
        return False
    con.execute(SEARCH_PATH)
    _ATTACHED.add(con)
    return True


def with_search_path(cursor: duckdb.DuckDBPyConnection, of: duckdb.DuckDBPyConnection) -> None:
    """Give a cursor of ``of`` the search path that finds the attached library."""
    if of in _ATTACHED:
        cursor.execute(SEARCH_PATH)
        _ATTACHED.add(cursor)


def _built(files: Sequence[SqlFile], functions: Sequence[str]) -> Path:
    """The built library's file, built now if it is not there yet."""
    path = cache_folder() / f"library-{_fingerprint(files, functions)}.duckdb"
    if path in _SEEN or path.exists():
        _SEEN.add(path)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    _forget_old(path.parent)
    temp = path.with_name(f".{path.stem}-{os.getpid()}.duckdb")
    temp.unlink(missing_ok=True)
    try:
        _build(temp, files, functions)
        os.replace(temp, path)  # whole or not at all; two builders write the same thing
    finally:
        temp.unlink(missing_ok=True)
        temp.with_name(temp.name + ".wal").unlink(missing_ok=True)
    _SEEN.add(path)
    return path


def _forget_old(folder: Path) -> None:
    """Remove built libraries no process has built for `KEEP_DAYS` (other versions'
    and edits'; one still in use is built again when next needed)."""
    oldest = time.time() - KEEP_DAYS * 86_400
    for old in folder.glob("library-*.duckdb"):
        with contextlib.suppress(OSError):
            if old.stat().st_mtime < oldest:
                old.unlink()


def _build(path: Path, files: Sequence[SqlFile], functions: Sequence[str]) -> None:
    """Create the library in a new DuckDB file at ``path``."""
    from kvtrace.warehouse.schema.tables import TABLES

    con = duckdb.connect()
    try:
        for name, spec in TABLES.items():
            con.register(f"_{name}_empty", spec.schema.empty_table())
            con.execute(f"CREATE VIEW _{name}_files AS SELECT * FROM _{name}_empty")
        install_functions(con, functions)
        con.execute(f"ATTACH {quote_literal(str(path))} AS {LIBRARY}")
        con.execute(f"USE {LIBRARY}")
        for name in TABLE_NAMES:
            con.execute(f"CREATE VIEW _{name}_files AS SELECT * FROM memory.main._{name}_files")
        for sql_file in files:
            con.execute(sql_file.text)
            if aliases := alias_sql(sql_file):
                con.execute(aliases)
        con.execute("USE memory")
        con.execute(f"DETACH {LIBRARY}")
    finally:
        con.close()


@cache
def _source(module: str) -> bytes:
    """The source of ``module``, read without importing it."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    return Path(spec.origin).read_bytes()


def _fingerprint(files: Sequence[SqlFile], functions: Sequence[str]) -> str:
    """A hash of everything the built library depends on."""
    digest = hashlib.sha256()
    for part in (__version__, duckdb.__version__):
        digest.update(part.encode() + b"\0")
    for sql_file in files:
        digest.update(sql_file.name.encode() + b"\0" + sql_file.text.encode() + b"\0")
    digest.update(schema_digest().encode() + b"\0")
    for module in functions:
        digest.update(_source(module))
    return digest.hexdigest()[:20]
