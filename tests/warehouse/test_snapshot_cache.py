"""Snapshots kept on disk: each version's snapshot is computed once, read back equal to
one computed from the journal, never taken for another version or another warehouse, and
computed again whenever what is kept cannot be read."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse, snapshot_cache
from kvtrace.warehouse import _journal as journal
from tests.conftest import DATA, query_rows, warehouse_at

MOONCAKE = DATA / "mooncake_conversation_trace.jsonl"
VLLM_BENCH = DATA / "workload" / "vllm_bench_example.json"


def _assert_same(kept: journal.Snapshot, computed: journal.Snapshot) -> None:
    assert kept.version == computed.version
    assert kept.commits.equals(computed.commits)
    assert kept.files.equals(computed.files)
    assert kept.retractions == computed.retractions


def _kept(location: str) -> list[str]:
    """The kept snapshots of the warehouse at ``location`` (folders), oldest first."""
    place = snapshot_cache.stored(Warehouse(location).storage)
    assert place is not None
    return sorted(p.name for p in place.folder.parent.iterdir())


def _rows(snapshot: journal.Snapshot, table: str) -> int:
    files = snapshot.files.to_pylist()
    return sum(f["rows"] for f in files if f["table"] == table)


def _no_journal_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the journal was read although the snapshot is kept")

    monkeypatch.setattr(journal, "load", refuse)


def test_a_kept_snapshot_equals_the_one_computed_from_the_journal(warehouse, monkeypatch):
    ingest(warehouse, [str(MOONCAKE), str(VLLM_BENCH)])
    computed = journal.load(warehouse.storage)
    assert Warehouse(warehouse.location).stored_snapshot() is not None  # kept
    _no_journal_reads(monkeypatch)
    _assert_same(Warehouse(warehouse.location).snapshot(), computed)
    assert _kept(warehouse.location)[-1].startswith(f"{computed.version:012d}-")


def test_a_new_commit_is_a_new_snapshot(warehouse):
    ingest(warehouse, [str(MOONCAKE)])
    first = Warehouse(warehouse.location).snapshot()
    ingest(warehouse, [str(VLLM_BENCH)])
    second = Warehouse(warehouse.location).snapshot()
    assert second.version == first.version + 1
    _assert_same(second, journal.load(warehouse.storage))
    kept = [int(name.split("-")[0]) for name in _kept(warehouse.location)]
    assert {first.version, second.version} <= set(kept)


def test_a_warehouse_made_again_at_the_same_place_never_reads_the_old_ones(tmp_path):
    location = warehouse_at(tmp_path / "again")
    old = Warehouse(location, create=True)
    ingest(old, [str(MOONCAKE)])
    assert Warehouse(location).snapshot().files.num_rows > 0
    if old.root is None:
        pytest.skip("the warehouse is removed from local disk only")
    shutil.rmtree(old.root)
    new = Warehouse(location, create=True)
    ingest(new, [str(VLLM_BENCH)])  # the same version number, other commits
    shown = Warehouse(location).snapshot()
    assert shown.version == 1
    _assert_same(shown, journal.load(new.storage))
    assert set(shown.files["table"].to_pylist()).isdisjoint({"workload_requests"})


@pytest.mark.parametrize("damage", ["truncate", "remove"])
def test_a_damaged_kept_snapshot_is_computed_again(warehouse, damage):
    ingest(warehouse, [str(MOONCAKE)])
    Warehouse(warehouse.location).snapshot()
    place = snapshot_cache.stored(warehouse.storage)
    assert place is not None and place.present()
    if damage == "truncate":
        place.files.write_bytes(place.files.read_bytes()[:30])
    else:
        place.commits.unlink()
    computed = journal.load(warehouse.storage)
    _assert_same(Warehouse(warehouse.location).snapshot(), computed)
    rows = _rows(computed, "workload_requests")
    assert query_rows(warehouse.location, "SELECT count(*) FROM workload_requests") == [(rows,)]
    if damage == "truncate":  # a damaged one is kept again whole; a connection reads it too
        place.files.write_bytes(place.files.read_bytes()[:30])
        assert query_rows(warehouse.location, "SELECT count(*) FROM workload_requests") == [(rows,)]
        _assert_same(Warehouse(warehouse.location).snapshot(), computed)


def test_nothing_kept_where_the_cache_cannot_be_written(warehouse, tmp_path, monkeypatch):
    ingest(warehouse, [str(MOONCAKE)])
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("KVTRACE_CACHE_DIR", str(blocked))
    shown = Warehouse(warehouse.location)
    computed = journal.load(warehouse.storage)
    _assert_same(shown.snapshot(), computed)
    assert shown.stored_snapshot() is None
    rows = _rows(computed, "workload_requests")
    assert query_rows(warehouse.location, "SELECT count(*) FROM workload_requests") == [(rows,)]


def test_only_the_newest_versions_are_kept(warehouse, synthetic_trace):
    computed = []
    for i in range(snapshot_cache.KEEP_PER_WAREHOUSE + 3):
        ingest(warehouse, [str(synthetic_trace(run_name=f"r{i}", requests=1, steps=1, layers=1))])
        computed.append(Warehouse(warehouse.location).snapshot().version)
    kept = [int(name.split("-")[0]) for name in _kept(warehouse.location)]
    assert kept == computed[-snapshot_cache.KEEP_PER_WAREHOUSE :]


def test_a_warehouse_made_again_keeps_its_snapshot_beside_those_of_the_ones_before(tmp_path):
    import os

    location = warehouse_at(tmp_path / "again")
    first = Warehouse(location, create=True)
    ingest(first, [str(MOONCAKE)])
    place = snapshot_cache.stored(first.storage)
    assert place is not None and place.present()
    # the snapshots of earlier warehouses at this place, kept before, of higher versions
    # and names that sort after any other
    for i in range(snapshot_cache.KEEP_PER_WAREHOUSE):
        old = place.folder.parent / f"{99 - i:012d}-ffffffffffffffff"
        shutil.copytree(place.folder, old)
        os.utime(old, (1_000_000 + i, 1_000_000 + i))
    if first.root is None:
        first.storage.remove_tree("")
    else:
        shutil.rmtree(first.root)
    again = Warehouse(location, create=True)
    ingest(again, [str(VLLM_BENCH)])
    kept = snapshot_cache.stored(again.storage)
    assert kept is not None and kept.present()  # the query that follows finds it
    assert len(_kept(location)) == snapshot_cache.KEEP_PER_WAREHOUSE


def test_readers_racing_to_keep_one_version_all_see_it_whole(warehouse):
    ingest(warehouse, [str(MOONCAKE), str(VLLM_BENCH)])
    computed = journal.load(warehouse.storage)
    place = snapshot_cache.stored(warehouse.storage)
    assert place is not None
    shutil.rmtree(place.folder.parent)  # the ingest kept it: forgotten, to race for it
    shown: list[journal.Snapshot | None] = []
    failures: list[BaseException] = []

    def read() -> None:
        try:
            kept = Warehouse(warehouse.location).stored_snapshot()
            shown.append(None if kept is None else snapshot_cache.load(kept))
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=read) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == [] and len(shown) == 6
    for snapshot in shown:
        assert snapshot is not None
        _assert_same(snapshot, computed)
    assert _kept(warehouse.location) == [place.folder.name]  # no scratch folder left


def test_an_ingest_keeps_the_version_it_leaves_not_those_of_each_file(warehouse, tmp_path):
    parts = MOONCAKE.read_text().splitlines(keepends=True)
    paths = []
    for i in range(4):
        path = tmp_path / f"part{i}.jsonl"
        path.write_text("".join(parts[i * 5 : i * 5 + 5]))
        paths.append(str(path))
    ingest(warehouse, paths)  # four commits
    newest = journal.load(warehouse.storage).version
    assert [int(name.split("-")[0]) for name in _kept(warehouse.location)] == [newest]


def test_an_earlier_version_is_kept_apart(warehouse):
    ingest(warehouse, [str(MOONCAKE)])
    ingest(warehouse, [str(VLLM_BENCH)])
    place = Warehouse(warehouse.location, as_of=1).stored_snapshot()
    assert place is not None and place.version == 1
    past = snapshot_cache.load(place)
    assert past is not None
    _assert_same(past, journal.load(warehouse.storage, 1))
    _assert_same(Warehouse(warehouse.location, as_of=1).snapshot(), past)
    assert Warehouse(warehouse.location).snapshot().version == 2


def test_a_connection_reads_the_kept_snapshot(warehouse):
    ingest(warehouse, [str(MOONCAKE), str(VLLM_BENCH)])
    computed = journal.load(warehouse.storage)
    for _ in range(2):  # computed and kept, then read from where it is kept
        files = query_rows(
            warehouse.location, "SELECT table_name, path, rows FROM warehouse_files ORDER BY path"
        )
        expected = sorted(
            zip(
                computed.files["table"].to_pylist(),
                computed.files["path"].to_pylist(),
                computed.files["rows"].to_pylist(),
                strict=True,
            ),
            key=lambda row: row[1],
        )
        assert files == expected
        commits = query_rows(
            warehouse.location, "SELECT DISTINCT commit_id FROM warehouse_commits ORDER BY 1"
        )
        assert [c for (c,) in commits] == sorted(computed.commits["commit_id"].to_pylist())


def test_the_newest_version_is_read_from_the_log_names(warehouse):
    ingest(warehouse, [str(MOONCAKE)])
    ingest(warehouse, [str(VLLM_BENCH)])
    assert (
        snapshot_cache.newest_version(warehouse.storage) == journal.load(warehouse.storage).version
    )
    if warehouse.root is not None:
        log = Path(warehouse.root) / snapshot_cache.JOURNAL_LOG
        assert {p.name for p in log.glob("*.json")} >= {f"{v:020d}.json" for v in range(3)}
