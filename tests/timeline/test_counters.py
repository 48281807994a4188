"""Memory bandwidth counters: the SQL header's worked example by hand, with kvtrace's
order of changes at one instant and HTA's (``definitions := 'hta'``).  HTA's own series
and summary on every HTA trace: ``test_hta_agreement.py``."""

from __future__ import annotations

import json

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.timeline.events import kineto_event


def _copy(name: str, ts: float, dur: float, gbps: float | None) -> dict:
    bandwidth = {"memory bandwidth (GB/s)": gbps} if gbps is not None else {}
    return kineto_event(
        "gpu_memcpy", name, ts, dur, stream=20, correlation=int(ts) + 1, **bandwidth
    )


def test_the_worked_example_by_hand(warehouse, tmp_path):
    events = [
        _copy("Memcpy HtoD (Pinned -> Device)", 0, 10, 5.0),
        _copy("Memcpy HtoD (Pinned -> Device)", 4, 2, 3.0),
        _copy("Memcpy DtoH (Device -> Pinned)", 20, 0, None),  # no bandwidth, 0 us
        _copy("Memcpy DtoD (Device -> Device)", 30, 5, 2.0),
        _copy("Memcpy DtoD (Device -> Device)", 35, 5, 4.0),  # starts as the other ends
    ]
    trace = tmp_path / "copies.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    ingest(warehouse, [str(trace)])
    con = connect(warehouse)
    series = con.sql(
        "SELECT memory_type, t_us, bandwidth_gbps FROM timeline_memory_bandwidth"
    ).fetchall()
    assert series == [
        ("Memcpy DtoD", 30, 2.0),
        ("Memcpy DtoD", 35, 0.0),  # the end first: never 6 GB/s
        ("Memcpy DtoD", 35, 4.0),
        ("Memcpy DtoD", 40, 0.0),
        ("Memcpy DtoH", 20, 0.0),
        ("Memcpy DtoH", 21, 0.0),  # 0 us counts as 1 us
        ("Memcpy HtoD", 0, 5.0),
        ("Memcpy HtoD", 4, 8.0),
        ("Memcpy HtoD", 6, 5.0),
        ("Memcpy HtoD", 10, 0.0),
    ]
    summary = con.sql(
        "SELECT memory_type, points, mean_gbps, busy_us, time_mean_gbps "
        "FROM timeline_memory_bandwidth_summary"
    ).fetchall()
    assert summary == [("Memcpy DtoD", 2, 3.0, 10.0, 3.0), ("Memcpy HtoD", 3, 6.0, 10.0, 5.6)]
    hta_series = con.sql(
        "SELECT memory_type, t_us, bandwidth_gbps "
        "FROM timeline_memory_bandwidth(definitions := 'hta') WHERE memory_type = 'Memcpy DtoD'"
    ).fetchall()
    assert hta_series == [
        ("Memcpy DtoD", 30, 2.0),
        ("Memcpy DtoD", 35, 6.0),  # HTA's order: the start first, then the end
        ("Memcpy DtoD", 35, 4.0),
        ("Memcpy DtoD", 40, 0.0),
    ]
