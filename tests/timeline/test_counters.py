"""Memory bandwidth counters: HTA's time series and summary (HTA 0.5, run here) on HTA's
alexnet trace and the real Kineto sample; the SQL header's worked example by hand."""

from __future__ import annotations

import json
import shutil

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import DATA
from tests.timeline.events import kineto_event
from tests.timeline.hta_quiet import quiet_hta

hta = pytest.importorskip("hta.trace_analysis")

TRACES = {
    "alexnet": DATA / "hta_alexnet_trace.json.gz",
    "sample": DATA / "kineto_sampled_rank0.json.gz",
}
STATISTICS = ("count", "mean", "std", "min", "25%", "50%", "75%", "max")


@pytest.mark.parametrize("trace", list(TRACES))
def test_memory_bandwidth_is_htas(warehouse, tmp_path, trace):
    folder = tmp_path / trace
    folder.mkdir()
    shutil.copy(TRACES[trace], folder / TRACES[trace].name)
    ingest(warehouse, [str(folder)])
    with quiet_hta():
        analysis = hta.TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=True)
        (series,) = analysis.get_memory_bw_time_series().values()
        summary = analysis.get_memory_bw_summary()
    con = connect(warehouse)
    found = con.sql(  # times from the first change (HTA's clock starts elsewhere)
        "SELECT memory_type, t_us - min(t_us) OVER (), bandwidth_gbps "
        "FROM timeline_memory_bandwidth"
    ).fetchall()
    start = series["ts"].min()
    expected = sorted(
        zip(series["name"], series["ts"] - start, series["memory_bw_gbps"], strict=True)
    )
    found.sort()
    assert [row[0] for row in found] == [row[0] for row in expected]
    assert [x for row in found for x in row[1:]] == pytest.approx(
        [x for row in expected for x in row[1:]], abs=1e-9
    )
    rows = con.sql(
        "SELECT memory_type, points, mean_gbps, std_gbps, min_gbps, p25_gbps, p50_gbps, "
        "p75_gbps, max_gbps FROM timeline_memory_bandwidth_summary ORDER BY memory_type"
    ).fetchall()
    statistics = summary["memory_bw_gbps"]
    assert [row[0] for row in rows] == [name for _, name in statistics.index]
    assert [x for row in rows for x in row[1:]] == pytest.approx(
        statistics[list(STATISTICS)].values.ravel().tolist(), rel=1e-9
    )


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
