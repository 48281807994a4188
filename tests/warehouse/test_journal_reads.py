"""The journal's files are read once per storage: later reads fetch only new commits' files,
give the same rows as reading every file, and `check` still reads what is on disk; a
compacted journal reads every row once."""

from __future__ import annotations

from pathlib import Path

from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse import _journal as journal
from kvtrace.warehouse._compaction import compact
from kvtrace.warehouse._delta_log import active_files, open_table
from kvtrace.warehouse._settle import MAINTENANCE_LOCK
from kvtrace.warehouse.ops.integrity import check
from kvtrace.warehouse.schema import JOURNAL
from tests.conftest import DATA, query_rows, warehouse_at


def _parts(folder: Path, count: int) -> list[str]:
    trace = (DATA / "mooncake_conversation_trace.jsonl").read_text().splitlines(keepends=True)
    paths = []
    for i in range(count):
        path = folder / f"part{i}.jsonl"
        path.write_text("".join(trace[i * 3 : i * 3 + 3]))
        paths.append(str(path))
    return paths


def test_a_read_fetches_only_the_new_commits_files_and_gives_every_row(tmp_path, monkeypatch):
    warehouse = Warehouse(warehouse_at(tmp_path / "wh"), create=True)
    paths = _parts(tmp_path, 6)
    ingest(warehouse, paths[:5])
    fetched: list[str] = []
    reader = journal._read_file
    monkeypatch.setattr(journal, "_read_file", lambda fs, p: fetched.append(p) or reader(fs, p))
    first = journal.load_rows(warehouse.storage)
    fetched.clear()
    ingest(warehouse, paths[5:])  # one more commit: one more journal file, read once
    cached = journal.load_rows(warehouse.storage)
    assert len(fetched) == 1
    fetched.clear()
    whole = journal.load_rows(warehouse.storage, cached=False)
    assert len(fetched) == len(cached) == len(first) + 1
    assert cached.sort_by("commit_id").equals(whole.sort_by("commit_id"))


def test_check_reads_the_journal_on_disk_not_what_a_read_kept(tmp_path):
    warehouse = Warehouse(warehouse_at(tmp_path / "wh"), create=True)
    ingest(warehouse, _parts(tmp_path, 2))
    journal.load_rows(warehouse.storage)  # every journal file now kept in memory
    if warehouse.root is None:
        return  # the file is damaged on local disk only
    victim = next((warehouse.root / JOURNAL).glob("*.parquet"))
    victim.write_bytes(victim.read_bytes()[:20])  # cut short, as a failed upload leaves it
    problems = check(warehouse).problems  # seen, although a read before kept its rows
    assert [p.table for p in problems] == [JOURNAL]
    assert "the journal of the warehouse is unreadable" in problems[0].what


def test_past_the_bound_files_are_read_again_and_the_rows_stay_whole(tmp_path, monkeypatch):
    warehouse = Warehouse(warehouse_at(tmp_path / "wh"), create=True)
    ingest(warehouse, _parts(tmp_path, 4))
    monkeypatch.setattr(journal, "KEPT_FILES", 2)
    journal._JOURNAL_FILES.pop(warehouse.storage, None)
    fetched: list[str] = []
    reader = journal._read_file
    monkeypatch.setattr(journal, "_read_file", lambda fs, p: fetched.append(p) or reader(fs, p))
    first = journal.load_rows(warehouse.storage)
    assert len(fetched) == len(first) == 4 and len(journal._JOURNAL_FILES[warehouse.storage]) == 2
    fetched.clear()
    again = journal.load_rows(warehouse.storage)
    assert len(fetched) == 2  # the two not kept
    assert again.sort_by("commit_id").equals(first.sort_by("commit_id"))


def test_a_compaction_entry_a_repair_wrote_again_repeats_no_row(tmp_path, cli):
    """A journal compaction's entry, emptied and written again by a repair as a commit
    that changes nothing, lists the files it merged again beside the file a later
    compaction merged them into: each row is still read once."""
    location = warehouse_at(tmp_path / "wh")
    warehouse = Warehouse(location, create=True)
    paths = _parts(tmp_path, 5)
    storage = warehouse.storage
    ingest(warehouse, paths[:3])
    with storage.lock(MAINTENANCE_LOCK):
        compact(storage, [JOURNAL])
    first = Warehouse(location).version  # the first compaction's version
    ingest(Warehouse(location), paths[3:])
    with storage.lock(MAINTENANCE_LOCK):
        compact(storage, [JOURNAL])
    before = journal.load_rows(storage, cached=False)
    storage.write_atomic(f"{JOURNAL}/_delta_log/{first:020d}.json", b"")
    status, out, _ = cli("-w", location, "check", "--repair")
    assert status == 0 and "ingest these sources again" not in out
    listed = active_files(open_table(storage, JOURNAL))["path"].to_pylist()
    assert len(listed) == 4  # the first three commits' files again, and the second compaction's
    rows = journal.load_rows(storage, cached=False)
    assert rows.sort_by("commit_id").equals(before.sort_by("commit_id"))
    assert query_rows(
        location, "SELECT count(DISTINCT run_id), count(*) FROM workload_requests"
    ) == [(5, 15)]
    assert check(Warehouse(location)).healthy
