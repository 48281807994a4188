"""Kineto traces: busy time as a union of intervals, overlap and copy exposure by hand."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import DATA, warehouse_at
from tests.timeline.events import kineto_event


def _trace(path: Path) -> Path:
    events = [
        kineto_event("cpu_op", "ProfilerStep#1", 0, 100),
        kineto_event("kernel", "gemm", 10, 30, stream=7),  # [10, 40)
        kineto_event("kernel", "gemm", 50, 20, stream=7),  # [50, 70)
        kineto_event("kernel", "gemm_overlapping_itself", 15, 10, stream=7),  # inside [10, 40)
        kineto_event(
            "gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 30, 30, stream=20, bytes=3_000_000
        ),  # [30, 60): 20 us under kernels, 10 exposed
        kineto_event(
            "gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 80, 10, stream=21, bytes=1_000
        ),  # [80, 90): exposed
        kineto_event("kernel", "ncclKernel_AllReduce", 0, 20, stream=30),  # [0, 20)
        {"ph": "X", "cat": "kernel", "name": "broken", "ts": "soon", "dur": 1},
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
    ]
    path.write_text(
        json.dumps(
            {
                "schemaVersion": 1,
                "distributedInfo": {"rank": 3, "world_size": 8},
                "traceEvents": events,
            }
        )
    )
    return path


@pytest.fixture
def timeline(warehouse, tmp_path):
    report = ingest(warehouse, [str(_trace(tmp_path / "step.pt.trace.json"))])
    assert [(f.fmt, f.rows, f.rejected) for f in report.files] == [("kineto", 7, 1)]
    con = connect(warehouse)
    yield con
    con.close()


def test_busy_time_is_the_union_of_a_streams_events(timeline):
    rows = timeline.execute(
        "SELECT rank, iteration, stream, busy_us, window_us, idle_us "
        "FROM timeline_stream_busy ORDER BY stream"
    ).fetchall()
    # the GPU window of iteration 1 runs from 0 (nccl) to 90 (the DtoH copy)
    assert rows == [
        (3, 1, 7, 50.0, 90.0, 40.0),
        (3, 1, 20, 30.0, 90.0, 60.0),
        (3, 1, 21, 10.0, 90.0, 80.0),
        (3, 1, 30, 20.0, 90.0, 70.0),
    ]


def test_copies_hidden_behind_kernels_and_exposed(timeline):
    rows = timeline.execute(
        "SELECT copy_kind, copies, bytes, copy_us, overlapped_us, "
        "exposed_us, hidden_share FROM timeline_copy_overlap "
        "ORDER BY copy_kind"
    ).fetchall()
    assert rows == [
        ("DtoH", 1, 1000, 10.0, 0.0, 10.0, 0.0),
        ("HtoD", 1, 3_000_000, 30.0, 20.0, 10.0, pytest.approx(2 / 3)),
    ]


def test_overlap_of_two_stream_sets(timeline):
    row = timeline.execute(
        "SELECT a_busy_us, b_busy_us, overlap_us FROM timeline_overlap([7, 30], [20])"
    ).fetchone()
    # streams 7 and 30 together: [0, 40) and [50, 70) = 60 us; the copy: 30 us; both: 20
    assert row == (60.0, 30.0, 20.0)


def test_kernel_breakdown_by_hta_types(timeline):
    rows = timeline.execute(
        "SELECT kernel_type, kernels, total_us FROM timeline_kernel_breakdown"
    ).fetchall()
    assert rows == [("computation", 3, 60.0), ("memory", 2, 40.0), ("communication", 1, 20.0)]


def test_the_real_kineto_sample_ingests_whole(warehouse, tmp_path):
    sample = DATA / "kineto_sampled_rank0.json.gz"
    trace = json.loads(gzip.decompress(sample.read_bytes()))
    complete = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    report = ingest(warehouse, [str(sample)], run_name="hta-sample")
    assert report.files[0].rows == len(complete) and report.files[0].rejected == 0
    con = connect(warehouse)
    copies = con.execute("SELECT sum(copies), sum(bytes) FROM timeline_copy_overlap").fetchone()
    memcpy = [e for e in complete if e["cat"] == "gpu_memcpy"]
    assert copies == (len(memcpy), sum(e["args"]["bytes"] for e in memcpy))
    streams = {e["args"]["stream"] for e in complete if "stream" in e.get("args", {})}
    busy = {
        s for (s,) in con.execute("SELECT DISTINCT stream FROM timeline_stream_busy").fetchall()
    }
    assert busy == streams


@pytest.mark.parametrize("rank", [0, None])
def test_two_captures_of_one_rank_in_one_folder_are_both_kept_whole(warehouse, tmp_path, rank):
    """Both files go to the folder's run with the same rank and event indices: they are
    different records (their events are at other times), and none is lost."""
    folder = tmp_path / "captures"
    folder.mkdir()
    counts = []
    for step, start in ((100, 1_000), (200, 90_000)):
        events = [kineto_event("kernel", f"k{i}", start + i * 10, 5, stream=7) for i in range(30)]
        info = {"distributedInfo": {"rank": rank}} if rank is not None else {}
        (folder / f"step{step}.pt.trace.json").write_text(
            json.dumps({**info, "traceEvents": events})
        )
        counts.append(len(events))
    report = ingest(warehouse, [str(folder)])
    assert [f.rows for f in report.files] == counts
    assert all(not f.skipped for f in report.files)
    stored = connect(warehouse).execute("SELECT count(*) FROM timeline_events").fetchall()
    assert stored == [(sum(counts),)]
    again = ingest(warehouse, [str(folder / "step100.pt.trace.json")], run_name="captures")
    assert again.files[0].status == "already ingested"


def test_streaming_in_tiny_blocks_and_batches_reads_the_same_events(tmp_path, monkeypatch):
    from kvtrace.ingest.readers import kineto

    trace = _trace(tmp_path / "step.pt.trace.json")
    whole = list(kineto.KinetoReader(trace).batches())
    monkeypatch.setattr(kineto, "BLOCK_BYTES", 97)  # events straddle every block
    monkeypatch.setattr(kineto, "BATCH_EVENTS", 2)
    monkeypatch.setattr(kineto, "_LOOKAHEAD", 5)
    reader = kineto.KinetoReader(trace)
    pieces = list(reader.batches())
    assert len(pieces) == 4 and sum(p.num_rows for p in pieces) == 7
    assert pa.concat_tables(pieces).equals(pa.concat_tables(whole))
    assert reader.header.rank == 3 and len(reader.rejected) == 1


def test_event_boundaries_inside_events_do_not_cut_them(tmp_path, monkeypatch):
    """Runs of events are decoded in one call up to the last ``}, {``; one inside a
    string or a nested list must fall back to event by event, losing nothing."""
    from kvtrace.ingest.readers import kineto

    events = [kineto_event("kernel", f"k{i}", i * 10, 5, stream=7) for i in range(40)]
    events[7]["name"] = 'odd}, {"name": "not an event"'
    events[13]["args"]["Input Dims"] = [{"a": 1}, {"b": 2}]
    events[21]["args"]["nested"] = {"x": {"y": "}, {"}}
    trace = tmp_path / "odd.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": events}, indent=1))
    for lookahead in (5, 200, 1 << 16):
        monkeypatch.setattr(kineto, "_LOOKAHEAD", lookahead)
        monkeypatch.setattr(kineto, "BLOCK_BYTES", 301)
        reader = kineto.KinetoReader(trace)
        rows = pa.concat_tables(list(reader.batches()))
        assert rows["name"].to_pylist() == [e["name"] for e in events], lookahead
        assert rows["ts_us"].to_pylist() == [e["ts"] for e in events]
        assert reader.rejected == []


@pytest.mark.parametrize("content", [bytes(range(256)) * 4, b"[1, 2, 3]", b""])
def test_a_profiler_trace_name_on_something_else_is_one_clear_error(cli, tmp_path, content):
    trace = tmp_path / "rank0.pt.trace.json"
    trace.write_bytes(content)
    status, _, err = cli("-w", warehouse_at(tmp_path / "wh"), "ingest", str(trace))
    assert status == 1 and err.startswith("Error: ") and "Traceback" not in err
    assert "rank0.pt.trace.json holds no JSON object; a Chrome trace is one" in err


def test_a_cut_trace_is_one_clear_error_and_adds_nothing(cli, tmp_path):
    trace = _trace(tmp_path / "cut.pt.trace.json")
    trace.write_text(trace.read_text()[:-60])
    status, _, err = cli("-w", warehouse_at(tmp_path / "wh"), "ingest", str(trace))
    assert status == 1 and "cut.pt.trace.json is cut short or not JSON" in err
    assert "Traceback" not in err
    status, out, _ = cli(
        "-w",
        warehouse_at(tmp_path / "wh"),
        "sql",
        "SELECT count(*) FROM timeline_events",
        "-f",
        "csv",
    )
    assert out.splitlines()[1] == "0"


def test_launches_queue_and_copy_bandwidth(warehouse, tmp_path):
    events = [
        kineto_event("cuda_runtime", "cudaLaunchKernel", 0, 5, correlation=1),
        kineto_event("kernel", "tiny", 10, 2, stream=7, correlation=1),  # shorter than its launch
        kineto_event("cuda_runtime", "cudaLaunchKernel", 6, 4, correlation=2),
        kineto_event("kernel", "big", 12, 20, stream=7, correlation=2),
        kineto_event(
            "gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 40, 100, stream=20, bytes=2 * 2**20
        ),
        kineto_event(
            "gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 140, 100, stream=20, bytes=4 * 2**20
        ),
        kineto_event(
            "gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 240, 1, stream=20, bytes=1024
        ),  # too small to measure bandwidth
    ]
    trace = tmp_path / "launches.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    ingest(warehouse, [str(trace)])
    con = connect(warehouse)
    launches = con.execute(
        "SELECT name, launch_us, launch_delay_us, kernel_us, short_kernel "
        "FROM timeline_launches ORDER BY name"
    ).fetchall()
    assert launches == [("big", 4.0, 6.0, 20.0, False), ("tiny", 5.0, 10.0, 2.0, True)]
    summary = con.execute(
        "SELECT kernels, launch_p50_us, launch_delay_p50_us, short_share "
        "FROM timeline_launch_summary"
    ).fetchone()
    assert summary == (2, 4.5, 8.0, 0.5)
    # queue: +1 at 0, +1 at 6, -1 at 12 (tiny ends), -1 at 32 (big ends)
    queue = con.execute("SELECT window_us, queued, peak FROM timeline_queue_length()").fetchall()
    assert queue == [(0.0, 0, 2)]
    bandwidth = con.execute(
        "SELECT copy_kind, copies, gbps_p50, p50_of_peak FROM "
        "timeline_copy_bandwidth(peak_gbps := 25)"
    ).fetchone()
    median = (2 * 2**20 + 4 * 2**20) / 2 / 100e3  # GB/s: bytes per us / 1e3
    assert bandwidth == ("HtoD", 2, pytest.approx(median), pytest.approx(median / 25))


def test_idle_gaps_are_host_wait_kernel_wait_or_other(warehouse, tmp_path):
    events = [
        kineto_event("cuda_runtime", "cudaLaunchKernel", 0, 1, correlation=1),
        kineto_event("kernel", "a", 1, 10, stream=7, correlation=1),  # [1, 11)
        kineto_event("cuda_runtime", "cudaLaunchKernel", 2, 1, correlation=2),
        kineto_event("kernel", "b", 20, 5, stream=7, correlation=2),  # gap 9, launched at 2: short
        kineto_event("cuda_runtime", "cudaLaunchKernel", 3, 1, correlation=3),
        kineto_event(
            "kernel", "c", 100, 5, stream=7, correlation=3
        ),  # gap 75, launched at 3: other
        kineto_event("cuda_runtime", "cudaLaunchKernel", 150, 1, correlation=4),
        kineto_event("kernel", "d", 160, 5, stream=7, correlation=4),  # gap 55, launched late: host
    ]
    trace = tmp_path / "gaps.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    ingest(warehouse, [str(trace)])
    row = (
        connect(warehouse)
        .execute(
            "SELECT stream, idle_us, host_wait_us, kernel_wait_us, other_us "
            "FROM timeline_idle_breakdown(kernel_wait_us := 30)"
        )
        .fetchone()
    )
    assert row == (7, 9.0 + 75.0 + 55.0, 55.0, 9.0, 75.0)


def test_exposed_copy_time_per_annotated_layer(warehouse, tmp_path):
    trace = _trace(tmp_path / "layers.pt.trace.json")
    document = json.loads(trace.read_text())
    document["traceEvents"] += [
        kineto_event("gpu_user_annotation", "layer_0", 0, 50, stream=7),
        kineto_event("gpu_user_annotation", "layer_1", 50, 50, stream=7),
        kineto_event("user_annotation", "optimizer", 0, 100),
    ]
    trace.write_text(json.dumps(document))
    ingest(warehouse, [str(trace)])
    rows = (
        connect(warehouse)
        .execute(
            "SELECT annotation, spans, copy_us, overlapped_us, exposed_us "
            "FROM timeline_copy_by_annotation('^layer_\\d+$')"
        )
        .fetchall()
    )
    # HtoD [30, 60) under kernels [10, 40) and [50, 70); DtoH [80, 90) alone
    # layer_0 [0, 50): copy [30, 50) = 20, hidden [30, 40) = 10
    # layer_1 [50, 100): copy [50, 60) + [80, 90) = 20, hidden [50, 60) = 10
    assert rows == [("layer_0", 1, 20.0, 10.0, 10.0), ("layer_1", 1, 20.0, 10.0, 10.0)]


def test_args_that_are_not_numbers_read_as_null(tmp_path):
    """A bandwidth or stream given as a boolean or text is null, a number is kept."""
    from kvtrace.ingest.readers import kineto

    values = [12.5, 3, True, "fast", None]
    events = [
        kineto_event("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", i * 10, 5, stream=7)
        for i in range(len(values))
    ]
    for event, value in zip(events, values, strict=True):
        event["args"]["memory bandwidth (GB/s)"] = value
        event["args"]["stream"] = value if value != 12.5 else 12
    trace = tmp_path / "args.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    (table,) = kineto.KinetoReader(trace).batches()
    assert table["memory_bw_gbps"].to_pylist() == [12.5, 3.0, None, None, None]
    assert table["stream"].to_pylist() == [12, 3, None, None, None]
    assert table["copy_kind"].to_pylist() == ["HtoD"] * len(values)


def test_a_fractional_id_sends_its_event_to_the_quarantine_not_rounded(tmp_path):
    from kvtrace.ingest.readers import kineto

    events = [kineto_event("kernel", f"k{i}", i * 10, 5, stream=7) for i in range(3)]
    events[1]["args"]["stream"] = 7.5
    events[2]["args"]["correlation"] = 40.0  # a whole float is the integer it names
    trace = tmp_path / "ids.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    reader = kineto.KinetoReader(trace)
    (table,) = reader.batches()
    assert table["name"].to_pylist() == ["k0", "k2"]
    assert table["correlation"].to_pylist() == [None, 40]
    assert [(bad.line_no, "whole number" in bad.reason) for bad in reader.rejected] == [(2, True)]
