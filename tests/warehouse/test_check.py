"""kvtrace check tells a damaged warehouse from a healthy one, and --repair returns it to
its newest consistent version; ingesting the sources it names restores every row."""

from __future__ import annotations

import random
import shutil

import pytest

from kvtrace import connect
from kvtrace.errors import WarehouseError
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse, snapshot_cache
from kvtrace.warehouse import _journal as journal
from kvtrace.warehouse.ops.integrity import LOG_DIR
from kvtrace.warehouse.ops.maintenance import optimize
from kvtrace.warehouse.schema import TABLE_NAMES
from tests.conftest import query_rows, warehouse_at


@pytest.fixture
def three_ingests(tmp_path, synthetic_trace):
    """A warehouse of three DSA runs of 8 rows each, ingested one after another."""
    location = warehouse_at(tmp_path / "wh")
    warehouse = Warehouse(location, create=True)
    traces = [
        synthetic_trace(run_name=f"run{n}", requests=2, steps=2, layers=2, seed=n) for n in range(3)
    ]
    for trace in traces:
        ingest(warehouse, [str(trace)])
    return location, traces


def _rows(location: str) -> int:
    con = connect(Warehouse(location))
    try:
        return con.execute("SELECT count(*) FROM dsa_steps").fetchone()[0]
    finally:
        con.close()


def _log(location: str, table: str) -> list[str]:
    names = Warehouse(location).storage.listdir(f"{table}/{LOG_DIR}")
    return sorted(n for n in names if n.endswith(".json"))


def _damage_newest_entry(location: str, table: str, content: bytes) -> str:
    storage = Warehouse(location).storage
    newest = _log(location, table)[-1]
    storage.write_atomic(f"{table}/{LOG_DIR}/{newest}", content)
    return newest


def _data_file(location: str, run: str) -> str:
    con = connect(Warehouse(location))
    try:
        return con.execute(
            "SELECT path FROM warehouse_files WHERE table_name = 'dsa_steps' "
            "AND run_id LIKE ? || '-%'",
            [run],
        ).fetchone()[0]
    finally:
        con.close()


def test_a_healthy_warehouse_checks_clean(three_ingests, cli):
    location, _ = three_ingests
    status, out, _ = cli("-w", location, "check")
    # every table's log and the journal's; each DSA ingest writes dsa_steps, requests,
    # runs and the two histograms
    said = f"is healthy: {len(TABLE_NAMES) + 1} logs and 15 data files checked"
    assert status == 0 and out.strip().endswith(said)


def _repair_then_ingest_again(
    cli, location: str, traces, expected_sources: set[str], rows: int = 24
) -> None:
    status, out, _ = cli("-w", location, "check", "--repair")
    assert status == 0, out
    said = out.split("ingest these sources again to restore their rows: ")
    sources = set(said[1].splitlines()[0].split(", ")) if len(said) > 1 else set()
    assert sources == expected_sources
    assert cli("-w", location, "check")[0] == 0
    for trace in traces:
        ingest(Warehouse(location), [str(trace)])
    assert _rows(location) == rows


def _queries_name_check_once_the_kept_snapshots_are_gone(
    cli, location: str, table: str, rows: int
) -> None:
    """A damaged table log leaves the snapshot kept before the damage readable (its
    files are whole); computed from the damaged log, a query names ``kvtrace check``."""
    query = f"SELECT count(*) FROM {table}"
    status, out, _ = cli("-w", location, "sql", query, "-f", "csv")
    assert status == 0 and out.split() == ["count_star()", str(rows)]
    place = snapshot_cache.stored(Warehouse(location).storage)
    assert place is not None
    shutil.rmtree(place.folder.parent)
    status, _, err = cli("-w", location, "sql", query)
    assert status == 1 and "kvtrace check" in err and "report it" not in err


@pytest.mark.parametrize("damage", [b'{"add": {garbled', b'{"commitInfo": {"timestamp": 1'])
def test_a_garbled_or_cut_log_entry_is_named_and_rolled_back(three_ingests, cli, damage):
    location, traces = three_ingests
    version = int(_damage_newest_entry(location, "dsa_steps", damage)[:20])
    status, out, err = cli("-w", location, "check")
    assert status == 1
    problem = next(line for line in out.splitlines() if line.startswith("problem: "))
    assert problem.startswith(f"problem: dsa_steps, version {version}: the log entry is garbled")
    assert "8 row(s) cannot be read" in problem and str(traces[2]) in problem
    assert "'kvtrace check --repair' returns it to its newest consistent version" in err
    _queries_name_check_once_the_kept_snapshots_are_gone(cli, location, "dsa_steps", 24)
    _repair_then_ingest_again(cli, location, traces, {str(traces[2])})


def test_a_missing_version_0_is_written_again_and_loses_nothing(three_ingests, cli):
    location, _ = three_ingests
    Warehouse(location).storage.remove(f"runs/{LOG_DIR}/{0:020d}.json")
    status, out, _ = cli("-w", location, "check")
    assert status == 1 and "problem: runs, version 0: the log entry is missing" in out
    _queries_name_check_once_the_kept_snapshots_are_gone(cli, location, "runs", 3)
    status, out, _ = cli("-w", location, "check", "--repair")
    assert status == 0 and "runs: wrote version 0 of its log again" in out
    assert "ingest these sources again" not in out
    assert _rows(location) == 24


@pytest.mark.parametrize("how", ["missing", "cut short"])
def test_a_missing_or_cut_data_file_takes_its_commit_back(three_ingests, cli, how):
    location, traces = three_ingests
    path = _data_file(location, "run1")
    storage = Warehouse(location).storage
    if how == "missing":
        storage.remove(path)
    else:
        storage.write_atomic(path, (storage.read_bytes(path) or b"")[:100])
    status, out, _ = cli("-w", location, "check")
    assert status == 1
    assert f"data file {path.split('/', 1)[1]}" in out and str(traces[1]) in out
    status, _, err = cli("-w", location, "sql", "SELECT count(*) FROM dsa_steps")
    assert status == 1 and "kvtrace check" in err
    _repair_then_ingest_again(cli, location, traces, {str(traces[1])})


def test_an_empty_newest_journal_entry_no_longer_hides_rows_silently(three_ingests, cli):
    """Delta Lake reads a 0-byte entry as a commit that did nothing: queries answered
    without the last commit's rows, and with no hint, until `kvtrace check` ran."""
    location, traces = three_ingests
    version = int(_damage_newest_entry(location, "_commits", b"")[:20])
    status, out, err = cli("-w", location, "sql", "SELECT count(*) FROM dsa_steps")
    assert status == 1 and out == ""
    assert f"version {version} of the warehouse's journal cannot be read" in err
    assert "the log entry is empty" in err and "'kvtrace check --repair' mends it" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    status, out, _ = cli("-w", location, "check")
    assert status == 1
    assert f"problem: _commits, version {version}: the log entry is empty" in out
    _repair_then_ingest_again(cli, location, traces, {str(traces[2])})


def test_no_commit_lands_on_an_empty_newest_journal_entry(three_ingests, synthetic_trace, cli):
    """A commit made on top of a 0-byte journal entry buried it under a sound one, where
    only `kvtrace check` saw it."""
    location, traces = three_ingests
    version = int(_damage_newest_entry(location, "_commits", b"")[:20])
    later = synthetic_trace(run_name="later", requests=2, steps=2, layers=2, seed=9)
    status, _, err = cli("-w", location, "ingest", str(later))
    assert status == 1 and "'kvtrace check --repair' mends it" in err
    assert _log(location, "_commits")[-1] == f"{version:020d}.json"
    _repair_then_ingest_again(cli, location, traces, {str(traces[2])})


_JOURNAL_DAMAGE = {
    "empty": lambda raw: b"",
    "cut in half": lambda raw: raw[: len(raw) // 2],
    "garbled": lambda raw: raw[:40] + b"\x00\xff garbage \xfe" + raw[60:],
}


@pytest.mark.parametrize("later_commit", [False, True], ids=["newest", "under a later commit"])
@pytest.mark.parametrize("damage", sorted(_JOURNAL_DAMAGE))
def test_a_damaged_journal_entry_loses_only_its_own_commit_and_names_its_source(
    three_ingests, synthetic_trace, cli, damage, later_commit
):
    """Repair moved a damaged journal entry and every later one aside, dropped their
    commits' files and named no source (an empty entry under a later commit); a cut
    entry made `check` and `check --repair` fail like every query."""
    location, traces = three_ingests
    if later_commit:
        traces.append(synthetic_trace(run_name="run3", requests=2, steps=2, layers=2, seed=3))
        ingest(Warehouse(location), [str(traces[3])])
    entries = _log(location, "_commits")
    version = 3  # 0 creates the journal, 1 to 3 record the three ingests
    (rows,) = query_rows(
        location,
        f'SELECT sum("rows") FROM warehouse_commits WHERE warehouse_version = {version} '
        f"AND source_path = '{traces[2]}'",
    )[0]
    storage = Warehouse(location).storage
    path = f"_commits/{LOG_DIR}/{entries[version]}"
    storage.write_atomic(path, _JOURNAL_DAMAGE[damage](storage.read_bytes(path) or b""))
    status, out, _ = cli("-w", location, "check")
    assert status == 1
    problem = next(line for line in out.splitlines() if line.startswith("problem: "))
    assert problem.startswith(f"problem: _commits, version {version}: the log entry is ")
    assert f"; {rows:,} row(s) cannot be read (from {traces[2]})" in problem
    status, out, _ = cli("-w", location, "check", "--repair")
    assert status == 0, out
    assert out.count("ingest these sources again") == 1
    assert f"ingest these sources again to restore their rows: {traces[2]}\n" in out
    assert _log(location, "_commits")[: len(entries)] == entries  # later entries kept
    assert _rows(location) == 8 * (len(traces) - 1)  # every commit but the damaged one's
    assert cli("-w", location, "check")[0] == 0
    for trace in traces:
        ingest(Warehouse(location), [str(trace)])
    assert _rows_per_run(location) == {f"run{n}": 8 for n in range(len(traces))}


def _rows_per_run(location: str) -> dict[str, int]:
    con = connect(Warehouse(location))
    try:
        return dict(
            con.execute(
                "SELECT r.run_name, count(*) FROM dsa_steps JOIN runs r USING (run_id) GROUP BY 1"
            ).fetchall()
        )
    finally:
        con.close()


def test_a_missing_compacted_file_is_replaced_by_the_files_it_was_made_of(three_ingests, cli):
    location, _ = three_ingests
    optimize(Warehouse(location))
    compacted = _data_file_compacted(location)
    Warehouse(location).storage.remove(compacted)
    assert cli("-w", location, "check")[0] == 1
    status, out, _ = cli("-w", location, "check", "--repair")
    assert status == 0 and "by the 3 file(s) it was made from" in out
    assert "ingest these sources again" not in out
    assert _rows(location) == 24


def _data_file_compacted(location: str) -> str:
    con = connect(Warehouse(location))
    try:
        return con.execute(
            "SELECT path FROM warehouse_files WHERE table_name = 'dsa_steps' AND commit_id IS NULL"
        ).fetchone()[0]
    finally:
        con.close()


def _garble_inside(location: str, path: str, size: int | None = 2000) -> None:
    """Overwrite ``size`` bytes in the middle of a Parquet file's pages (all of them when
    None) with random ones, leaving its size and footer as they were."""
    storage = Warehouse(location).storage
    data = bytearray(storage.read_bytes(path) or b"")
    footer = int.from_bytes(data[-8:-4], "little")
    pages = (4, len(data) - 8 - footer)  # after the magic number, before the footer
    size = min(size or pages[1], (pages[1] - pages[0]) // 2)
    start = (pages[0] + pages[1] - size) // 2
    data[start : start + size] = random.Random(7).randbytes(size)
    storage.write_atomic(path, bytes(data))


def test_bytes_garbled_inside_a_data_file_are_found_by_a_deep_check(three_ingests, cli):
    """2,000 random bytes in the middle of a data file (size and footer intact): `check`
    said healthy while a full scan failed."""
    location, traces = three_ingests
    path = _data_file(location, "run1")
    _garble_inside(location, path)
    assert cli("-w", location, "check")[0] == 0  # the footer alone: whole at both ends
    status, out, _ = cli("-w", location, "check", "--deep")
    assert status == 1
    problem = next(line for line in out.splitlines() if line.startswith("problem: "))
    assert problem.startswith(f"problem: dsa_steps, version 2: data file {path.split('/', 1)[1]}")
    assert "has a damaged page" in problem
    assert f"; 8 row(s) cannot be read (from {traces[1]})" in problem
    status, out, _ = cli("-w", location, "check", "--repair", "--deep")
    assert status == 0 and f"ingest these sources again to restore their rows: {traces[1]}\n" in out
    assert cli("-w", location, "check", "--deep")[0] == 0
    for trace in traces:
        ingest(Warehouse(location), [str(trace)])
    assert _rows_per_run(location) == {"run0": 8, "run1": 8, "run2": 8}


def test_a_compacted_file_garbled_inside_is_replaced_by_its_inputs(three_ingests, cli):
    location, _ = three_ingests
    optimize(Warehouse(location))
    compacted = _data_file_compacted(location)
    _garble_inside(location, compacted, None)  # Delta Lake's compaction writes no checksums
    status, out, _ = cli("-w", location, "check", "--deep")
    assert status == 1 and f"data file {compacted.split('/', 1)[1]} has a damaged page" in out
    status, out, _ = cli("-w", location, "check", "--repair", "--deep")
    assert status == 0 and "by the 3 file(s) it was made from" in out
    assert "ingest these sources again" not in out
    assert cli("-w", location, "check", "--deep")[0] == 0
    assert _rows_per_run(location) == {"run0": 8, "run1": 8, "run2": 8}


def test_a_rolled_back_table_takes_its_commits_rows_out_of_compacted_files(three_ingests, cli):
    """The commits a rolled-back log took back kept their rows in the other tables'
    compacted files: seen in dsa_steps although retracted and listed to ingest again."""
    location, traces = three_ingests
    optimize(Warehouse(location))
    storage = Warehouse(location).storage
    storage.write_atomic(f"requests/{LOG_DIR}/{2:020d}.json", b"")  # run1's requests
    status, out, _ = cli("-w", location, "check", "--repair")
    assert status == 0, out
    assert f"ingest these sources again to restore their rows: {traces[1]}, {traces[2]}\n" in out
    assert _rows_per_run(location) == {"run0": 8}
    assert cli("-w", location, "check", "--deep")[0] == 0
    for trace in traces:
        ingest(Warehouse(location), [str(trace)])
    assert _rows_per_run(location) == {"run0": 8, "run1": 8, "run2": 8}


def test_a_damaged_file_of_a_commit_a_later_ingest_completed_is_repaired(
    three_ingests, synthetic_trace, cli, monkeypatch
):
    """A commit whose journal row failed is completed by the next ingest of its source,
    whose row names the first commit's files: repair did not know whose they were."""
    location, traces = three_ingests
    later = synthetic_trace(run_name="run3", requests=2, steps=2, layers=2, seed=3)
    append = journal.append

    def outage(*args, **kwargs):
        raise WarehouseError("the store did not answer")

    monkeypatch.setattr(journal, "append", outage)
    with pytest.raises(WarehouseError):
        ingest(Warehouse(location), [str(later)])
    monkeypatch.setattr(journal, "append", append)
    assert ingest(Warehouse(location), [str(later)]).files[0].status == "ingested"
    Warehouse(location).storage.remove(_data_file(location, "run3"))
    _repair_then_ingest_again(cli, location, [*traces, later], {str(later)}, rows=32)
