"""The journal's files are read once per storage: later reads fetch only new commits' files,
give the same rows as reading every file, and `check` still reads what is on disk."""

from __future__ import annotations

from pathlib import Path

from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse import _journal as journal
from kvtrace.warehouse.ops.integrity import check
from kvtrace.warehouse.schema import JOURNAL
from tests.conftest import DATA, warehouse_at


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
