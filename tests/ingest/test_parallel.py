"""Files read in worker processes land exactly as when read one after another."""

from __future__ import annotations

import json

import pytest

from kvtrace import connect
from kvtrace.errors import InputError
from kvtrace.ingest import fanout, ingest
from kvtrace.synthetic.timeline import TimelineShape, write_timeline_trace
from kvtrace.warehouse import Warehouse
from tests.conftest import warehouse_at

TABLES = ("dsa_steps", "timeline_events", "runs")


@pytest.fixture(autouse=True)
def workers_for_small_files(monkeypatch):
    """The files here are small: start workers for them all the same."""
    monkeypatch.setattr(fanout, "WORKER_BYTES", 1)


def _contents(warehouse: Warehouse) -> dict[str, list]:
    con = connect(warehouse)
    try:
        return {
            table: con.execute(f"SELECT * EXCLUDE (run_id) FROM {table} ORDER BY ALL").fetchall()
            for table in TABLES
            if table != "runs"
        } | {"runs": con.execute("SELECT run_id, kind FROM runs ORDER BY ALL").fetchall()}
    finally:
        con.close()


@pytest.fixture
def sources(tmp_path, synthetic_trace):
    dsa = synthetic_trace(requests=2, steps=2, layers=4)
    timelines = tmp_path / "profiles"
    timelines.mkdir()
    for rank in range(2):
        write_timeline_trace(
            timelines / f"rank{rank}.pt.trace.json",
            TimelineShape(iterations=2, layers=2),
            rank=rank,
            world_size=2,
        )
    return [str(dsa), str(timelines)]


def test_two_jobs_store_what_one_job_stores(tmp_path, sources):
    one = Warehouse(tmp_path / "one", create=True)
    two = Warehouse(tmp_path / "two", create=True)
    sequential = ingest(one, sources)
    parallel = ingest(two, sources, jobs=2)
    assert [f.path for f in parallel.files] == [f.path for f in sequential.files]
    assert parallel.rows == sequential.rows > 0
    assert _contents(two) == _contents(one)
    assert ingest(two, sources, jobs=2).rows == 0  # already ingested


def test_a_bad_file_among_parallel_ones_is_reported_and_the_good_ones_land(tmp_path, sources):
    bad = tmp_path / "profiles" / "rank9.pt.trace.json"
    bad.write_text('{"traceEvents": 5}')
    warehouse = Warehouse(warehouse_at(tmp_path / "wh"), create=True)
    with pytest.raises(
        InputError,
        match=r"traceEvents is not a list \(rank0\.pt\.trace\.json, "
        r"rank1\.pt\.trace\.json, trace_steps_0_4\.jsonl were committed before it",
    ):
        ingest(warehouse, sources, jobs=2)
    assert (
        ingest(
            warehouse,
            sources[:1] + [str(p) for p in sorted((tmp_path / "profiles").glob("rank[01]*"))],
        ).rows
        == 0
    )


def test_a_record_committed_while_a_file_is_read_is_not_stored_twice(tmp_path, monkeypatch):
    """Profiler traces are read without the run's lock.  A trace that grew is committed
    into the run while its first version is read: that version's records are all held
    by then, so it is read again under the lock and adds none of them."""
    from kvtrace.ingest._record_keys import RecordKeys
    from kvtrace.ingest.readers.kineto import TimelineFamily

    first, grown = tmp_path / "a" / "step.pt.trace.json", tmp_path / "b" / "step.pt.trace.json"
    first.parent.mkdir()
    grown.parent.mkdir()
    write_timeline_trace(first, TimelineShape(iterations=2, layers=2))
    trace = json.loads(first.read_text())
    late = [{**event, "ts": event["ts"] + 10**6} for event in trace["traceEvents"]]
    grown.write_text(json.dumps({**trace, "traceEvents": trace["traceEvents"] + late}))
    location = warehouse_at(tmp_path / "wh")
    warehouse = Warehouse(location, create=True)
    read, reads = TimelineFamily.read, []
    keys_read = RecordKeys.__init__

    def read_keys_then_another_commits(self, spec, stored):
        keys_read(self, spec, stored)
        if reads == [first] and spec.name == "timeline_events":
            ingest(Warehouse(location), [str(grown)], run_name="steps")

    def reading(self, probe, *args):
        reads.append(probe.path)
        return read(self, probe, *args)

    monkeypatch.setattr(RecordKeys, "__init__", read_keys_then_another_commits)
    monkeypatch.setattr(TimelineFamily, "read", reading)
    report = ingest(warehouse, [str(first)], run_name="steps")
    assert reads == [first, grown, first]  # the first version was read again
    (stored,) = connect(warehouse).execute("SELECT count(*) FROM timeline_events").fetchone()
    assert (
        stored == 2 * report.files[0].skipped["record already stored (same rank, event_idx, ts_us)"]
    )
    assert report.rows == 0 and stored > 0
