"""The warehouse as Delta Lake tables: exactly-once, killed writers, versions, other
readers, compaction, vacuum and migration (on local disk, or on the S3 test server)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys

import numpy as np
import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable

from kvtrace import connect
from kvtrace.errors import WarehouseError
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse._open_storage import open_storage
from kvtrace.warehouse.ops.integrity import check
from kvtrace.warehouse.ops.maintenance import leftovers, settle
from kvtrace.warehouse.ops.maintenance import vacuum as vacuum_warehouse
from tests.conftest import DATA, query_rows, warehouse_at

LEGACY = DATA / "legacy_warehouse"


def _count(location: str, sql: str) -> tuple:
    con = connect(Warehouse(location))
    try:
        return con.execute(sql).fetchone()
    finally:
        con.close()


def test_three_processes_ingesting_one_file_at_once_store_it_once(tmp_path, synthetic_trace, cli):
    trace = synthetic_trace(requests=3, steps=4, layers=8)
    location = warehouse_at(tmp_path / "wh")
    Warehouse(location, create=True)
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "kvtrace", "-q", "-w", location, "ingest", str(trace)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    for process in processes:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
    assert _count(location, "SELECT count(*) FROM _dsa_steps_files") == (3 * 4 * 8,)
    assert _count(location, "SELECT count(*) FROM _requests_files") == (3,)
    assert _count(
        location,
        "SELECT count(DISTINCT commit_id) FROM warehouse_commits WHERE source_path IS NOT NULL",
    ) == (1,)
    assert leftovers(Warehouse(location)) == []


def test_a_writer_killed_between_its_table_commits_and_the_journal_shows_nothing(
    tmp_path, synthetic_trace, monkeypatch
):
    from kvtrace.warehouse import _object_lock as object_lock

    monkeypatch.setattr(object_lock, "STALE_AFTER_S", 1.0)  # the killed writer's run lock
    trace = synthetic_trace(requests=2, steps=3, layers=4)
    location = warehouse_at(tmp_path / "wh")
    Warehouse(location, create=True)
    script = (
        "import time\n"
        "from kvtrace.warehouse import _journal as journal\n"
        "from kvtrace.ingest import ingest\n"
        "from kvtrace.warehouse import Warehouse\n"
        "def stall(*a, **k):\n"
        "    print('tables committed', flush=True)\n"
        "    time.sleep(60)\n"
        "journal.append = stall\n"
        f"ingest(Warehouse({location!r}), [{str(trace)!r}])\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "tables committed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    warehouse = Warehouse(location)
    assert {f.table for f in leftovers(warehouse)} >= {"dsa_steps", "requests", "runs"}
    assert _count(location, "SELECT count(*) FROM _dsa_steps_files") == (0,)
    assert ingest(warehouse, [str(trace)]).rows == 2 * 3 * 4
    assert ingest(warehouse, [str(trace)]).files[0].status == "already ingested"
    assert _count(location, "SELECT count(*) FROM _dsa_steps_files") == (24,)
    # the dead writer's table commits carried the source's transaction id, so the second
    # ingest recorded those files rather than adding its own: nothing is duplicated
    assert leftovers(warehouse) == []


def test_dead_commits_are_dropped_from_the_logs_other_engines_read(tmp_path, warehouse):
    from kvtrace.warehouse._delta_log import add_files
    from kvtrace.warehouse.schema.tables import TABLES

    commit = warehouse.begin("orphan")
    warehouse.write_rows(commit, "runs", [{"run_id": "orphan", "run_name": "orphan"}])
    add_files(
        warehouse.storage,
        "runs",
        TABLES["runs"].schema,
        commit.files,
        commit.app_id,
        commit.commit_id,
    )  # the tables commit ...
    assert [(f.table, f.alive) for f in leftovers(warehouse)] == [("runs", True)]
    assert settle(warehouse) == []  # its writer is still at it: nothing is dropped
    commit.hold.release()  # ... then the process dies
    assert [(f.table, f.alive) for f in leftovers(warehouse)] == [("runs", False)]
    assert settle(warehouse) == [
        "dropped 1 file(s) of 1 commit(s) whose writers died "
        "before recording them; ingesting their sources again "
        "commits them"
    ]
    assert leftovers(warehouse) == []


def test_as_of_reproduces_an_earlier_report_apart_from_its_generated_at_line(
    tmp_path, synthetic_trace, cli
):
    location = warehouse_at(tmp_path / "wh")
    first = synthetic_trace(run_name="first", requests=2, steps=3, layers=4)
    assert cli("-w", location, "ingest", str(first))[0] == 0
    version = Warehouse(location).version
    assert cli("-w", location, "report", "dsa", "-o", str(tmp_path / "a" / "dsa.html"))[0] == 0
    second = synthetic_trace(run_name="second", requests=3, steps=2, layers=4, seed=5)
    assert cli("-w", location, "ingest", str(second))[0] == 0
    assert (
        cli(
            "-w",
            location,
            "report",
            "dsa",
            "--as-of",
            str(version),
            "-o",
            str(tmp_path / "b" / "dsa.html"),
        )[0]
        == 0
    )
    assert cli("-w", location, "report", "dsa", "-o", str(tmp_path / "c" / "dsa.html"))[0] == 0

    def page(folder: str) -> list[str]:
        text = (tmp_path / folder / "dsa.html").read_text()
        return [line for line in text.splitlines() if "Generated" not in line]

    assert page("a") == page("b")
    assert page("a") != page("c")
    status, out, _ = cli(
        "-w",
        location,
        "sql",
        "--as-of",
        str(version),
        "SELECT count(DISTINCT run_id) FROM runs",
        "-f",
        "csv",
    )
    assert status == 0 and out.splitlines()[1] == "1"
    status, _, err = cli("-w", location, "sql", "--as-of", "99", "SELECT 1")
    assert status == 1 and "has no version 99" in err


def test_polars_alone_reads_dsa_steps_and_gets_the_mean_unique_blocks(warehouse, synthetic_trace):
    import polars as pl

    ingest(warehouse, [str(synthetic_trace(requests=3, steps=5, layers=6))])
    con = connect(warehouse)
    expected = con.execute("SELECT avg(unique_blocks) FROM dsa_blocks(64)").fetchone()[0]
    con.close()
    steps = pl.scan_delta(warehouse.uri("dsa_steps")).collect()
    unique = [len(np.unique(np.asarray(p, dtype=np.int64) // 64)) for p in steps["selected_pos"]]
    assert float(np.mean(unique)) == pytest.approx(expected, rel=1e-12)


def test_optimize_compacts_without_changing_answers_and_vacuum_frees_old_versions(
    warehouse, synthetic_trace, cli
):
    for n in range(4):
        ingest(
            warehouse,
            [str(synthetic_trace(run_name=f"r{n}", requests=2, steps=2, layers=3, seed=n))],
        )
    query = "SELECT run_id, sum(unique_blocks) FROM dsa_blocks(64) GROUP BY ALL ORDER BY 1"
    before_version = warehouse.version
    con = connect(warehouse)
    before, files_before = con.execute(query).fetchall(), len(warehouse.files("dsa_steps"))
    con.close()
    status, out, _ = cli("-w", warehouse.location, "optimize")
    assert status == 0 and "dsa_steps: 4 files into 1" in out
    assert len(warehouse.files("dsa_steps")) == 1 < files_before
    con = connect(warehouse)
    assert con.execute(query).fetchall() == before
    con.close()
    old = Warehouse(warehouse.location, as_of=before_version)
    assert len(old.files("dsa_steps")) == files_before
    with pytest.raises(WarehouseError, match="give --force to vacuum anyway"):
        vacuum_warehouse(warehouse, retain_hours=0)
    report = vacuum_warehouse(warehouse, retain_hours=0, force=True)
    assert "dsa_steps" in report.tables
    con = connect(warehouse)
    assert con.execute(query).fetchall() == before  # the newest version keeps its files
    con.close()


def test_migrate_converts_a_warehouse_of_the_former_manifest(tmp_path, cli):
    location = warehouse_at(tmp_path / "legacy")
    storage = open_storage(location)
    filesystem, base = storage.arrow_filesystem()
    pafs.copy_files(
        str(LEGACY),
        base,
        source_filesystem=pafs.LocalFileSystem(),
        destination_filesystem=filesystem,
    )
    with pytest.raises(WarehouseError, match="migrate"):
        Warehouse(location)
    status, out, err = cli("-w", location, "migrate")
    assert status == 0, err
    assert "now made of Delta tables" in out
    assert _count(location, "SELECT count(*), sum(unique_blocks) FROM dsa_blocks(64)") == (
        48,
        2528,
    )  # the figures the former kvtrace printed (tests/data/README.md)
    assert _count(location, "SELECT count(*), sum(input_tokens) FROM workload_requests") == (
        8819,
        18059974,
    )
    assert not storage.exists("_manifest")
    status, _, err = cli("-w", location, "migrate")
    assert status == 1 and "already made of Delta tables" in err
    azure = DATA / "azure_llm_inference_code.csv"
    status, out, _ = cli("-w", location, "ingest", str(azure))
    assert status == 0 and "already ingested" in out


def test_a_warehouse_location_that_is_not_one_is_one_clear_sentence(tmp_path, cli):
    status, _, err = cli("-w", warehouse_at(tmp_path / "none"), "sql", "SELECT 1")
    assert status == 1 and "no kvtrace warehouse at" in err
    assert "Traceback" not in err
    assert re.search(r"kvtrace ingest", err)
    shutil.rmtree(tmp_path / "none", ignore_errors=True)


def test_a_table_an_older_kvtrace_made_gains_the_new_columns(tmp_path, synthetic_trace):
    from deltalake import DeltaTable

    from kvtrace.warehouse.schema.tables import TABLES

    location = str(tmp_path / "wh")
    warehouse = Warehouse(location, create=True)
    older = TABLES["dsa_steps"].schema
    for name in ("ts_us", "touched_blocks"):  # what the table looked like before them
        older = older.remove(older.get_field_index(name))
    DeltaTable.create(f"{location}/dsa_steps", schema=older, mode="overwrite")
    ingest(warehouse, [str(synthetic_trace(requests=1, steps=2, layers=2))])
    fields = {f.name for f in DeltaTable(f"{location}/dsa_steps").schema().fields}
    assert {"ts_us", "touched_blocks"} <= fields
    touched = _count(location, "SELECT count(touched_blocks), count(*) FROM dsa_steps")
    assert touched == (4, 4)


def test_each_commit_names_the_warehouse_version_it_made_even_when_writers_race(
    tmp_path, synthetic_trace
):
    location = warehouse_at(tmp_path / "wh")
    Warehouse(location, create=True)
    traces = [
        synthetic_trace(run_name=f"r{i}", requests=2, steps=2, layers=2, seed=i) for i in range(4)
    ]
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "kvtrace", "-q", "-w", location, "ingest", str(trace)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for trace in traces
    ]
    assert all(p.wait(timeout=300) == 0 for p in processes)
    stamped = dict(
        query_rows(location, "SELECT DISTINCT commit_id, warehouse_version FROM warehouse_commits")
    )
    assert sorted(stamped.values()) == [1, 2, 3, 4]
    journal = f"{location}/_commits"

    def journaled(at: int) -> set[str]:
        return set(DeltaTable(journal, version=at).to_pyarrow_table()["commit_id"].to_pylist())

    for commit_id, version in stamped.items():  # the Delta version that added the row
        assert commit_id in journaled(version) and commit_id not in journaled(version - 1)
        as_of = Warehouse(location, as_of=version)
        con = connect(as_of)
        shown = {
            row[0] for row in con.execute("SELECT commit_id FROM warehouse_commits").fetchall()
        }
        con.close()
        assert shown == {c for c, v in stamped.items() if v <= version}


def test_logs_are_checkpointed_every_ten_commits_and_read_the_same(tmp_path):
    location = warehouse_at(tmp_path / "wh")
    trace = (DATA / "mooncake_conversation_trace.jsonl").read_text().splitlines(keepends=True)
    paths = []
    for i in range(12):  # twelve sources: twelve commits to workload_requests
        path = tmp_path / f"part{i}.jsonl"
        path.write_text("".join(trace[i * 5 : i * 5 + 5]))
        paths.append(str(path))
    warehouse = Warehouse(location, create=True)
    ingest(warehouse, paths)
    storage = open_storage(location)
    for table in ("workload_requests", "_commits"):
        names = [path.rsplit("/", 1)[-1] for path in storage.list_files(f"{table}/_delta_log")]
        checkpoints = [int(n[:20]) for n in names if n.endswith(".checkpoint.parquet")]
        newest = max(int(n[:20]) for n in names if n.endswith(".json"))
        assert checkpoints and newest - max(checkpoints) < 10, (table, sorted(names))
    assert query_rows(location, "SELECT count(*) FROM workload_requests") == [(60,)]
    assert check(Warehouse(location)).problems == []


def _log_entry(path) -> dict:
    """The actions of a Delta log entry, by kind."""
    import json

    return {
        kind: action
        for line in path.read_text().splitlines()
        for kind, action in json.loads(line).items()
    }


@pytest.mark.parametrize(
    "name", ["_commits", "runs", "dsa_steps", "kv_events", "pool_snapshots", "ntz"]
)
def test_version_zero_is_what_delta_lake_writes_for_the_same_schema(tmp_path, name):
    import pyarrow as pa

    from kvtrace.warehouse._delta_log import CHECKPOINT_INTERVAL, version_zero
    from kvtrace.warehouse._journal import JOURNAL_SCHEMA
    from kvtrace.warehouse.schema.tables import TABLES

    schemas = {"_commits": JOURNAL_SCHEMA, "ntz": pa.schema([("at", pa.timestamp("us"))])}
    schema = schemas.get(name) or TABLES[name].schema
    theirs = tmp_path / "theirs"
    DeltaTable.create(
        str(theirs),
        schema=schema,
        configuration={"delta.checkpointInterval": str(CHECKPOINT_INTERVAL)},
    )
    ours = tmp_path / "ours" / "_delta_log" / f"{0:020d}.json"
    ours.parent.mkdir(parents=True)
    ours.write_bytes(version_zero(schema))
    expected = _log_entry(theirs / "_delta_log" / f"{0:020d}.json")
    written = _log_entry(ours)
    assert written["protocol"] == expected["protocol"]
    for key in ("id", "createdTime"):  # a new table's own
        del written["metaData"][key], expected["metaData"][key]
    assert written["metaData"] == expected["metaData"]
    table = DeltaTable(str(ours.parent.parent))
    assert table.version() == 0
    assert table.schema().to_arrow() == DeltaTable(str(theirs)).schema().to_arrow()


def test_tables_created_at_once_get_one_version_zero_and_an_existing_log_is_kept(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from kvtrace.warehouse._delta_log import create_table
    from kvtrace.warehouse.schema.tables import TABLES

    storage = open_storage(tmp_path / "wh")
    schema = TABLES["runs"].schema
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: create_table(storage, "runs", schema), range(32)))
    log = tmp_path / "wh" / "runs" / "_delta_log"
    assert sorted(p.name for p in log.iterdir()) == [f"{0:020d}.json"]
    assert list((tmp_path / "wh" / "_tmp").iterdir()) == []  # no scratch file left
    table_id = _log_entry(log / f"{0:020d}.json")["metaData"]["id"]
    # a table whose early entries are gone (cleaned up after a checkpoint) is not made anew
    (log / f"{0:020d}.json").rename(log / f"{1:020d}.json")
    create_table(storage, "runs", schema)
    assert sorted(p.name for p in log.iterdir()) == [f"{1:020d}.json"]
    assert _log_entry(log / f"{1:020d}.json")["metaData"]["id"] == table_id


def test_a_log_folder_without_a_log_is_one_sentence_not_a_loop(tmp_path, cli):
    trace = DATA / "mooncake_conversation_trace.jsonl"
    location = tmp_path / "wh"
    Warehouse(location, create=True)
    log = location / "workload_requests" / "_delta_log"
    shutil.rmtree(log)
    log.mkdir()
    (log / "notes.txt").write_text("not a log entry")
    status, _, err = cli("-w", str(location), "ingest", str(trace))
    assert status == 1 and err.count("\n") == 1
    assert "table workload_requests" in err and "kvtrace check" in err
