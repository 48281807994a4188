"""The offload views (timeline_offload.sql) on hand-made traces worked by hand: counters
beside the GPU's busy and idle time per window, idle time waiting on a copy, thrash from
KV events and from named counters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import DATA
from tests.timeline.events import kineto_event


def _runtime(name: str, ts: float, correlation: int) -> dict:
    """A CUDA runtime call on the CPU thread."""
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts,
            "dur": 1, "args": {"correlation": correlation}}  # fmt: skip


def _gpu(cat: str, name: str, start: float, end: float, stream: int, correlation: int) -> dict:
    return kineto_event(cat, name, start, end - start, stream=stream, correlation=correlation)


def _write(path: Path, events: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def _queue(ts: float, depth: float) -> dict:
    return {"ph": "C", "cat": "offload", "name": "h2d_queue", "pid": 1, "tid": 0, "ts": ts,
            "args": {"depth": depth}}  # fmt: skip


def test_counter_windows_are_the_worked_example(warehouse, tmp_path):
    folder = tmp_path / "windows"
    _write(
        folder / "rank0.pt.trace.json",
        [
            kineto_event("kernel", "gemm", 0, 30, stream=7),  # [0, 30)
            kineto_event("kernel", "gemm", 50, 30, stream=7),  # [50, 80)
            kineto_event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 20, 40, stream=20),
            _queue(10, 4),
            _queue(90, 2),
            _queue(130, 6),
        ],
    )
    (folder / "offloader.jsonl").write_text(
        json.dumps({"ts_us": 250, "name": "ssd_bytes_written", "value": 4096,
                    "labels": {"tier": "ssd"}}) + "\n"
    )  # fmt: skip
    ingest(warehouse, [str(folder)])
    rows = (
        connect(warehouse)
        .execute(
            "SELECT counter, series, labels, window_start_us, samples, mean_value, last_value, "
            "max_value, change, rate_per_s, gpu_busy_us, compute_busy_us, copy_busy_us, "
            "gpu_idle_us "
            "FROM timeline_counter_windows(100)"
        )
        .fetchall()
    )
    # window [0, 100): the kernels and the copy cover [0, 80) (80 us), the kernels 60,
    # the copy [20, 60) 40; idle 20.  h2d_queue 4 and 2: mean 3, last 2, max 4.
    # window [100, 200): nothing runs; 6 is 4 more than the last value before, 2 at t 90,
    # 40 us earlier: 4 / 40e-6 = 100,000 per second.
    # window [200, 300): the named counter alone.
    assert rows == [
        ("h2d_queue", "depth", "{}", 0.0, 2, 3.0, 2.0, 4.0, None, None, 80.0, 60.0, 40.0,
         20.0),
        ("h2d_queue", "depth", "{}", 100.0, 1, 6.0, 6.0, 6.0, 4.0, pytest.approx(100_000),
         0.0, 0.0, 0.0, 100.0),
        ("ssd_bytes_written", None, '{"tier":"ssd"}', 200.0, 1, 4096.0, 4096.0, 4096.0,
         None, None, 0.0, 0.0, 0.0, 100.0),
    ]  # fmt: skip


def test_a_kernel_spanning_windows_is_split_between_them(warehouse, tmp_path):
    _write(
        tmp_path / "span" / "rank0.pt.trace.json",
        [kineto_event("kernel", "gemm", 70, 160, stream=7), _queue(0, 1), _queue(150, 1),
         _queue(250, 1)],
    )  # fmt: skip
    ingest(warehouse, [str(tmp_path / "span")])
    busy = (
        connect(warehouse)
        .execute(
            "SELECT window_start_us, gpu_busy_us, gpu_idle_us FROM timeline_counter_windows(100)"
        )
        .fetchall()
    )
    # the kernel [70, 230): 30 us of window 0, all of window 100, 30 us of window 200
    assert busy == [(0.0, 30.0, 70.0), (100.0, 100.0, 0.0), (200.0, 30.0, 70.0)]


def _copy_wait_trace(path: Path) -> Path:
    """The header's worked example, with a later gap that waits on a kernel instead."""
    return _write(
        path,
        [
            _runtime("cudaLaunchKernel", 0, 1),
            _gpu("kernel", "attn", 40, 100, 7, 1),  # stream 7 busy to 100
            _runtime("cudaMemcpyAsync", 60, 2),
            _gpu("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 90, 150, 20, 2),
            _runtime("cudaEventRecord", 70, 3),  # on stream 20, after the copy
            _runtime("cudaStreamWaitEvent", 80, 4),  # stream 7 waits on it
            {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 7,
             "ts": 80, "dur": 1, "args": {"stream": 7, "correlation": 4, "wait_on_stream": 20,
                                          "wait_on_cuda_event_record_corr_id": 3}},
            _runtime("cudaLaunchKernel", 85, 5),
            _gpu("kernel", "attn", 155, 200, 7, 5),  # gap [100, 155): 50 us on the copy
            _runtime("cudaLaunchKernel", 90, 6),
            _gpu("kernel", "ffn", 210, 220, 7, 6),  # gap [200, 210): no wait
            _runtime("cudaLaunchKernel", 230, 7),
            _gpu("kernel", "gemm", 240, 260, 20, 7),  # stream 20 after its copy: a kernel
            _runtime("cudaEventRecord", 235, 8),
            _runtime("cudaStreamWaitEvent", 236, 9),
            {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 7,
             "ts": 236, "dur": 1, "args": {"stream": 7, "correlation": 9, "wait_on_stream": 20,
                                           "wait_on_cuda_event_record_corr_id": 8}},
            _runtime("cudaLaunchKernel", 237, 10),
            _gpu("kernel", "attn", 270, 280, 7, 10),  # gap [220, 270): waits on a kernel
        ],
    )  # fmt: skip


def test_idle_time_waiting_on_a_copy_is_the_worked_example(warehouse, tmp_path):
    ingest(warehouse, [str(_copy_wait_trace(tmp_path / "wait" / "rank0.pt.trace.json"))])
    con = connect(warehouse)
    rows = con.execute(
        "SELECT stream, idle_us, copy_wait_us, copy_wait_share, copy_waits "
        "FROM timeline_copy_wait_idle"
    ).fetchall()
    # stream 7: gaps 55 + 10 + 50 = 115 us, 50 of them before the copy ended at 150.
    # stream 20: the gap [150, 240) before its kernel, which waited on nothing.
    assert rows == [(7, 115.0, 50.0, pytest.approx(50 / 115), 1), (20, 90.0, 0.0, 0.0, 0)]
    # the same gaps as the idle breakdown's
    breakdown = con.execute(
        "SELECT stream, idle_us FROM timeline_idle_breakdown() ORDER BY stream"
    ).fetchall()
    assert breakdown == [(7, 115.0), (20, 90.0)]
    waits = con.execute(
        "SELECT stream, kernel_start, waited_stream, waited_family, waited_kind, waited_end "
        "FROM _timeline_stream_waits ORDER BY kernel_start"
    ).fetchall()
    assert waits == [
        (7, 155.0, 20, "memcpy", "HtoD", 150.0),
        (7, 270.0, 20, "kernel", "kernel", 260.0),
    ]


def test_a_copy_that_ended_before_the_gap_explains_none_of_it(warehouse, tmp_path):
    """The wait is on a copy that was done before the stream went idle: the gap is
    something else's (here the kernel's late launch)."""
    events = [
        _runtime("cudaMemcpyAsync", 0, 1),
        _gpu("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 5, 20, 20, 1),
        _runtime("cudaLaunchKernel", 1, 2),
        _gpu("kernel", "attn", 10, 50, 7, 2),
        _runtime("cudaEventRecord", 2, 3),
        _runtime("cudaStreamWaitEvent", 3, 4),
        {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 7,
         "ts": 3, "dur": 1, "args": {"stream": 7, "correlation": 4, "wait_on_stream": 20,
                                     "wait_on_cuda_event_record_corr_id": 3}},
        _runtime("cudaLaunchKernel", 60, 5),
        _gpu("kernel", "attn", 70, 80, 7, 5),
    ]  # fmt: skip
    ingest(warehouse, [str(_write(tmp_path / "late" / "rank0.pt.trace.json", events))])
    rows = connect(warehouse).execute(
        "SELECT stream, idle_us, copy_wait_us, copy_waits FROM timeline_copy_wait_idle"
    )
    assert rows.fetchall() == [(7, 20.0, 0.0, 0)]


def test_kv_thrash_is_the_worked_example(warehouse, tmp_path):
    def stored(hashes: list[str]) -> dict:
        return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": None,
                "token_ids": list(range(4 * len(hashes))), "block_size": 4, "lora_id": None,
                "medium": "GPU"}  # fmt: skip

    lines = [
        {"seq": 0, "ts": 1000.0, "events": [stored(["a", "b"])]},
        {"seq": 1, "ts": 1002.0, "events": [["BlockRemoved", ["a"], "GPU"]]},
        {"seq": 2, "ts": 1002.4, "events": [stored(["a"])]},
        {"seq": 3, "ts": 1003.0, "events": [["BlockRemoved", ["b"], "GPU"]]},
        {"seq": 4, "ts": 1005.0, "events": [stored(["b"])]},
    ]
    path = tmp_path / "gpu0.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    ingest(warehouse, [str(path)])
    con = connect(warehouse)
    row = con.execute(
        "SELECT medium, removed, reloaded, thrashed, thrash_share, blocks_thrashed, "
        "median_reload_s FROM kv_thrash(1.0)"
    ).fetchone()
    # a: removed at 2 s, back at 2.4 (0.4 s); b: removed at 3 s, back at 5 (2 s)
    assert row == ("GPU", 2, 2, 1, 0.5, 1, pytest.approx(1.2))
    assert con.execute("SELECT thrashed FROM kv_thrash(3.0)").fetchone() == (2,)


def test_thrash_from_named_counters_matches_blocks_by_their_labels(warehouse, tmp_path):
    records = [
        (100, "kv_evict", {"layer": 0, "block": 1}),
        (150, "kv_load", {"layer": 0, "block": 2}),  # another block: no reload of 1
        (400, "kv_load", {"layer": 0, "block": 1}),  # block 1 back after 300 us
        (500, "kv_evict", {"layer": 1, "block": 1}),
        (5500, "kv_load", {"layer": 1, "block": 1}),  # back after 5,000 us
        (600, "kv_evict", {"layer": 0, "block": 3}),  # never loaded again
    ]
    path = tmp_path / "thrash" / "counters.jsonl"
    path.parent.mkdir()
    path.write_text(
        "".join(
            json.dumps({"ts_us": ts, "name": name, "value": 1, "labels": labels, "rank": 0}) + "\n"
            for ts, name, labels in records
        )
    )
    ingest(warehouse, [str(path)])
    row = (
        connect(warehouse)
        .execute(
            "SELECT rank, evictions, reloaded, thrashed, thrash_share, median_reload_us "
            "FROM timeline_counter_thrash('kv_evict', 'kv_load', window_us := 1000)"
        )
        .fetchone()
    )
    assert row == (0, 3, 2, 1, pytest.approx(1 / 3), 2650.0)


def test_a_counter_naming_no_rank_takes_the_rank_of_a_one_rank_trace(warehouse, tmp_path):
    folder = tmp_path / "ranked"
    folder.mkdir()
    events = [kineto_event("kernel", "gemm", 0, 40, stream=7)]
    (folder / "rank2.pt.trace.json").write_text(
        json.dumps({"distributedInfo": {"rank": 2}, "traceEvents": events})
    )
    (folder / "counters.jsonl").write_text('{"ts_us": 10, "name": "q", "value": 1}\n')
    ingest(warehouse, [str(folder)])
    row = connect(warehouse).execute(
        "SELECT rank, gpu_busy_us, gpu_idle_us FROM timeline_counter_windows(100)"
    )
    assert row.fetchall() == [(2, 40.0, 60.0)]


def test_the_dependencies_of_a_real_trace_never_start_a_kernel_before_its_wait_ends(warehouse):
    """HTA's AlexNet trace (cudaStreamWaitEvent between its compute streams, no copies):
    every kernel found to wait on another stream's operation starts after that operation
    ends, as a GPU must run them; the trace has no copy waits."""
    ingest(warehouse, [str(DATA / "hta_alexnet_trace.json.gz")], run_name="alexnet")
    con = connect(warehouse)
    waits = con.execute(
        "SELECT count(*), min(kernel_start - waited_end), count(*) FILTER "
        "(WHERE waited_family <> 'kernel') FROM _timeline_stream_waits"
    ).fetchone()
    assert waits == (6, 1.0, 0)
    copy_waits = con.execute("SELECT sum(copy_waits) FROM timeline_copy_wait_idle")
    assert copy_waits.fetchone() == (0,)
