"""Compaction after commits: a table that gathers many small files, and the journal, are
compacted by the writer whose commit made them due, by optimize's protocol, outside the
run's lock; never while another maintenance holds its lock; a compaction killed half way
loses and repeats no row, and the next maintenance completes it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse import _compaction as compaction
from kvtrace.warehouse._delta_log import open_table
from kvtrace.warehouse._settle import MAINTENANCE_LOCK
from kvtrace.warehouse.ops.integrity import check
from kvtrace.warehouse.ops.maintenance import leftovers
from kvtrace.warehouse.schema import JOURNAL
from tests.conftest import DATA, ON_S3, warehouse_at

ROWS = 2 * 2 * 2  # requests x steps x layers of each trace


def _traces(synthetic_trace, count: int) -> list[str]:
    return [
        str(synthetic_trace(run_name=f"r{n}", requests=2, steps=2, layers=2, seed=n))
        for n in range(count)
    ]


def _ingest_one_at_a_time(location: str, traces: list[str]) -> list[int]:
    """Each trace ingested by an ingest of its own; the version each left."""
    versions = []
    for trace in traces:
        ingest(Warehouse(location, create=True), [trace])
        versions.append(Warehouse(location).version)
    return versions


def _rows(location: str, as_of: int | None = None) -> dict[str, tuple[int, int]]:
    """Per run name: its DSA rows and distinct record keys."""
    con = connect(Warehouse(location, as_of=as_of))
    try:
        found = con.execute(
            "SELECT r.run_name, count(*), count(DISTINCT (request_id, step_idx, layer_id)) "
            "FROM dsa_steps JOIN runs r USING (run_id) GROUP BY 1"
        ).fetchall()
    finally:
        con.close()
    return {name: (rows, keys) for name, rows, keys in found}


def _answers(location: str) -> list[tuple]:
    con = connect(Warehouse(location))
    try:
        return con.execute(
            "SELECT r.run_name, d.requests, d.steps, d.unique_blocks_mean FROM "
            "(SELECT run_id, count(DISTINCT request_id) AS requests, count(*) AS steps, "
            "avg(unique_blocks) AS unique_blocks_mean FROM dsa_blocks(64) GROUP BY 1) d "
            "JOIN runs r USING (run_id) ORDER BY 1"
        ).fetchall()
    finally:
        con.close()


def _operations(location: str) -> list[str]:
    con = connect(Warehouse(location))
    try:
        rows = con.execute(
            "SELECT DISTINCT warehouse_version, operation FROM warehouse_commits ORDER BY 1"
        ).fetchall()
    finally:
        con.close()
    return [operation for _, operation in rows]


def _ingests(location: str) -> list[str]:
    """The commit ids of the ingests, in the order they landed."""
    commits = Warehouse(location).snapshot().commits.sort_by("warehouse_version")
    return [
        commit
        for commit, operation in zip(
            commits["commit_id"].to_pylist(), commits["operation"].to_pylist(), strict=True
        )
        if operation == "ingest"
    ]


def _journal_files(location: str) -> int:
    table = open_table(Warehouse(location).storage, JOURNAL)
    assert table is not None
    return len(table.file_uris())


def test_commits_compact_a_table_once_it_gathers_many_small_files(
    tmp_path, synthetic_trace, monkeypatch
):
    traces = _traces(synthetic_trace, 5)
    monkeypatch.setenv(compaction.AUTO_COMPACT_ENV, "0")
    plain = warehouse_at(tmp_path / "plain")
    _ingest_one_at_a_time(plain, traces)
    monkeypatch.setenv(compaction.AUTO_COMPACT_ENV, "3")
    location = warehouse_at(tmp_path / "wh")
    versions = _ingest_one_at_a_time(location, traces)

    commits = Warehouse(location).snapshot().table_files("dsa_steps")["commit_id"].to_pylist()
    # the third commit compacted the first three files; the last two wait for a third
    assert sorted(commits, key=str) == sorted([None, *_ingests(location)[3:]], key=str)
    assert len(Warehouse(plain).files("dsa_steps")) == 5
    assert "optimize" in _operations(location)
    assert _journal_files(location) < Warehouse(location).version
    assert _answers(location) == _answers(plain)
    for count, version in enumerate(versions, start=1):  # every version reads as it did
        assert _rows(location, version) == {f"r{n}": (ROWS, ROWS) for n in range(count)}
    assert check(Warehouse(location)).healthy


def test_turned_off_nothing_is_compacted(tmp_path, synthetic_trace, monkeypatch):
    monkeypatch.setenv(compaction.AUTO_COMPACT_ENV, "0")
    location = warehouse_at(tmp_path / "wh")
    _ingest_one_at_a_time(location, _traces(synthetic_trace, 4))
    files = Warehouse(location).snapshot().table_files("dsa_steps")
    assert files.num_rows == 4 and None not in files["commit_id"].to_pylist()
    assert "optimize" not in _operations(location)
    assert _journal_files(location) == 4


def test_a_setting_that_is_no_number_is_one_sentence(tmp_path, synthetic_trace, cli, monkeypatch):
    monkeypatch.setenv(compaction.AUTO_COMPACT_ENV, "many")
    location = warehouse_at(tmp_path / "wh")
    status, _, err = cli("-w", location, "ingest", _traces(synthetic_trace, 1)[0])
    assert status == 1
    assert err.strip() == (
        "Error: KVTRACE_AUTO_COMPACT must be a whole number of files (0 turns compaction "
        "after commits off), not 'many'"
    )
    assert Warehouse(location).version == 0


def test_a_commit_never_waits_for_another_maintenance(tmp_path, synthetic_trace, monkeypatch):
    monkeypatch.setenv(compaction.AUTO_COMPACT_ENV, "2")
    location = warehouse_at(tmp_path / "wh")
    traces = _traces(synthetic_trace, 4)
    Warehouse(location, create=True)
    with Warehouse(location).storage.lock(MAINTENANCE_LOCK):  # a vacuum, say, at work
        _ingest_one_at_a_time(location, traces[:3])
    assert len(Warehouse(location).files("dsa_steps")) == 3  # left for later commits
    _ingest_one_at_a_time(location, traces[3:])
    files = Warehouse(location).snapshot().table_files("dsa_steps")
    assert files["commit_id"].to_pylist() == [None]
    assert _rows(location) == {f"r{n}": (ROWS, ROWS) for n in range(4)}


def test_the_compaction_runs_after_the_run_lock_is_let_go_of(
    tmp_path, synthetic_trace, monkeypatch
):
    monkeypatch.setenv(compaction.AUTO_COMPACT_ENV, "2")
    location = warehouse_at(tmp_path / "wh")
    traces = [
        str(synthetic_trace(run_name="one", block_size=size, requests=1, steps=2, layers=2))
        for size in (32, 64)
    ]
    run_lock_free = []
    compact_due = compaction.compact_due

    def watched(storage, tables, *args):
        run_id = Warehouse(location).snapshot().commits["run_id"].to_pylist()[-1]
        with storage.lock(f"run-{run_id}", wait=False) as free:
            run_lock_free.append(free)
        return compact_due(storage, tables, *args)

    monkeypatch.setattr(compaction, "compact_due", watched)
    ingest(Warehouse(location, create=True), traces)  # both files into run "one"
    assert run_lock_free == [True]
    assert Warehouse(location).snapshot().table_files("dsa_steps")["commit_id"].to_pylist() == [
        None
    ]


def _killed_at(script: str, marker: str, env: dict[str, str]) -> None:
    """Run ``script`` in a process of its own and SIGKILL it once it prints ``marker``."""
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout.readline().strip() == marker
    os.kill(process.pid, signal.SIGKILL)
    process.wait()


@pytest.mark.skipif(
    ON_S3,
    reason="an object store's maintenance lock that a killed process held is taken over "
    "only by a maintenance that waits for it (object_lock.STALE_AFTER_S)",
)
def test_a_compaction_killed_before_its_journal_row_loses_and_repeats_nothing(
    tmp_path, synthetic_trace, monkeypatch
):
    monkeypatch.setenv(compaction.AUTO_COMPACT_ENV, "3")
    location = warehouse_at(tmp_path / "wh")
    traces = _traces(synthetic_trace, 4)
    _ingest_one_at_a_time(location, traces[:2])
    _killed_at(  # the third commit makes the DSA tables due
        "import time\n"
        "from kvtrace.warehouse import _journal as journal, Warehouse\n"
        "from kvtrace.ingest import ingest\n"
        "append = journal.append\n"
        "def stall(storage, row, app_id, *args):\n"
        "    if not app_id.startswith('kvtrace-optimize:'):\n"
        "        return append(storage, row, app_id, *args)\n"
        "    print('compacted', flush=True); time.sleep(60)\n"
        "journal.append = stall\n"
        f"ingest(Warehouse({location!r}), [{traces[2]!r}])\n",
        "compacted",
        dict(os.environ),
    )
    assert _rows(location) == {f"r{n}": (ROWS, ROWS) for n in range(3)}
    found = check(Warehouse(location))
    assert found.healthy
    assert any("was stopped before it was journaled" in note for note in found.notes)
    # the next commit compacts (and writes none of the tables the killed one compacted)
    monkeypatch.setenv(compaction.AUTO_COMPACT_ENV, "1")
    arrivals = tmp_path / "arrivals.jsonl"
    lines = (DATA / "mooncake_conversation_trace.jsonl").read_text().splitlines(keepends=True)
    arrivals.write_text("".join(lines[:3]))
    _ingest_one_at_a_time(location, [str(arrivals)])
    assert "settle" in _operations(location)
    assert _rows(location) == {f"r{n}": (ROWS, ROWS) for n in range(3)}
    found = check(Warehouse(location))
    assert found.healthy and found.notes == []
    _ingest_one_at_a_time(location, traces[3:])
    assert _rows(location) == {f"r{n}": (ROWS, ROWS) for n in range(4)}


def test_a_compaction_after_commits_drops_what_a_dead_ingest_left(
    tmp_path, synthetic_trace, monkeypatch
):
    from kvtrace.warehouse import _object_lock as object_lock
    from kvtrace.warehouse import _object_storage as object_storage

    monkeypatch.setattr(object_lock, "STALE_AFTER_S", 1.0)  # on S3: the dead holder's lock
    monkeypatch.setattr(object_storage, "IN_FLIGHT_S", 2.0)  # and its silent marker
    monkeypatch.setenv(compaction.AUTO_COMPACT_ENV, "2")
    location = warehouse_at(tmp_path / "wh")
    traces = _traces(synthetic_trace, 3)
    Warehouse(location, create=True)
    _killed_at(
        "import time\n"
        "from kvtrace.warehouse import _journal as journal, Warehouse\n"
        "from kvtrace.ingest import ingest\n"
        "def stall(*a, **k):\n"
        "    print('tables committed', flush=True); time.sleep(60)\n"
        "journal.append = stall\n"
        f"ingest(Warehouse({location!r}), [{traces[0]!r}])\n",
        "tables committed",
        dict(os.environ),
    )
    time.sleep(2.5)
    assert {f.alive for f in leftovers(Warehouse(location))} == {False}
    _ingest_one_at_a_time(location, traces[1:])  # the second commit makes dsa_steps due
    assert leftovers(Warehouse(location)) == []
    assert "cleanup" in _operations(location)
    _ingest_one_at_a_time(location, traces[:1])  # retracted: its source commits anew
    assert _rows(location) == {f"r{n}": (ROWS, ROWS) for n in range(3)}
    assert check(Warehouse(location)).healthy


@pytest.mark.parametrize("threshold", ["1", "2"])
def test_the_journal_is_compacted_and_reads_every_commit_once(
    tmp_path, synthetic_trace, monkeypatch, threshold
):
    monkeypatch.setenv(compaction.AUTO_COMPACT_ENV, threshold)
    location = warehouse_at(tmp_path / "wh")
    traces = _traces(synthetic_trace, 4)
    _ingest_one_at_a_time(location, traces)
    assert _journal_files(location) <= int(threshold)
    con = connect(Warehouse(location))
    try:
        ingests = con.execute(
            "SELECT count(*), count(DISTINCT commit_id) FROM warehouse_commits "
            "WHERE operation = 'ingest' AND table_name = 'dsa_steps'"
        ).fetchone()
    finally:
        con.close()
    assert ingests == (4, 4)
    assert check(Warehouse(location)).healthy
