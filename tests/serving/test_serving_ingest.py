"""Ingest of pool time series and request metrics: aliases, time stamps, bad lines."""

from __future__ import annotations

import json

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import local_only
from tests.serving.fixtures import request_rows, write


@local_only
def test_pool_and_metrics_of_one_experiment_share_a_run(warehouse, tmp_path):
    write(
        tmp_path / "exp1_1p7d_pool_timeseries.jsonl",
        [
            {
                "worker_id": "decode-0",
                "t_s": 1.0,
                "held_tokens": 1,
                "available_tokens": 2,
                "capacity_tokens": 10,
            }
        ],
    )
    write(tmp_path / "exp1_1p7d_metrics.jsonl", request_rows()[:3])
    ingest(warehouse, [str(tmp_path)], experiment="exp1")
    con = connect(warehouse)
    runs = con.execute("SELECT DISTINCT run_name, kind FROM runs").fetchall()
    assert runs == [("exp1_1p7d", "serving")]
    pool_run = con.execute("SELECT DISTINCT run_id, experiment FROM pool_snapshots").fetchall()
    assert (
        pool_run
        == con.execute("SELECT DISTINCT run_id, experiment FROM request_metrics").fetchall()
    )
    assert pool_run[0][1] == "exp1"
    folders = [p.name for p in (warehouse.root / "pool_snapshots").iterdir()]
    assert sorted(folders)[0] == "_delta_log"
    assert all(name.startswith("run=") for name in sorted(folders)[1:])


def test_aliases_and_wall_clock_stamps(warehouse, tmp_path):
    path = write(
        tmp_path / "pool.jsonl",
        [
            {
                "worker": "decode-1",
                "role": "decode",
                "timestamp": "2026-04-29T12:00:00Z",
                "held_tokens": 5,
                "available_tokens": 5,
                "capacity_tokens": 20,
            },
            {
                "worker": "decode-1",
                "role": "decode",
                "timestamp": "2026-04-29T12:00:02.5Z",
                "held_tokens": 6,
                "available_tokens": 4,
                "capacity_tokens": 20,
            },
        ],
    )
    ingest(warehouse, [str(path)], run_name="r")
    rows = (
        connect(warehouse)
        .execute("SELECT worker_id, worker_role, t_s, other_tokens FROM pool_other ORDER BY t_s")
        .fetchall()
    )
    assert rows == [("decode-1", "decode", 0.0, 10), ("decode-1", "decode", 2.5, 10)]


def test_bad_serving_lines_are_quarantined(warehouse, tmp_path):
    good = request_rows()[0]
    path = write(
        tmp_path / "m_metrics.jsonl",
        [
            good,
            {**good, "request_id": "r1", "latency_s": "slow"},
            {**good, "request_id": "r2", "turn_id": 1.5},
            {**good, "request_id": "r3", "truncated": "no"},
        ],
    )
    path.write_text(path.read_text() + json.dumps(good)[:30] + "\n")
    report = ingest(warehouse, [str(path)])
    assert (report.rows, report.rejected) == (1, 4)
    reasons = [
        r
        for (r,) in connect(warehouse)
        .execute("SELECT reason FROM quarantine ORDER BY line_no")
        .fetchall()
    ]
    assert reasons[0] == "bad value: latency_s must be a number, got 'slow'"
    assert reasons[1] == "bad value: turn_id must be an integer, got 1.5"
    assert reasons[2] == "bad value: truncated must be true or false, got 'no'"
    assert reasons[3].startswith("invalid JSON")


def test_reingesting_serving_files_adds_nothing_and_kind_can_be_forced(warehouse, tmp_path):
    path = write(tmp_path / "odd.jsonl", [{"request_id": "x", "session_id": "s"}])
    first = ingest(warehouse, [str(path)], kind="requests")
    again = ingest(warehouse, [str(path)], kind="requests")
    assert (first.rows, again.files[0].status) == (1, "already ingested")
    status = connect(warehouse).execute("SELECT status FROM request_metrics").fetchall()
    assert status == [("ok",)]


def test_a_run_summary_lands_beside_its_run(warehouse, tmp_path):
    (tmp_path / "exp1_1p7d_summary.json").write_text('{"requests": 4449, "errors": 6}')
    (tmp_path / "summary.json").write_text('{"config": {}}')  # a DSA sidecar, not a summary
    write(tmp_path / "exp1_1p7d_metrics.jsonl", request_rows()[:2])
    report = ingest(warehouse, [str(tmp_path)])
    assert sorted(f.fmt for f in report.files) == ["requests", "summary"]
    con = connect(warehouse)
    errors = con.execute("SELECT summary->>'$.errors' FROM run_summaries").fetchall()
    assert errors == [("6",)]
    assert con.execute(
        "SELECT count(DISTINCT run_id) FROM (SELECT run_id FROM "
        "run_summaries UNION ALL SELECT run_id FROM request_metrics)"
    ).fetchone() == (1,)
