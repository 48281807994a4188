"""The SQL library built once into a cached DuckDB file: connections that attach it
answer as connections that build it in memory, a changed library is built anew, and a
cache folder that cannot be written falls back to building in memory."""

from __future__ import annotations

import shutil

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from kvtrace.sql import _library_cache as library_cache
from kvtrace.sql.catalog import cursor_of, library
from tests.conftest import DATA

QUERIES = (
    "SELECT * FROM timeline_temporal_breakdown ORDER BY ALL",
    "SELECT * FROM timeline_kernel_breakdown(definitions := 'hta') ORDER BY ALL",
    "SELECT * FROM timeline_memory_bandwidth_summary ORDER BY ALL",
    "SELECT count(*) FROM warehouse_commits",
)


@pytest.fixture
def profiled(warehouse, tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    shutil.copy(DATA / "kineto_sampled_rank0.json.gz", folder)
    ingest(warehouse, [str(folder)])
    return warehouse


def _answers(warehouse) -> list[list[tuple]]:
    con = connect(warehouse)
    try:
        return [con.sql(query).fetchall() for query in QUERIES]
    finally:
        con.close()


def test_the_built_library_answers_as_the_library_built_in_memory(profiled, tmp_path, monkeypatch):
    monkeypatch.setenv("KVTRACE_CACHE_DIR", str(tmp_path / "cache"))
    attached = _answers(profiled)
    assert len(list((tmp_path / "cache").glob("library-*.duckdb"))) == 1
    monkeypatch.setenv("KVTRACE_CACHE_DIR", str(DATA / "README.md"))  # a file: no folder
    assert _answers(profiled) == attached
    con = connect(profiled)
    assert "kvtrace_library" not in {
        name for (name,) in con.sql("SELECT database_name FROM duckdb_databases()").fetchall()
    }


def test_a_cursor_sees_the_attached_library(profiled, tmp_path, monkeypatch):
    monkeypatch.setenv("KVTRACE_CACHE_DIR", str(tmp_path / "cache"))
    con = connect(profiled)
    cursor = cursor_of(con)
    assert cursor.sql(QUERIES[0]).fetchall() == con.sql(QUERIES[0]).fetchall() != []


def test_a_changed_library_is_built_anew(tmp_path, monkeypatch):
    files = list(library())
    fingerprint = library_cache._fingerprint(files, ())
    changed = [*files[:-1], type(files[-1])(**{**files[-1].__dict__, "text": "-- x\\n"})]
    assert library_cache._fingerprint(changed, ()) != fingerprint
    assert library_cache._fingerprint(list(library()), ()) == fingerprint


def test_a_damaged_built_library_is_set_aside_and_built_again(profiled, tmp_path, monkeypatch):
    monkeypatch.setenv("KVTRACE_CACHE_DIR", str(tmp_path / "cache"))
    expected = _answers(profiled)
    (built,) = (tmp_path / "cache").glob("library-*.duckdb")
    built.write_bytes(b"not a database")
    assert _answers(profiled) == expected  # built in memory this time
    assert not built.exists()
    assert _answers(profiled) == expected and built.exists()  # and in the cache again


def test_libraries_built_long_ago_are_removed_when_one_is_built(profiled, tmp_path, monkeypatch):
    import os
    import time

    cache = tmp_path / "cache"
    cache.mkdir()
    old, recent = cache / "library-0000old.duckdb", cache / "library-0000new.duckdb"
    for path, days in ((old, library_cache.KEEP_DAYS + 1), (recent, 1)):
        path.write_bytes(b"")
        stamp = time.time() - days * 86_400
        os.utime(path, (stamp, stamp))
    monkeypatch.setenv("KVTRACE_CACHE_DIR", str(cache))
    _answers(profiled)
    assert not old.exists() and recent.exists()
