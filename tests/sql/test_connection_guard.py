"""kvtrace.connect reads the warehouse and never writes it, and bounds a query's memory."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from kvtrace import connect
from kvtrace.errors import KvtraceError, QueryError
from kvtrace.ingest import ingest
from tests.conftest import local_only, seed_record, write_jsonl

ROWS = 3 * 40  # requests x layers of the trace below


@pytest.fixture
def root(warehouse, tmp_path):
    records = [seed_record(r, layer, 99, [1, 5, 40]) for r in range(3) for layer in range(40)]
    ingest(warehouse, [str(write_jsonl(tmp_path / "trace.jsonl", records))])
    return warehouse.location


def _a_data_file(root: str) -> str:
    return str(next(p for p in Path(root).rglob("*.parquet") if "_delta_log" not in p.parts))


def _steps(root: str) -> int:
    with connect(root) as con:
        return con.sql("SELECT count(*) FROM dsa_steps").fetchall()[0][0]


@local_only
def test_copy_over_a_data_file_is_refused_and_the_rows_stay(root, tmp_path):
    data_file = _a_data_file(root)
    before = pq.read_metadata(data_file).num_rows
    con = connect(root)
    with pytest.raises(
        QueryError, match=r"read-only: COPY statements are refused.*read_only=False"
    ):
        con.execute(f"COPY (SELECT 1 AS x) TO '{data_file}' (FORMAT parquet)")
    for statement in (
        "CREATE TABLE t AS SELECT 1",
        f"ATTACH '{root}/dsa_steps/scratch.duckdb' AS s",
        "SET temp_directory = 'x'",
        f"EXPLAIN ANALYZE COPY (SELECT 1) TO '{data_file}'",
    ):
        with pytest.raises(QueryError, match="read-only"):
            con.sql(statement)
    with pytest.raises(QueryError, match="inside the warehouse"):
        con.sql("SELECT 1 AS x").write_parquet(data_file)
    with pytest.raises(QueryError, match="inside the warehouse"):
        con.table("dsa_steps").limit(1).to_csv(file_name=f"{root}/dsa_steps/x.csv")
    with pytest.raises(QueryError, match="read-only"):
        con.sql("SELECT 1 AS x").query("t", f"COPY t TO '{data_file}'")
    with pytest.raises(QueryError, match="read-only"):
        con.cursor().execute(f"COPY (SELECT 1 AS x) TO '{data_file}'")
    assert pq.read_metadata(data_file).num_rows == before
    assert not (Path(root) / "dsa_steps" / "scratch.duckdb").exists()
    assert _steps(root) == ROWS


def test_a_read_only_connection_reads_as_a_duckdb_connection_does(root, tmp_path):
    con = connect(root)
    assert con.execute("SELECT count(*) FROM dsa_steps").fetchall() == [(ROWS,)]
    assert con.sql("SELECT count(*) AS n FROM dsa_steps").pl()["n"].to_list() == [ROWS]
    assert con.sql("SELECT $n AS n", params={"n": 3}).fetchall() == [(3,)]
    assert con.table("dsa_steps").filter("layer_id = 0").count("*").fetchall() == [(3,)]
    out = tmp_path / "layers.parquet"
    con.sql("SELECT DISTINCT layer_id FROM dsa_steps").write_parquet(str(out))
    assert pq.read_metadata(out).num_rows == 40
    with con.cursor() as cursor:
        assert cursor.sql("SHOW TABLES").fetchall()
    con.close()


@local_only
def test_a_scratch_connection_writes_anywhere_but_the_warehouse(root, tmp_path):
    data_file = _a_data_file(root)
    con = connect(root, read_only=False)
    con.execute("CREATE TEMP TABLE layers AS SELECT DISTINCT layer_id FROM dsa_steps")
    out = tmp_path / "layers.csv"
    con.execute(f"COPY layers TO '{out}'")
    assert len(out.read_text().splitlines()) == 41
    relative = os.path.relpath(data_file)  # the same file, named another way
    for statement in (
        f"COPY layers TO '{data_file}' (FORMAT parquet)",
        f"COPY layers TO '{relative}' (FORMAT parquet)",
        f"COPY layers TO '{root}/dsa_steps/../dsa_steps/new.parquet' (FORMAT parquet)",
        f"ATTACH '{root}/scratch.duckdb' AS s",
        f"SET temp_directory = '{root}/_tmp/spill'",
    ):
        with pytest.raises(QueryError, match="inside the warehouse"):
            con.execute(statement)
    with pytest.raises(QueryError, match="inside the warehouse"):
        con.execute("COPY layers TO $path (FORMAT parquet)", {"path": data_file})
    with pytest.raises(QueryError, match="inside the warehouse"):
        con.table("layers").write_csv(f"{root}/layers.csv")
    # reading a warehouse file by its path is no write
    assert con.sql("SELECT count(*) FROM read_parquet($p)", params={"p": data_file}).fetchall()
    assert pq.read_metadata(data_file).num_rows > 0
    assert not (Path(root) / "scratch.duckdb").exists()
    assert _steps(root) == ROWS
    con.close()


def test_a_connection_takes_a_memory_limit_and_spills_into_a_folder_of_its_own(root):
    con = connect(root, memory_limit="48MB")
    limit, folder, spill = con.sql(
        "SELECT current_setting('memory_limit'), current_setting('temp_directory'), "
        "current_setting('max_temp_directory_size')"
    ).fetchall()[0]
    assert limit == "45.7 MiB"  # 48e6 bytes, as DuckDB prints it
    assert spill == "91.5 MiB"  # twice the memory limit
    assert Path(folder).parent == Path(tempfile.gettempdir())
    sort = "SELECT count(*) FROM (SELECT md5(range::varchar) AS h FROM range(600000) ORDER BY h)"
    assert con.sql(sort).fetchall() == [(600000,)]
    with pytest.raises(duckdb.OutOfMemoryException, match="max_temp_directory_size"):
        con.sql(sort.replace("600000", "6000000")).fetchall()
    con.close()
    assert not Path(folder).exists()  # DuckDB takes its spill folder away


def test_the_default_memory_limit_is_half_of_the_memory(root):
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        cgroup = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        cgroup = "max"
    if cgroup.isdigit():
        memory = min(memory, int(cgroup))
    reference = duckdb.connect()
    reference.execute(f"SET memory_limit = '{memory // 2}B'")
    setting = "SELECT current_setting('memory_limit')"
    with connect(root) as con:
        assert con.sql(setting).fetchall() == reference.sql(setting).fetchall()


@pytest.mark.parametrize("bad", ["10XB", "-1GB", "0", "lots"])
def test_a_memory_limit_that_is_no_size_is_one_sentence(root, bad):
    with pytest.raises(KvtraceError, match="memory limit"):
        connect(root, memory_limit=bad)


def test_a_statement_reads_the_callers_python_variables(root):
    import polars as pl

    con = connect(root)
    frame = pl.DataFrame({"layer_id": [0, 1, 99]})  # noqa: F841 (read by its name)
    rows = con.sql("SELECT count(*) FROM dsa_steps JOIN frame USING (layer_id)").fetchall()
    assert rows == [(6,)]
    with con.cursor() as cursor:
        assert cursor.execute("SELECT count(*) FROM frame").fetchall() == [(3,)]
