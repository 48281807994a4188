"""Nsight Systems SQLite exports: every event of a small export, hand-worked, and the
timeline views reading it exactly as they read the same events written as a Kineto trace.

The exports are built with the schema NVIDIA documents (`tests.timeline.nsys_export`).
The Kineto trace beside them is written by hand with Kineto's own conventions
(pytorch/kineto 114171dfba6867d2a898634670d9a3197dbb9595, libkineto/src: GPU events on pid
= device and tid = stream, ``Memcpy HtoD (Pinned -> Device)`` names from
cupti_strings.cpp, API names without their ``_vNNNN`` suffix, an event or context sync on
stream -1, bandwidth = bytes / duration in ns; an event sync or stream wait with
``wait_on_stream`` and ``wait_on_cuda_event_record_corr_id`` from the latest record of its
event before it, -1 for both where there is none: CuptiActivityProfiler.cpp and
CuptiActivity.h).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from kvtrace.ingest.readers.nsys import api_name, copy_kind, rank_in_name
from kvtrace.warehouse import Warehouse
from tests.conftest import run_kvtrace, warehouse_at
from tests.timeline.events import kineto_event
from tests.timeline.nsys_export import GEMM, NCCL, NsysExport, copy_wait_example, example


def _kineto_trace(path: Path) -> Path:
    """The events of `example` as PyTorch's profiler writes them, rank 2, in the same
    order."""

    def annotation(name: str, ts: float, dur: float) -> dict:
        return {**kineto_event("user_annotation", name, ts, dur), "pid": 4242, "tid": 4242}

    def call(category: str, name: str, ts: float, dur: float, correlation: int) -> dict:
        event = kineto_event(category, name, ts, dur, correlation=correlation)
        return {**event, "pid": 4242, "tid": 4242}

    def gpu(category: str, name: str, ts: float, dur: float, stream: int, **args: object):
        event = kineto_event(category, name, ts, dur, stream=stream, **args)
        return event

    def copy(name: str, ts: float, dur: float, stream: int, correlation: int, count: int):
        bandwidth = {"memory bandwidth (GB/s)": count / (dur * 1000)}
        args = {"correlation": correlation, "bytes": count, **bandwidth}
        return gpu("gpu_memcpy" if name.startswith("Memcpy") else "gpu_memset", name, ts, dur,
                   stream, **args)  # fmt: skip

    # ts: Unix time less Kineto's base time, in us; the session began 1 s after the base
    events = [
        annotation("ProfilerStep#1", 1_000_001.0, 100.0),
        annotation("decode", 1_000_002.0, 88.0),
        call("cuda_driver", "cuModuleGetFunction", 1_000_003.0, 0.5, 8),
        call("cuda_runtime", "cudaLaunchKernel", 1_000_005.0, 3.0, 1),
        call("cuda_runtime", "cudaMemcpyAsync", 1_000_009.0, 3.5, 2),
        gpu("kernel", GEMM, 1_000_010.0, 30.0, 7, correlation=1),
        copy("Memcpy HtoD (Pinned -> Device)", 1_000_030.0, 30.0, 20, 2, 3_000_000),
        call("cuda_runtime", "cudaLaunchKernel", 1_000_045.0, 2.25, 3),
        call("cuda_runtime", "cudaMemsetAsync", 1_000_048.0, 1.0, 4),
        gpu("kernel", GEMM, 1_000_050.0, 20.0, 7, correlation=3),
        call("cuda_runtime", "cudaLaunchKernel", 1_000_060.0, 1.0, 5),
        gpu("kernel", NCCL, 1_000_062.0, 18.0, 30, correlation=5),
        copy("Memset (Device)", 1_000_071.5, 1.0, 7, 4, 4096),
        call("cuda_runtime", "cudaMemcpyAsync", 1_000_075.0, 1.0, 6),
        copy("Memcpy DtoH (Device -> Pageable)", 1_000_080.0, 10.5, 20, 6, 1000),
        call("cuda_runtime", "cudaDeviceSynchronize", 1_000_091.0, 8.0, 7),
        gpu("cuda_sync", "Context Sync", 1_000_091.2, 7.6, -1, correlation=7),
    ]
    base = {"baseTimeNanoseconds": 215 * 7_889_238 * 10**9}
    trace = {"schemaVersion": 1, "distributedInfo": {"rank": 2, "world_size": 4}, **base}
    path.write_text(json.dumps({**trace, "traceEvents": events}))
    return path


@pytest.fixture
def both(tmp_path):
    """A warehouse holding the export (run "nsys") and the Kineto trace (run "kineto")."""
    (tmp_path / "nsys").mkdir()
    (tmp_path / "kineto").mkdir()
    export = example().write(tmp_path / "nsys" / "worker_rank2.sqlite")
    trace = _kineto_trace(tmp_path / "kineto" / "worker.pt.trace.json")
    warehouse = Warehouse(warehouse_at(tmp_path / "wh"), create=True)
    report = ingest(warehouse, [str(export)])
    assert [(f.family, f.fmt, f.rows, f.rejected) for f in report.files] == [
        ("nsys", "nsys", 17, 1)
    ]
    assert report.files[0].skipped == {
        "NVTX mark (an instant, not a range)": 1,
        "NVTX range that never ended": 1,
    }
    assert ingest(warehouse, [str(trace)]).files[0].rows == 17
    con = connect(warehouse)
    yield con
    con.close()


def _run(con, sql: str, run: str, *params: object) -> list[tuple]:
    """Rows of ``sql`` (which selects run_id first) for one run, without the run id."""
    rows = con.execute(sql, list(params)).fetchall()
    run_id = con.execute("SELECT run_id FROM runs WHERE run_name = ?", [run]).fetchone()[0]
    return sorted((row[1:] for row in rows if row[0] == run_id), key=repr)


def test_each_table_of_the_export_becomes_the_rows_kineto_would_give(both):
    rows = _run(
        both,
        "SELECT run_id, event_idx, rank, pid, tid, stream, device, category, name, ts_us, "
        "dur_us, correlation, copy_kind, bytes, memory_bw_gbps, iteration "
        "FROM timeline_events",
        "nsys",
    )
    by_index = {row[0]: row[1:] for row in rows}
    # the first gemm: [10 000, 40 000) ns into the session, which began 1 s after Kineto's
    # base time: at 1 000 010 us, 30 us long, on stream 7 of device 0
    assert by_index[5] == (
        2, "0", "7", 7, 0, "kernel", GEMM, 1_000_010.0, 30.0, 1, None, None, None, 1,
    )  # fmt: skip
    # 3 000 000 bytes in 30 000 ns: 100 bytes per ns, 100 GB/s
    assert by_index[6] == (
        2, "0", "20", 20, 0, "gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 1_000_030.0, 30.0, 2,
        "HtoD", 3_000_000, 100.0, 1,
    )  # fmt: skip
    assert by_index[14][6:] == (
        "Memcpy DtoH (Device -> Pageable)", 1_000_080.0, 10.5, 6, "DtoH", 1000, 1000 / 10_500, 1,
    )  # fmt: skip
    assert by_index[12][6:] == ("Memset (Device)", 1_000_071.5, 1.0, 4, None, 4096, 4.096, 1)
    # the launch: the calling thread of process 4242, without nsys's _v7000
    assert by_index[3] == (
        2, "4242", "4242", None, None, "cuda_runtime", "cudaLaunchKernel", 1_000_005.0, 3.0, 1,
        None, None, None, 1,
    )  # fmt: skip
    assert by_index[2][5:9] == ("cuda_driver", "cuModuleGetFunction", 1_000_003.0, 0.5)
    # a context sync has no stream: -1, as Kineto writes it
    assert by_index[16][:9] == (2, "0", "-1", -1, 0, "cuda_sync", "Context Sync", 1_000_091.2, 7.6)
    # NVTX ranges are annotations; a registered string is read through StringIds
    assert by_index[0][5:9] == ("user_annotation", "ProfilerStep#1", 1_000_001.0, 100.0)
    assert by_index[1][:8] == (
        2,
        "4242",
        "4242",
        None,
        None,
        "user_annotation",
        "decode",
        1_000_002.0,
    )
    assert sorted(by_index) == list(range(17))


def test_the_export_and_the_kineto_trace_are_the_same_rows(both):
    sql = "SELECT * EXCLUDE (iteration) FROM timeline_events"
    assert _run(both, sql, "nsys") == _run(both, sql, "kineto")


def test_a_launch_finds_its_kernel_by_correlation(both):
    rows = _run(
        both,
        "SELECT run_id, name, launch_us, launch_delay_us, kernel_us FROM timeline_launches",
        "nsys",
    )
    # gemm: called at 5 for 3 us, starts at 10; the second at 45 for 2.25, starts at 50;
    # the all-reduce at 60 for 1, starts at 62
    assert rows == sorted(
        [(GEMM, 3.0, 5.0, 30.0), (GEMM, 2.25, 5.0, 20.0), (NCCL, 1.0, 2.0, 18.0)], key=repr
    )


def test_an_nvtx_range_is_an_annotation_the_copy_views_read(both):
    rows = _run(
        both,
        "SELECT run_id, * EXCLUDE (run_id) FROM timeline_copy_by_annotation('^decode$')",
        "nsys",
    )
    kineto = _run(
        both,
        "SELECT run_id, * EXCLUDE (run_id) FROM timeline_copy_by_annotation('^decode$')",
        "kineto",
    )
    assert rows == kineto and rows


@pytest.mark.parametrize(
    "definitions, expected",
    [
        # per stream: gaps 40 -> 50 (its launch at 45 came after 40: host_wait) and
        # 70 -> 71.5 (launched at 48: a short kernel_wait) on stream 7; 60 -> 80 on
        # stream 20 (launched at 75: host_wait); all in iteration 1
        ("kvtrace", [(2, 1, 7, 11.5, 10.0, 1.5, 0.0), (2, 1, 20, 20.0, 20.0, 0.0, 0.0)]),
        # HTA's: whole microseconds, the memset [71.5, 72.5) read as [72, 72)
        ("hta", [(2, -1, 7, 12.0, 10.0, 2.0, 0.0), (2, -1, 20, 20.0, 20.0, 0.0, 0.0)]),
    ],
)
def test_the_idle_breakdown_of_the_export_is_worked_by_hand(both, definitions, expected):
    sql = "SELECT * FROM timeline_idle_breakdown(definitions := ?)"
    assert _run(both, sql, "nsys", definitions) == sorted(expected, key=repr)
    assert _run(both, sql, "kineto", definitions) == sorted(expected, key=repr)


@pytest.mark.parametrize(
    "definitions, expected",
    [
        # summed durations: gemms 30 + 20, all-reduce 18, copies 30 + 10.5 and memset 1
        ("kvtrace", {"computation": (2, 50.0), "memory": (3, 41.5), "communication": (1, 18.0)}),
        # merged and swept, whole microseconds from 10 to 90: gemm alone [10, 30) and
        # [60, 62); with the HtoD copy [30, 40) and [50, 60); the copy alone [40, 50) and
        # the DtoH [80, 90); with the all-reduce [62, 70); the all-reduce alone [70, 80)
        (
            "hta",
            {
                "computation": (2, 22.0),
                "computation overlapping memory": (None, 20.0),
                "memory": (3, 20.0),
                "computation overlapping communication": (None, 8.0),
                "communication": (1, 10.0),
            },
        ),
    ],
)
def test_the_kernel_breakdown_of_the_export_is_worked_by_hand(both, definitions, expected):
    sql = (
        "SELECT run_id, kernel_type, kernels, total_us, share "
        "FROM timeline_kernel_breakdown(definitions := ?)"
    )
    total = sum(us for _, us in expected.values())
    want = sorted(((t, n, us, us / total) for t, (n, us) in expected.items()), key=repr)
    assert _run(both, sql, "nsys", definitions) == want
    assert _run(both, sql, "kineto", definitions) == want


@pytest.mark.parametrize("definitions", ["kvtrace", "hta"])
@pytest.mark.parametrize(
    "view",
    [
        "timeline_temporal_breakdown(definitions := ?)",
        "timeline_comm_comp_overlap(definitions := ?)",
        "timeline_kernel_durations(definitions := ?)",
        "timeline_launches(definitions := ?)",
        "timeline_launch_summary(definitions := ?)",
        "timeline_queue_length(definitions := ?)",
        "timeline_memory_bandwidth(definitions := ?)",
    ],
)
def test_every_definitions_view_reads_the_export_as_the_kineto_trace(both, view, definitions):
    sql = f"SELECT run_id, * EXCLUDE (run_id) FROM {view}"
    nsys = _run(both, sql, "nsys", definitions)
    assert nsys and nsys == _run(both, sql, "kineto", definitions)


@pytest.mark.parametrize("view", ["timeline_stream_busy", "timeline_copy_overlap"])
def test_the_stream_views_read_the_export_as_the_kineto_trace(both, view):
    sql = f"SELECT run_id, * EXCLUDE (run_id) FROM {view}"
    nsys = _run(both, sql, "nsys")
    assert nsys and nsys == _run(both, sql, "kineto")


def test_the_bad_row_goes_to_the_quarantine_and_the_session_start_to_the_run(both):
    (line, reason) = both.execute("SELECT line_no, reason FROM quarantine").fetchone()
    assert line == 18  # the 18th event in start order
    assert reason.startswith("a CUPTI_ACTIVITY_KIND_KERNEL row needs integer start and end")
    config = both.execute("SELECT collector_config FROM runs WHERE run_name = 'nsys'").fetchone()[0]
    assert json.loads(config) | {"source_sha256": None} == {
        "format": "nsys",
        "session_start_utc_ns": 215 * 7_889_238 * 10**9 + 10**9,
        "clock": "kineto",
        "base_time_ns": 215 * 7_889_238 * 10**9,
        "nsys_version": "2024.6.2.225",
        "export_schema_version": "3.16.1",
        "source_sha256": None,
    }


def test_the_rank_is_the_files_and_several_processes_are_ranks_of_their_own(tmp_path):
    one, other = NsysExport(), NsysExport()
    one.kernel(GEMM, 0, 10_000, stream=7, correlation=1)
    other.kernel(GEMM, 0, 20_000, stream=7, correlation=1)  # (the same bytes are read once)
    several = NsysExport()
    # process 300 on device 1 and process 200 on device 0, both on their stream 7: two
    # ranks in process id order, so [0, 10) and [5, 15) are not one stream busy 15 us
    several.kernel(GEMM, 0, 10_000, stream=7, correlation=1, device=1, pid=300)
    several.runtime("cudaLaunchKernel_v7000", 0, 1_000, 1, pid=300)
    several.kernel(GEMM, 5_000, 15_000, stream=7, correlation=1, device=0, pid=200)
    several.runtime("cudaLaunchKernel_v7000", 4_000, 4_500, 1, pid=200)
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    warehouse = Warehouse(warehouse_at(tmp_path / "wh"), create=True)
    report = ingest(
        warehouse,
        [
            str(one.write(tmp_path / "a" / "rank_3.sqlite")),
            str(other.write(tmp_path / "b" / "export.sqlite")),
            str(several.write(tmp_path / "c" / "rank0.sqlite")),
        ],
    )
    assert report.files[2].notes == [
        "the export holds the GPU work of 2 processes, each stored as a rank in process id "
        "order: process 200 as rank 0, process 300 as rank 1"
    ]
    con = connect(warehouse)
    runs = con.execute("SELECT run_name, rank, world_size FROM runs ORDER BY run_name").fetchall()
    assert runs == [("a", 3, None), ("b", None, None), ("c", None, 2)]
    rows = con.execute(
        "SELECT r.run_name, e.rank, e.pid, e.category FROM timeline_events AS e "
        "JOIN runs AS r USING (run_id) ORDER BY r.run_name, e.rank, e.category"
    ).fetchall()
    assert rows == [
        ("a", 3, "0", "kernel"),
        ("b", None, "0", "kernel"),
        ("c", 0, "200", "cuda_runtime"),
        ("c", 0, "0", "kernel"),
        ("c", 1, "300", "cuda_runtime"),
        ("c", 1, "1", "kernel"),
    ]
    busy = con.execute(
        "SELECT b.rank, b.busy_us FROM timeline_stream_busy AS b JOIN runs AS r "
        "USING (run_id) WHERE r.run_name = 'c' ORDER BY b.rank"
    ).fetchall()
    assert busy == [(0, 10.0), (1, 10.0)]
    con.close()


def test_names_and_kinds_follow_kineto():
    assert api_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert api_name("cudaLaunchKernel_ptsz_v7000") == "cudaLaunchKernel_ptsz"
    assert api_name("cuMemcpyHtoDAsync_v2") == "cuMemcpyHtoDAsync_v2"  # the API's own name
    assert copy_kind("CUDA_MEMCPY_KIND_PTOP") == "PtoP"
    assert copy_kind("CUDA_MEMCPY_KIND_UVM_DTOH") == "DtoH"
    assert copy_kind("CUDA_MEMCPY_KIND_UNKNOWN") is None
    assert rank_in_name(Path("trace.RANK-12.sqlite")) == 12
    assert rank_in_name(Path("report1.sqlite")) is None


def _sentence(tmp_path: Path, *args: str) -> tuple[int, str]:
    result = run_kvtrace("-w", warehouse_at(tmp_path / "wh"), "ingest", *args, cwd=tmp_path)
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.returncode, result.stderr.strip()


def test_another_sqlite_database_is_one_sentence(tmp_path):
    other = tmp_path / "app.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    db.close()
    status, said = _sentence(tmp_path, str(other))
    assert status != 0
    assert said == (
        f"Error: {other} is an SQLite database but not an Nsight Systems export: it has none "
        "of the tables nsys writes (StringIds beside CUPTI_ACTIVITY_KIND_*, NVTX_EVENTS or "
        "TARGET_INFO_*); kvtrace reads what 'nsys export --type sqlite' writes"
    )


def test_a_damaged_export_and_a_forced_kind_are_one_sentence(tmp_path):
    export = example().write(tmp_path / "report.sqlite")
    damaged = tmp_path / "damaged.sqlite"
    damaged.write_bytes(export.read_bytes()[:100] + b"\x00" * 4000)
    status, said = _sentence(tmp_path, str(damaged))
    assert status != 0 and said.startswith(f"Error: {damaged} cannot be read as an SQLite database")
    other = tmp_path / "other.json"
    other.write_text('{"traceEvents": []}')
    status, said = _sentence(tmp_path, "--kind", "nsys", str(other))
    assert status != 0
    assert said == f"Error: {other} is not an Nsight Systems export: not an SQLite database"


def test_a_report_not_yet_exported_is_one_sentence_that_says_how(tmp_path):
    report = tmp_path / "rank0.nsys-rep"
    report.write_bytes(b"\x00\x01 an Nsight Systems report")
    status, said = _sentence(tmp_path, str(report))
    assert status != 0
    assert said == (
        f"Error: {report} is an Nsight Systems report: kvtrace reads its SQLite export, "
        "which 'nsys export --type sqlite rank0.nsys-rep' writes"
    )


EVENT_RECORDS = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"


def _kineto_wait_trace(path: Path) -> Path:
    """The events of `copy_wait_example` as PyTorch's profiler writes them, rank 0, in the
    same order: the waits carry the stream and record call Kineto finds for them."""

    def call(name: str, ts: float, dur: float, correlation: int) -> dict:
        event = kineto_event("cuda_runtime", name, ts, dur, correlation=correlation)
        return {**event, "pid": 4242, "tid": 4242}

    def wait(name: str, ts: float, dur: float, stream: int, correlation: int, on: tuple):
        (event_id, on_stream, on_record) = on
        args = {"correlation": correlation, "cuda_sync_kind": name, "wait_on_stream": on_stream,
                "wait_on_cuda_event_record_corr_id": on_record,
                "wait_on_cuda_event_id": event_id}  # fmt: skip
        return kineto_event("cuda_sync", name, ts, dur, stream=stream, **args)

    copy = {"correlation": 3, "bytes": 6_000_000, "memory bandwidth (GB/s)": 100.0}
    events = [
        {**kineto_event("user_annotation", "ProfilerStep#1", 1_000_001.0, 198.0),
         "pid": 4242, "tid": 4242},
        call("cudaLaunchKernel", 1_000_002.0, 2.0, 1),
        call("cudaEventRecord", 1_000_005.0, 1.0, 2),
        kineto_event("kernel", GEMM, 1_000_010.0, 90.0, stream=7, correlation=1),
        call("cudaMemcpyAsync", 1_000_060.0, 2.0, 3),
        call("cudaEventRecord", 1_000_070.0, 1.0, 4),
        call("cudaEventRecord", 1_000_072.0, 1.0, 5),
        call("cudaStreamWaitEvent", 1_000_080.0, 1.0, 6),
        wait("Stream Wait Event", 1_000_080.2, 0.5, 7, 6, (5, 20, 4)),
        call("cudaLaunchKernel", 1_000_085.0, 2.0, 7),
        call("cudaEventRecord", 1_000_088.0, 1.0, 8),
        kineto_event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 1_000_090.0, 60.0,
                     stream=20, **copy),
        kineto_event("kernel", GEMM, 1_000_155.0, 30.0, stream=7, correlation=7),
        call("cudaEventSynchronize", 1_000_186.0, 4.0, 9),
        wait("Event Sync", 1_000_186.5, 3.0, -1, 9, (5, 7, 8)),
        call("cudaStreamWaitEvent", 1_000_191.0, 1.0, 10),
        wait("Stream Wait Event", 1_000_191.2, 0.3, 20, 10, (9, -1, -1)),
    ]  # fmt: skip
    trace = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1},
             "baseTimeNanoseconds": 215 * 7_889_238 * 10**9}  # fmt: skip
    path.write_text(json.dumps({**trace, "traceEvents": events}))
    return path


@pytest.fixture
def waits(tmp_path):
    """A warehouse holding `copy_wait_example` (run "nsys"), the same export without its
    CUDA event records (run "older") and its Kineto trace (run "kineto")."""
    for name in ("nsys", "older", "kineto"):
        (tmp_path / name).mkdir()
    export = copy_wait_example().write(tmp_path / "nsys" / "offload_rank0.sqlite")
    older = copy_wait_example().write(
        tmp_path / "older" / "offload_rank0.sqlite", without=(EVENT_RECORDS,)
    )
    trace = _kineto_wait_trace(tmp_path / "kineto" / "kineto.pt.trace.json")  # run "kineto"
    warehouse = Warehouse(warehouse_at(tmp_path / "wh"), create=True)
    report = ingest(warehouse, [str(export), str(older), str(trace)])
    assert [(f.family, f.rows, f.notes) for f in report.files] == [
        ("nsys", 17, []),
        (
            "nsys",
            17,
            [
                "the export has 3 event syncs and stream waits but no CUDA event records "
                f"({EVENT_RECORDS}): the stream each waits on is left empty"
            ],
        ),
        ("timeline", 17, []),
    ]
    con = connect(warehouse)
    yield con
    con.close()


def test_a_wait_takes_the_stream_and_record_call_of_its_events_latest_record(waits):
    sql = (
        "SELECT run_id, event_idx, name, stream, correlation, wait_on_stream, "
        "wait_on_correlation FROM timeline_events WHERE category = 'cuda_sync'"
    )
    # event 5's records before the stream wait of call 6 (context 1 of process 4242):
    # call 2 on stream 7 and call 4 on stream 20 (call 5's is context 2's, the record of
    # process 999 another process's): the latest, call 4, stream 20.  The event sync of
    # call 9 comes after call 8 recorded it on stream 7 again.  Event 9 has no record.
    assert sorted(_run(waits, sql, "nsys")) == [
        (8, "Stream Wait Event", 7, 6, 20, 4),
        (14, "Event Sync", -1, 9, 7, 8),
        (16, "Stream Wait Event", 20, 10, -1, -1),
    ]
    # an export without event records does not say what a wait waits on
    assert sorted(_run(waits, sql, "older")) == [
        (8, "Stream Wait Event", 7, 6, None, None),
        (14, "Event Sync", -1, 9, None, None),
        (16, "Stream Wait Event", 20, 10, None, None),
    ]


def test_the_wait_export_and_its_kineto_trace_are_the_same_rows(waits):
    sql = "SELECT * EXCLUDE (iteration) FROM timeline_events"
    assert _run(waits, sql, "nsys") == _run(waits, sql, "kineto")


def test_a_kernel_waiting_on_a_copy_is_found_in_the_export(waits):
    sql = "SELECT run_id, * EXCLUDE (run_id) FROM _timeline_stream_waits"
    # the stream wait (called at 80) on the record of call 4 (at 70) on stream 20: the
    # last operation launched there before 70 is the HtoD copy (launched at 60, running
    # [90, 150)); stream 7's next kernel launched after 80 (at 85) starts at 155
    want = [(0, 7, 1_000_155.0, 20, "memcpy", "HtoD", 6_000_000, 1_000_150.0)]
    assert _run(waits, sql, "nsys") == want
    assert _run(waits, sql, "kineto") == want
    assert _run(waits, sql, "older") == []


def test_idle_time_waiting_on_a_copy_is_worked_by_hand(waits):
    sql = "SELECT run_id, * EXCLUDE (run_id) FROM timeline_copy_wait_idle"
    # stream 7 is idle from its first kernel's end (100) to its second's start (155):
    # 55 us, of which [100, 150) waits on the copy; stream 20 has one event, no gap
    want = [(0, 1, 7, 55.0, 50.0, 50.0 / 55.0, 1)]
    assert _run(waits, sql, "nsys") == want
    assert _run(waits, sql, "kineto") == want
    assert _run(waits, sql, "older") == [(0, 1, 7, 55.0, 0.0, 0.0, 0)]


@pytest.mark.parametrize("definitions", ["kvtrace", "hta"])
@pytest.mark.parametrize(
    "view",
    [
        "timeline_critical_path(definitions := ?)",
        "timeline_critical_path_summary(definitions := ?)",
        "timeline_idle_breakdown(definitions := ?)",
        "timeline_temporal_breakdown(definitions := ?)",
        "timeline_launches(definitions := ?)",
        "timeline_queue_length(definitions := ?)",
    ],
)
def test_every_view_reads_the_waits_of_the_export_as_the_kineto_trace(waits, view, definitions):
    sql = f"SELECT run_id, * EXCLUDE (run_id) FROM {view}"
    nsys = _run(waits, sql, "nsys", definitions)
    assert nsys and nsys == _run(waits, sql, "kineto", definitions)


@pytest.mark.parametrize("definitions", ["kvtrace", "hta"])
def test_the_critical_path_goes_through_the_copy_the_kernel_waits_on(waits, definitions):
    sql = (
        "SELECT run_id, step, edge_type, name, bound_by, duration_us "
        "FROM timeline_critical_path(definitions := ?)"
    )
    # the second gemm (from 155) waits on the copy (to 150) through the stream wait, not
    # on the first gemm: calls [2, 4) and [5, 6) us, the copy's call at 60 and its launch
    # delay of 30, the copy's 60, the gemm's 30, whose end the event sync waits for, and
    # the last call [191, 192): 124 us
    assert sorted(_run(waits, sql, "nsys", definitions)) == [
        (0, "operator", "cudaLaunchKernel", "cpu_bound", 2.0),
        (1, "dependency", None, None, 0.0),
        (2, "operator", "cudaEventRecord", "cpu_bound", 1.0),
        (3, "dependency", None, None, 0.0),
        (4, "kernel_launch_delay", None, "gpu_kernel_launch_overhead", 30.0),
        (5, "operator", "Memcpy HtoD (Pinned -> Device)", "gpu_compute_bound", 60.0),
        (6, "sync_dependency", None, None, 0.0),
        (7, "operator", GEMM, "gpu_compute_bound", 30.0),
        (8, "sync_dependency", None, None, 0.0),
        (9, "dependency", None, None, 0.0),
        (10, "operator", "cudaStreamWaitEvent", "cpu_bound", 1.0),
    ]
    # without the records the second gemm follows the first after a gap of 55 us
    assert sorted(_run(waits, sql, "older", definitions)) == [
        (0, "kernel_launch_delay", None, "gpu_kernel_launch_overhead", 8.0),
        (1, "operator", GEMM, "gpu_compute_bound", 90.0),
        (2, "kernel_kernel_delay", GEMM, "gpu_kernel_kernel_overhead", 55.0),
        (3, "operator", GEMM, "gpu_compute_bound", 30.0),
    ]
