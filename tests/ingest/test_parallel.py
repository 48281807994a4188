"""Files read in worker processes land exactly as when read one after another."""

from __future__ import annotations

import pytest

from kvtrace import connect
from kvtrace.errors import InputError
from kvtrace.ingest import ingest
from kvtrace.synthetic.timeline import TimelineShape, write_timeline_trace
from kvtrace.warehouse import Warehouse
from tests.conftest import warehouse_at

TABLES = ("dsa_steps", "timeline_events", "runs")


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
