"""Maintenance that nothing can trap: vacuum beside a running ingest, a killed optimize,
leftovers of dead writers, versions vacuum freed, and commands that always exit cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse.ops.integrity import check
from kvtrace.warehouse.ops.maintenance import leftovers, optimize, vacuum
from tests.conftest import warehouse_at


def _count(location: str, table: str = "dsa_steps") -> int:
    con = connect(Warehouse(location))
    try:
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        con.close()


def _killed_at(script: str, marker: str) -> None:
    """Run ``script`` in a process of its own and SIGKILL it once it prints ``marker``."""
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == marker
    os.kill(process.pid, signal.SIGKILL)
    process.wait()


def test_vacuum_with_no_retention_keeps_the_files_of_an_ingest_in_flight(tmp_path, synthetic_trace):
    location = warehouse_at(tmp_path / "wh")
    warehouse = Warehouse(location, create=True)
    ingest(warehouse, [str(synthetic_trace(run_name="before", requests=2, steps=2, layers=2))])
    commit = warehouse.begin("running")  # an ingest that has written its files ...
    warehouse.write_rows(commit, "runs", [{"run_id": "running", "run_name": "running"}])
    report = vacuum(Warehouse(location), retain_hours=0, force=True)
    assert "runs" not in report.tables
    assert warehouse.commit(commit)  # ... and commits after the vacuum
    assert _count(location, "runs") == 2
    assert check(Warehouse(location)).healthy


def test_an_optimize_killed_before_its_journal_row_is_no_trap_for_vacuum(
    tmp_path, synthetic_trace, cli
):
    location = warehouse_at(tmp_path / "wh")
    warehouse = Warehouse(location, create=True)
    for n in range(3):
        ingest(
            warehouse,
            [str(synthetic_trace(run_name=f"r{n}", requests=2, steps=2, layers=2, seed=n))],
        )
    _killed_at(
        "from kvtrace.warehouse import _journal as journal\n"
        "from kvtrace.warehouse.ops import maintenance\n"
        "from kvtrace.warehouse import Warehouse\n"
        "import time\n"
        "def stall(*a, **k):\n"
        "    print('compacted', flush=True); time.sleep(60)\n"
        "journal.append = stall\n"
        f"maintenance.optimize(Warehouse({location!r}))\n",
        "compacted",
    )
    assert _count(location) == 24
    status, _, err = cli("-w", location, "vacuum", "--retain-hours", "0", "--force")
    assert status == 0 and "completed the journal of a maintenance command" in err
    assert _count(location) == 24  # before: every query failed ('No files found')
    assert check(Warehouse(location)).healthy
    status, _, _ = cli("-w", location, "optimize")
    assert status == 0 and _count(location) == 24


def test_a_dead_ingest_is_named_by_check_and_cleared_by_the_next_maintenance(
    tmp_path, synthetic_trace, cli, monkeypatch
):
    from kvtrace.warehouse import _object_lock as object_lock
    from kvtrace.warehouse import _object_storage as object_storage

    monkeypatch.setattr(object_lock, "STALE_AFTER_S", 1.0)  # on S3: the dead holder's lock
    monkeypatch.setattr(object_storage, "IN_FLIGHT_S", 2.0)  # and its silent marker
    trace = synthetic_trace(requests=2, steps=3, layers=4)
    location = warehouse_at(tmp_path / "wh")
    Warehouse(location, create=True)
    _killed_at(
        "import time\n"
        "from kvtrace.warehouse import _journal as journal, Warehouse\n"
        "from kvtrace.ingest import ingest\n"
        "def stall(*a, **k):\n"
        "    print('tables committed', flush=True); time.sleep(60)\n"
        "journal.append = stall\n"
        f"ingest(Warehouse({location!r}), [{str(trace)!r}])\n",
        "tables committed",
    )
    time.sleep(2.5)
    status, out, _ = cli("-w", location, "check")
    assert status == 0
    assert "note: 1 commit(s) whose writers died before recording them left" in out
    assert "'kvtrace vacuum' (or 'kvtrace check --repair') drops them now" in out
    status, _, err = cli("-w", location, "optimize")
    assert status == 0 and "dropped" in err and "whose writers died" in err
    assert leftovers(Warehouse(location)) == []
    # the dead commit was retracted: ingesting its source again commits it anew
    assert ingest(Warehouse(location), [str(trace)]).rows == 24
    assert _count(location) == 24


def test_a_retention_under_an_hour_needs_force_and_says_why(warehouse, cli):
    status, _, err = cli("-w", warehouse.location, "vacuum", "--retain-hours", "0.5")
    assert status == 1
    assert "a query or report running now may still read" in err
    assert "give --force to vacuum anyway" in err


def test_as_of_a_version_vacuum_freed_says_so(tmp_path, synthetic_trace, cli):
    location = warehouse_at(tmp_path / "wh")
    warehouse = Warehouse(location, create=True)
    for n in range(2):
        ingest(
            warehouse,
            [str(synthetic_trace(run_name=f"r{n}", requests=2, steps=2, layers=2, seed=n))],
        )
    old = Warehouse(location).version
    optimize(Warehouse(location))
    vacuum(Warehouse(location), retain_hours=0, force=True)
    status, _, err = cli(
        "-w", location, "sql", "--as-of", str(old), "SELECT count(*) FROM dsa_steps"
    )
    assert status == 1
    assert f"version {old} of the warehouse is no longer readable (vacuumed?)" in err
    assert "IOException" not in err and "report it" not in err


def test_concurrent_maintenance_and_ingests_always_exit_cleanly(tmp_path, synthetic_trace):
    """Two of four concurrent vacuums died of SIGABRT at exit (the Delta library's
    threads); every kvtrace command must exit 0 every time."""
    location = warehouse_at(tmp_path / "wh")
    Warehouse(location, create=True)
    traces = [
        synthetic_trace(run_name=f"c{n}", requests=1, steps=2, layers=2, seed=n) for n in range(4)
    ]
    base = [sys.executable, "-m", "kvtrace", "-q", "-w", location]
    for _ in range(3):
        commands = [[*base, "vacuum", "--retain-hours", "0", "--force"] for _ in range(3)]
        commands += [[*base, "optimize"], [*base, "ingest", *map(str, traces)]]
        processes = [
            subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for c in commands
        ]
        for process in processes:
            _, err = process.communicate(timeout=300)
            assert process.returncode == 0, err
    assert _count(location) == 4 * 2 * 2
    assert check(Warehouse(location)).healthy


@pytest.mark.parametrize("retain", [0.0, 1.0])
def test_vacuum_never_deletes_what_the_newest_version_reads(warehouse, synthetic_trace, retain):
    for n in range(3):
        ingest(
            warehouse,
            [str(synthetic_trace(run_name=f"r{n}", requests=2, steps=2, layers=2, seed=n))],
        )
    optimize(warehouse)
    vacuum(warehouse, retain_hours=retain, force=True)
    assert _count(warehouse.location) == 24
    assert check(warehouse).healthy


def _files_on_disk(location: str) -> set[str]:
    storage = Warehouse(location).storage
    return {
        path
        for path in storage.list_files("")
        if path.endswith(".parquet") and "/_delta_log/" not in path
    }


def test_vacuum_counts_only_the_files_it_deletes(tmp_path, synthetic_trace, cli):
    """Delta's vacuum names a removed file's tombstone at every run, present or not: a
    second vacuum reported the first one's count again."""
    location = warehouse_at(tmp_path / "wh")
    warehouse = Warehouse(location, create=True)
    for n in range(3):
        ingest(
            warehouse,
            [str(synthetic_trace(run_name=f"r{n}", requests=2, steps=2, layers=2, seed=n))],
        )
    optimize(Warehouse(location))
    before = _files_on_disk(location)
    status, out, _ = cli("-w", location, "vacuum", "--retain-hours", "0", "--force")
    assert status == 0
    gone = before - _files_on_disk(location)
    said = {
        line.split(": ")[0]: int(line.split(": ")[1].split()[0])
        for line in out.splitlines()
        if line.endswith(" file(s)")
    }
    assert said == Counter(path.split("/", 1)[0] for path in gone)
    assert sum(said.values()) == 15  # the 3 files of each of the 5 tables compacted
    status, out, _ = cli("-w", location, "vacuum", "--retain-hours", "0", "--force")
    assert status == 0 and out.strip() == "nothing to delete"
    assert _files_on_disk(location) == before - gone
    assert _count(location) == 24


@pytest.mark.parametrize("command", ["vacuum", "optimize"])
def test_maintenance_leaves_a_journal_with_an_empty_entry_to_repair(
    tmp_path, synthetic_trace, cli, command
):
    """Maintenance took the files of a commit whose journal entry was emptied for a dead
    writer's and dropped them, naming no source; repair then had nothing to list."""
    location = warehouse_at(tmp_path / "wh")
    warehouse = Warehouse(location, create=True)
    traces = [
        synthetic_trace(run_name=f"r{n}", requests=2, steps=2, layers=2, seed=n) for n in range(3)
    ]
    for trace in traces:
        ingest(warehouse, [str(trace)])
    storage = warehouse.storage
    storage.write_atomic("_commits/_delta_log/00000000000000000002.json", b"")  # r1's
    before = _files_on_disk(location)
    options = ["--retain-hours", "0", "--force"] if command == "vacuum" else []
    status, _, err = cli("-w", location, command, *options)
    assert status == 1 and "'kvtrace check --repair' mends it" in err
    assert _files_on_disk(location) == before
    status, out, _ = cli("-w", location, "check", "--repair")
    assert status == 0 and f"ingest these sources again to restore their rows: {traces[1]}\n" in out
