"""Generated traces (``tests.timeline.events.kineto_traces``: fractional and whole times,
zero-length events, repeated instants, syncs on stream -1, GPU events no call launched):
kvtrace's ``definitions := 'hta'`` give HTA 0.5's answers on each (HTA run here), and
kvtrace's own views keep their invariants, which need no reference.

Each example is a batch of traces, one run each in one warehouse, so that kvtrace answers
every question once per batch (its queries cost about as much on one trace as on six).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtrace import connect
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from tests.conftest import warehouse_at
from tests.timeline.events import kineto_traces
from tests.timeline.hta_reference import differences, hta_answers, kvtrace_answers

pytest.importorskip("hta.trace_analysis")

BATCH = 10
EXAMPLES = 2  # BATCH * EXAMPLES traces in all


def _ingested(root: Path, traces: list[dict[str, Any]]) -> tuple[list[Path], Warehouse]:
    folders = []
    for number, trace in enumerate(traces):
        folder = root / f"trace{number}"
        folder.mkdir()
        # (generated traces may repeat: a copy would be "already ingested")
        (folder / "rank0.pt.trace.json").write_text(json.dumps({**trace, "trace": number}))
        folders.append(folder)
    warehouse = Warehouse(warehouse_at(root / "wh"), create=True)
    ingest(warehouse, [str(folder) for folder in folders])
    return folders, warehouse


def _check_invariants(con: duckdb.DuckDBPyConnection) -> None:
    """What holds on any trace: GPU time within the span, idle and busy adding up to it,
    percentiles in order."""
    for run_id, span, idle, compute, non_compute in con.sql(
        "SELECT run_id, kernel_time_us, idle_us, compute_us, non_compute_us "
        "FROM timeline_temporal_breakdown"
    ).fetchall():
        busy = span - idle
        assert 0 <= busy <= span, f"{run_id}: GPU busy {busy} us outside the span {span} us"
        assert compute >= 0 and non_compute >= 0, (run_id, compute, non_compute)
        assert idle + compute + non_compute == pytest.approx(span), run_id
    for run_id, stream, iteration, busy, window, idle in con.sql(
        "SELECT run_id, stream, iteration, busy_us, window_us, idle_us FROM timeline_stream_busy"
    ).fetchall():
        where = f"{run_id} stream {stream} iteration {iteration}"
        assert 0 <= busy <= window + 1e-9, f"{where}: busy {busy} us, window {window} us"
        assert busy + idle == pytest.approx(window), where
    gaps = con.sql(
        "SELECT i.run_id, i.stream, i.iteration, i.idle_us, i.host_wait_us, i.kernel_wait_us, "
        "i.other_us, b.idle_us FROM timeline_idle_breakdown() AS i "
        "JOIN timeline_stream_busy AS b USING (run_id, rank, iteration, stream)"
    ).fetchall()
    for run_id, stream, iteration, idle, host, kernel, other, stream_idle in gaps:
        where = f"{run_id} stream {stream} iteration {iteration}"
        assert min(host, kernel, other) >= 0, where
        assert host + kernel + other == pytest.approx(idle), where
        assert idle <= stream_idle + 1e-9, f"{where}: gaps {idle} us, stream idle {stream_idle}"
    hta = "(definitions := 'hta')"
    kernel_durations = ("min_us", "p50_us", "p90_us", "p99_us", "max_us")
    launch_delays = ("launch_delay_p50_us", "launch_delay_p95_us")
    bandwidth = ("min_gbps", "p25_gbps", "p50_gbps", "p75_gbps", "max_gbps")
    for view, columns in (
        ("timeline_kernel_durations", kernel_durations),
        (f"timeline_kernel_durations{hta}", kernel_durations),
        ("timeline_launch_summary", launch_delays),
        (f"timeline_launch_summary{hta}", launch_delays),
        ("timeline_memory_bandwidth_summary", bandwidth),
        (f"timeline_memory_bandwidth_summary{hta}", bandwidth),
        ("timeline_copy_bandwidth()", ("gbps_p10", "gbps_p50", "gbps_p90")),
    ):
        for row in con.sql(f"SELECT {', '.join(columns)} FROM {view}").fetchall():
            assert list(row) == sorted(row), f"{view}: {dict(zip(columns, row, strict=True))}"


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(kineto_traces(), min_size=BATCH, max_size=BATCH))
def test_generated_traces_give_htas_answers_and_keep_the_invariants(traces):
    with tempfile.TemporaryDirectory() as tmp:
        folders, warehouse = _ingested(Path(tmp), traces)
        con = connect(warehouse)
        try:
            _check_invariants(con)
            ours = {run_id.rsplit("-", 1)[0]: a for run_id, a in kvtrace_answers(con).items()}
        finally:
            con.close()
        found = []
        for folder, trace in zip(folders, traces, strict=True):
            if wrong := differences(folder.name, ours.get(folder.name, {}), hta_answers(folder)):
                found += [*wrong, f"{folder.name}: {json.dumps(trace['traceEvents'])}"]
    assert not found, "\n".join(found)
