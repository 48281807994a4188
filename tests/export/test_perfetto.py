"""``kvtrace export perfetto``: the trace read back through kvtrace's own Kineto reader,
hand-worked counters, slices and metadata of every source, several runs and ranks, the
atomic output, and one sentence for a run that is not there or has nothing to draw.

Where Perfetto's trace processor can run (the ``perfetto`` package and the
``trace_processor_shell`` binary it downloads on first use), it reads the file too."""

from __future__ import annotations

import gzip
import json
import os
import platform
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from kvtrace import connect
from kvtrace.export import perfetto
from kvtrace.export._lanes import Lanes
from kvtrace.export.perfetto import PerfettoSpec, export_perfetto
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from tests.conftest import warehouse_at

# Complete events as PyTorch's profiler writes them (libkineto output_json.cpp: a CPU
# process with its threads, GPU events on pid = device and tid = stream, ids and copy
# sizes in args); a thread named by text, as Kineto names its span threads.
PROFILED = [
    {"ph": "M", "name": "process_name", "pid": 4242, "args": {"name": "python3"}},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 4242,
     "tid": "PyTorch Profiler", "ts": 999.0, "dur": 40.0},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 4243,
     "ts": 1000.5, "dur": 20.25, "args": {"External id": 11, "Ev Idx": 1}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4243,
     "ts": 1005.0, "dur": 3.0, "args": {"correlation": 77, "External id": 11}},
    {"ph": "X", "cat": "kernel", "name": "sm90_gemm_bf16", "pid": 0, "tid": 7,
     "ts": 1010.125, "dur": 8.0,
     "args": {"stream": 7, "device": 0, "correlation": 77, "External id": 11}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0,
     "tid": 20, "ts": 1012.0, "dur": 4.0,
     "args": {"stream": 20, "device": 0, "correlation": 78, "bytes": 1048576,
              "memory bandwidth (GB/s)": 262.144}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamWaitEvent", "pid": 4242,
     "tid": 4243, "ts": 1021.0, "dur": 1.0,
     "args": {"correlation": 79, "wait_on_stream": 20,
              "wait_on_cuda_event_record_corr_id": 78}},
]  # fmt: skip
SCRAPED = datetime(2026, 1, 1, tzinfo=timezone.utc)  # the first scrape of the hand-made run
_COLUMNS = (
    "rank, pid, tid, stream, device, category, name, ts_us, dur_us, correlation, "
    "external_id, copy_kind, bytes, wait_on_stream, wait_on_correlation, memory_bw_gbps"
)


def _kineto(path: Path, rank: int | None, events: list[dict[str, Any]] = PROFILED) -> Path:
    trace: dict[str, Any] = {"schemaVersion": 1}
    if rank is not None:
        trace["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    path.write_text(json.dumps({**trace, "traceEvents": events}))
    return path


def _rows(warehouse: Warehouse, sql: str) -> list[tuple]:
    con = connect(warehouse)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as handle:
        return json.load(handle)["traceEvents"]


def _process_names(events: list[dict[str, Any]]) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}


def _read_back(tmp_path: Path, trace: Path) -> tuple[Warehouse, str]:
    """The exported file ingested into a fresh warehouse by the Kineto reader."""
    fresh = Warehouse(warehouse_at(tmp_path / "read-back"), create=True)
    report = ingest(fresh, [str(trace)], run_name="read-back")
    assert report.rejected == 0
    return fresh, "read-back"


def _put(warehouse: Warehouse, run_id: str, tables: dict[str, list[dict[str, Any]]]) -> None:
    """Hand rows into the warehouse as one commit, with the run's own row."""
    with warehouse.transaction(run_id) as commit:
        warehouse.write_rows(commit, "runs", [{"run_id": run_id, "run_name": run_id}])
        for table, rows in tables.items():
            warehouse.write_rows(commit, table, [{"run_id": run_id, **row} for row in rows])


# -- profiler events, read back -------------------------------------------------------------


def test_profiler_events_read_back_as_the_same_rows(warehouse, tmp_path):
    """Every stored column but the pid comes back as it was (the rank through
    distributedInfo, the tid as a number or text); the pid is the export's, and the
    process it names carries the run, rank and stored pid."""
    ingest(warehouse, [str(_kineto(tmp_path / "rank0.json", 0))], run_name="prof")
    out = tmp_path / "trace.json"
    report = export_perfetto(warehouse, PerfettoSpec(("prof",), out))
    assert report.by_source == {"profiler": 6}

    events = _events(out)
    names = _process_names(events)
    assert names == {1: "prof · rank 0 · pid 0", 2: "prof · rank 0 · pid 4242"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"
    }
    assert threads == {(1, 7): "stream 7", (1, 20): "stream 20"}
    launch = next(e for e in events if e["name"] == "cudaLaunchKernel")
    assert launch == {
        "ph": "X", "name": "cudaLaunchKernel", "pid": 2, "tid": 4243, "ts": 1005.0,
        "dur": 3.0, "cat": "cuda_runtime", "args": {"correlation": 77, "External id": 11},
    }  # fmt: skip

    fresh, _ = _read_back(tmp_path, out)
    pid_of = {str(pid): name.rsplit(" ", 1)[1] for pid, name in names.items()}
    back = [
        (row[0], pid_of[row[1]], *row[2:])
        for row in _rows(fresh, f"SELECT {_COLUMNS} FROM timeline_events")
    ]
    stored = _rows(warehouse, f"SELECT {_COLUMNS} FROM timeline_events")
    assert sorted(back, key=repr) == sorted(stored, key=repr)
    assert (0, "4242", "PyTorch Profiler", None) in {r[:4] for r in stored}
    copy = next(r for r in stored if r[6].startswith("Memcpy"))
    assert copy[11:13] == ("HtoD", 1048576) and copy[15] == 262.144


def test_ranks_are_processes_and_read_back_without_a_rank(warehouse, tmp_path):
    """Two ranks of one run: a process per (rank, pid); the file names no rank (they
    differ), so the reader gives none, and the process names tell the ranks apart."""
    folder = tmp_path / "ddp"
    folder.mkdir()
    _kineto(folder / "rank0.json", 0)
    _kineto(folder / "rank1.json", 1, [e for e in PROFILED if e.get("pid") == 0])
    ingest(warehouse, [str(folder)], run_name="ddp")
    out = tmp_path / "ddp.json"
    export_perfetto(warehouse, PerfettoSpec(("ddp",), out))
    events = _events(out)
    names = _process_names(events)
    assert names == {
        1: "ddp · rank 0 · pid 0",
        2: "ddp · rank 0 · pid 4242",
        3: "ddp · rank 1 · pid 0",
    }
    rank1_kernel = [e for e in events if e["name"] == "sm90_gemm_bf16" and e["pid"] == 3]
    assert len(rank1_kernel) == 1

    fresh, _ = _read_back(tmp_path, out)
    by_name = {str(pid): name for pid, name in names.items()}
    back = sorted(
        (by_name[pid], name, ts)
        for rank, pid, name, ts in _rows(
            fresh, "SELECT rank, pid, name, ts_us FROM timeline_events"
        )
        if rank is None
    )
    assert back == sorted(
        (f"ddp · rank {rank} · pid {pid}", name, ts)
        for rank, pid, name, ts in _rows(
            warehouse, "SELECT rank, pid, name, ts_us FROM timeline_events"
        )
    )


def test_profiler_counters_read_back_as_the_same_rows(warehouse, tmp_path):
    """Kineto's counter events ("ph": "C", a value per args key) come back series by
    series; the pid through the process name."""
    _put(
        warehouse,
        "ctr",
        {
            "timeline_counters": [
                {"rank": 0, "pid": "4242", "counter": counter, "series": series,
                 "labels": "{}", "ts_us": ts, "value": value, "source": "kineto",
                 "event_idx": idx}
                for idx, counter, series, ts, value in (
                    (3, "prefetch", "hits", 1015.5, 3.0),
                    (3, "prefetch", "misses", 1015.5, 1.0),
                    (9, "h2d queue", "depth", 1020.25, 2.0),
                )
            ]
        },
    )  # fmt: skip
    out = tmp_path / "counters.json"
    export_perfetto(warehouse, PerfettoSpec(("ctr",), out))
    events = _events(out)
    assert [e for e in events if e["ph"] == "C"] == [
        {"ph": "C", "name": "prefetch", "pid": 1, "ts": 1015.5,
         "args": {"hits": 3.0, "misses": 1.0}},
        {"ph": "C", "name": "h2d queue", "pid": 1, "ts": 1020.25, "args": {"depth": 2.0}},
    ]  # fmt: skip
    fresh, _ = _read_back(tmp_path, out)
    columns = "rank, pid, counter, series, labels, ts_us, value"
    back = _rows(fresh, f"SELECT {columns} FROM timeline_counters ORDER BY ts_us, series")
    assert [(r[0], _process_names(events)[int(r[1])], *r[2:]) for r in back] == [
        (0, "ctr · rank 0 · pid 4242", "prefetch", "hits", "{}", 1015.5, 3.0),
        (0, "ctr · rank 0 · pid 4242", "prefetch", "misses", "{}", 1015.5, 1.0),
        (0, "ctr · rank 0 · pid 4242", "h2d queue", "depth", "{}", 1020.25, 2.0),
    ]


def test_an_output_that_names_no_file_or_sits_under_a_file_is_one_sentence(
    cli, warehouse, tmp_path
):
    _wall_run(warehouse)
    (tmp_path / "afile").write_text("")
    under_file = [
        (
            str(tmp_path / "afile" / path),
            f"Error: cannot write {tmp_path / 'afile' / path}: "
            f"{tmp_path / 'afile'} is a file, not a folder",
        )
        for path in ("x.json", "sub/x.json")
    ]
    for output, error in [
        ("", "Error: --output names no file; give one such as trace.json"),
        *under_file,
    ]:
        status, _, err = cli(
            "-w", warehouse.location, "export", "perfetto", "--run", "wall", "-o", output
        )
        assert (status, err.splitlines()) == (1, [error])


def test_named_counters_without_a_pid_are_a_process_of_their_rank(warehouse, tmp_path):
    """A counters JSONL line may leave out its pid (docs: timelines guide): the process
    is then named after the run and rank alone, not "pid None"."""
    _put(
        warehouse,
        "ctr",
        {
            "timeline_counters": [
                {"rank": 0, "pid": None, "counter": "h2d_queue_depth", "series": "value",
                 "labels": "{}", "ts_us": 20.0, "value": 1.0, "source": "counters",
                 "event_idx": 0},
            ]
        },
    )  # fmt: skip
    out = tmp_path / "counters.json"
    export_perfetto(warehouse, PerfettoSpec(("ctr",), out))
    events = _events(out)
    assert _process_names(events) == {1: "ctr · rank 0"}
    assert [e for e in events if e["ph"] == "C"] == [
        {"ph": "C", "name": "h2d_queue_depth", "pid": 1, "ts": 20.0, "args": {"value": 1.0}}
    ]


def test_a_gzipped_export_reads_back_too(warehouse, tmp_path):
    ingest(warehouse, [str(_kineto(tmp_path / "rank0.json", 0))], run_name="prof")
    out = tmp_path / "trace.json.gz"
    export_perfetto(warehouse, PerfettoSpec(("prof",), out))
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    fresh, _ = _read_back(tmp_path, out)
    assert _rows(fresh, "SELECT count(*), min(rank) FROM timeline_events") == [(6, 0)]


# -- every wall-clock source, hand-worked ---------------------------------------------------


def _wall_run(warehouse: Warehouse) -> None:
    """A run with one of everything but profiler events (values worked in the test)."""
    step = {"dataset": "d", "block_size": 64, "seq_len": 100}
    _put(
        warehouse,
        "wall",
        {
            "timeline_counters": [
                {"rank": 0, "pid": "4242", "counter": "prefetch", "series": "hits",
                 "labels": "{}", "ts_us": 1015.0, "value": 3.0, "source": "kineto",
                 "event_idx": 7},
                {"rank": 0, "pid": "4242", "counter": "prefetch", "series": "misses",
                 "labels": "{}", "ts_us": 1015.0, "value": 1.0, "source": "kineto",
                 "event_idx": 7},
                {"rank": None, "pid": "4242", "counter": "pool_bytes", "series": None,
                 "labels": '{"tier": "host"}', "ts_us": 1016.0, "value": 5e9,
                 "source": "jsonl", "event_idx": 0},
            ],
            "pool_snapshots": [
                {"worker_id": "d0", "t_s": 0.0, "capacity_tokens": 100, "held_tokens": 30,
                 "available_tokens": 50, "session_count": 2},
                {"worker_id": "d0", "t_s": 1.5, "capacity_tokens": 100, "held_tokens": 40,
                 "available_tokens": 45, "session_count": 1},
                {"worker_id": "d0", "t_s": 3.0, "poll_error": "timeout"},
            ],
            "engine_metrics": [
                *(
                    {"worker_id": "e0", "t_s": t, "ts": SCRAPED + timedelta(seconds=t),
                     "metric": metric, "labels": labels, "value": value, "type": kind}
                    for t, running, hits in ((0.0, 3.0, 10.0), (2.0, 1.0, 25.0))
                    for metric, labels, value, kind in (
                        ("vllm:num_requests_running", "{}", running, "gauge"),
                        ("vllm:prefix_cache_hits_total", '{"model_name":"m"}', hits, "counter"),
                        ("vllm:e2e_request_latency_seconds_bucket", '{"le":"1.0"}', 4.0,
                         "histogram"),
                        ("vllm:e2e_request_latency_seconds_count", "{}", 4.0, "histogram"),
                    )
                ),
            ],
            "kv_events": [
                {"worker": "w", "medium": "GPU", "seq": seq, "ts": ts, "position": 0,
                 "block_idx": idx, "kind": kind, "block_hash": block, "epoch": 0}
                for seq, ts, idx, kind, block in (
                    (0, 100.0, 0, "stored", "a"),
                    (0, 100.0, 1, "stored", "b"),
                    (1, 101.3, 0, "removed", "a"),
                    (2, 101.7, 0, "stored", "a"),
                    (3, 102.5, 0, "removed", "b"),
                )
            ],
            "request_timings": [
                {"load_level": 0, "request_idx": i, "origin": "measured", "arrival_s": a,
                 "ttft_s": ttft, "e2e_s": e2e, "error": error, "input_tokens": 10,
                 "output_tokens": 5}
                for i, a, ttft, e2e, error in (
                    (0, 0.0, 0.1, 1.0, None),
                    (1, 0.5, 0.2, 0.25, None),
                    (2, 0.875, None, 0.5, None),
                    (3, 1.0, None, None, "timeout"),
                    (4, None, 0.1, 0.2, None),
                )
            ],
        },
    )  # fmt: skip
    with warehouse.transaction("wall") as commit:
        warehouse.write_rows(
            commit,
            "dsa_steps",
            [
                {"run_id": "wall", **step, **row}
                for row in (
                    # batch step 0 at 5 s (800 us): requests 1 and 2, layers 0 and 1
                    {"request_id": 1, "step_idx": 99, "layer_id": 0, "batch_step": 0,
                     "ts_us": 5e6, "step_latency_us": 800.0, "unique_blocks": 3,
                     "hbm_bytes_read": 24576},
                    {"request_id": 2, "step_idx": 99, "layer_id": 0, "batch_step": 0,
                     "ts_us": 5e6, "step_latency_us": 800.0, "unique_blocks": 3,
                     "hbm_bytes_read": 24576},
                    {"request_id": 1, "step_idx": 99, "layer_id": 1, "batch_step": 0,
                     "ts_us": 5e6, "step_latency_us": 800.0, "unique_blocks": 2,
                     "hbm_bytes_read": 16384},
                    {"request_id": 2, "step_idx": 99, "layer_id": 1, "batch_step": 0,
                     "ts_us": 5e6, "step_latency_us": 800.0, "unique_blocks": 4,
                     "local_pool_bytes_read": 8192},
                    # batch step 1, 1 ms later: request 1 alone, no tier model
                    {"request_id": 1, "step_idx": 100, "layer_id": 0, "batch_step": 1,
                     "ts_us": 5.001e6, "step_latency_us": 900.0, "unique_blocks": 5},
                    # a step of a dump that recorded no time
                    {"request_id": 3, "step_idx": 50, "layer_id": 0, "unique_blocks": 1},
                )
            ],
        )  # fmt: skip
        # batch step 1 also prefills requests 4 and 5 (96 and 32 query tokens), layer 1
        warehouse.write_rows(
            commit,
            "dsa_prefill",
            [
                {"run_id": "wall", "dataset": "d", "request_id": request, "layer_id": 1,
                 "query_start": 0, "query_end": end, "batch_step": 1, "ts_us": 5.001e6,
                 "step_latency_us": 900.0}
                for request, end in ((4, 96), (5, 32))
            ],
        )  # fmt: skip


def test_every_source_becomes_the_tracks_worked_by_hand(warehouse, tmp_path):
    _wall_run(warehouse)
    out = tmp_path / "wall.json"
    report = export_perfetto(warehouse, PerfettoSpec(("wall",), out))
    events = _events(out)
    # processes numbered in source order: profiler (rank NULL first), DSA, pool,
    # engine metrics, KV events, requests
    assert _process_names(events) == {
        1: "wall · pid 4242",
        2: "wall · rank 0 · pid 4242",
        3: "wall · DSA steps (block size 64)",
        4: "wall · pool",
        5: "wall · engine metrics",
        6: "wall · serving counters",
        7: "wall · KV events",
        8: "wall · benchmark requests",
    }
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"
    }
    assert threads == {
        (3, 1): "layer 0", (3, 2): "layer 1", (4, 1): "d0", (8, 1): "lane 1", (8, 2): "lane 2",
    }  # fmt: skip
    drawn = [e for e in events if e["ph"] != "M"]
    by_pid = {pid: [e for e in drawn if e["pid"] == pid] for pid in range(1, 9)}

    # timeline counters: one event per stored counter event, its series as args
    assert by_pid[1] == [
        {"ph": "C", "name": "pool_bytes{tier=host}", "pid": 1, "ts": 1016.0,
         "args": {"value": 5e9}},
    ]  # fmt: skip
    assert by_pid[2] == [
        {"ph": "C", "name": "prefetch", "pid": 2, "ts": 1015.0,
         "args": {"hits": 3.0, "misses": 1.0}},
    ]  # fmt: skip

    # DSA: step 0 sums requests 1 and 2 (layer 0: 3 + 3 blocks, 2 x 24,576 bytes; layer
    # 1: 2 + 4 blocks, 16,384 from HBM and 8,192 from the local pool); step 1 at 1 ms
    # decodes request 1 on layer 0 and prefills 96 + 32 query tokens on layer 1
    dsa = by_pid[3]
    assert [(e["ph"], e["tid"] if e["ph"] == "X" else e["name"], e["ts"]) for e in dsa] == [
        ("X", 1, 0.0), ("C", "layer 0", 0.0), ("X", 2, 0.0), ("C", "layer 1", 0.0),
        ("X", 1, 1000.0), ("C", "layer 0", 1000.0), ("X", 2, 1000.0),
    ]  # fmt: skip
    assert dsa[6] == {
        "ph": "X", "cat": "dsa", "name": "prefill step", "pid": 3, "tid": 2, "ts": 1000.0,
        "dur": 900.0, "args": {"batch step": 1, "requests": 2, "query tokens": 128},
    }  # fmt: skip
    assert dsa[0]["dur"] == 800.0 and dsa[0]["name"] == "decode step"
    assert dsa[0]["args"] == {
        "batch step": 0, "requests": 2, "unique blocks": 6, "fetch bytes": 49152,
        "hbm bytes": 49152,
    }  # fmt: skip
    assert dsa[1]["args"] == {"unique blocks": 6, "fetch bytes": 49152}
    assert dsa[2]["args"] == {
        "batch step": 0, "requests": 2, "unique blocks": 6, "fetch bytes": 24576,
        "hbm bytes": 16384, "local_pool bytes": 8192,
    }  # fmt: skip
    assert dsa[3]["args"] == {"unique blocks": 6, "fetch bytes": 24576}
    assert dsa[4]["dur"] == 900.0 and dsa[4]["args"]["unique blocks"] == 5
    assert dsa[5]["args"] == {"unique blocks": 5}  # no tier read: no fetch bytes

    # pool: other = 100 - 30 - 50 = 20, then 100 - 40 - 45 = 15; the failed poll an instant
    assert by_pid[4] == [
        {"ph": "C", "name": "d0", "pid": 4, "ts": 0.0,
         "args": {"capacity tokens": 100, "held tokens": 30, "available tokens": 50,
                  "other tokens": 20, "sessions": 2}},
        {"ph": "C", "name": "d0", "pid": 4, "ts": 1.5e6,
         "args": {"capacity tokens": 100, "held tokens": 40, "available tokens": 45,
                  "other tokens": 15, "sessions": 1}},
        {"ph": "i", "s": "t", "name": "poll error", "pid": 4, "tid": 1, "ts": 3e6,
         "args": {"error": "timeout"}},
    ]  # fmt: skip

    # engine metrics: a scrape per event; the histogram's bucket left out
    assert by_pid[5] == [
        {"ph": "C", "name": "e0", "pid": 5, "ts": ts,
         "args": {"vllm:e2e_request_latency_seconds_count": 4.0,
                  "vllm:num_requests_running": running,
                  "vllm:prefix_cache_hits_total{model_name=m}": hits}}
        for ts, running, hits in ((0.0, 3.0, 10.0), (2e6, 1.0, 25.0))
    ]  # fmt: skip

    # serving counters (vLLM's map): running requests as scraped; prefix-cache hits as
    # the run's own, 0 at its first scrape and 25 - 10 = 15 at the second
    assert by_pid[6] == [
        {"ph": "C", "name": "e0", "pid": 6, "ts": ts,
         "args": {"prefix_cache_hit_tokens": hits, "running_requests": running}}
        for ts, running, hits in ((0.0, 3.0, 0.0), (2e6, 1.0, 15.0))
    ]  # fmt: skip

    # KV residency per 1 s bucket: a, b stored (2); a removed and stored again (2);
    # b removed (1)
    assert [(e["name"], e["ts"], e["args"]) for e in by_pid[7]] == [
        ("w GPU", 0.0, {"resident blocks": 2}),
        ("w GPU", 1e6, {"resident blocks": 2}),
        ("w GPU", 2e6, {"resident blocks": 1}),
    ]

    # requests on lanes: 0 takes lane 1 for [0, 1 s); 1 arrives at 0.5 s (lane 1 busy)
    # and takes lane 2 until 0.75 s; 2 at 0.875 s finds lane 2 free; 3 at 1 s lane 1
    spans = [(e["name"], e["tid"], e["ts"], e["dur"]) for e in by_pid[8]]
    assert spans == [
        ("request", 1, 0.0, 1e6), ("TTFT", 1, 0.0, 1e5),
        ("request", 2, 5e5, 2.5e5), ("TTFT", 2, 5e5, 2e5),
        ("request", 2, 8.75e5, 5e5),
        ("request", 1, 1e6, 0.0),
    ]  # fmt: skip
    assert by_pid[8][0]["args"] == {
        "request": "0", "input tokens": 10, "output tokens": 5, "ttft s": 0.1, "latency s": 1.0,
    }  # fmt: skip
    assert by_pid[8][-1]["args"]["error"] == "timeout"

    assert report.by_source == {
        "counters": 2, "dsa": 7, "pool": 3, "engine": 2, "serving": 2, "kv": 3,
        "requests": 6,
    }  # fmt: skip
    assert report.notes == [
        "run 'wall': 1 DSA step rows have no step time (ts_us) and are left out",
        "run 'wall': 1 requests have no arrival time and are left out",
    ]


def test_rows_read_one_at_a_time_give_the_same_events(warehouse, tmp_path, monkeypatch):
    """Batches of one row: a counter event whose values come in several rows (a
    scrape's samples, a Kineto counter's series) is still one event (thread names may
    come at other places among the events)."""
    _wall_run(warehouse)
    whole, one_by_one = tmp_path / "whole.json", tmp_path / "one.json"
    export_perfetto(warehouse, PerfettoSpec(("wall",), whole))
    monkeypatch.setattr("kvtrace.export._run.BATCH_ROWS", 1)
    export_perfetto(warehouse, PerfettoSpec(("wall",), one_by_one))

    def texts(path: Path) -> list[str]:
        return sorted(json.dumps(event, sort_keys=True) for event in _events(path))

    assert texts(one_by_one) == texts(whole)


def test_a_dump_without_step_times_is_told_once_per_row_not_per_block_size(warehouse, tmp_path):
    """Two decode rows stored at block sizes 16 and 64, no step times: 2 rows left out
    (at the smallest size, the one drawn), the pool tick drawn."""
    _put(warehouse, "dump", {"pool_snapshots": [{"worker_id": "d0", "t_s": 0.0, "held_tokens": 1}]})
    with warehouse.transaction("dump") as commit:
        for size in (16, 64):
            warehouse.write_rows(
                commit,
                "dsa_steps",
                [
                    {"run_id": "dump", "dataset": "d", "block_size": size, "request_id": 0,
                     "step_idx": step, "layer_id": 0, "seq_len": step + 1}
                    for step in (10, 11)
                ],
            )  # fmt: skip
    report = export_perfetto(warehouse, PerfettoSpec(("dump",), tmp_path / "dump.json"))
    assert report.by_source == {"pool": 1}
    assert report.notes == [
        "run 'dump': 2 DSA step rows have no step time (ts_us) and are left out"
    ]
    with pytest.raises(
        Exception,
        match=r"run 'dump' has nothing to export: no rows with a time in dsa_steps, dsa_prefill$",
    ):
        export_perfetto(warehouse, PerfettoSpec(("dump",), tmp_path / "x.json", sources=("dsa",)))


def test_sources_can_be_chosen_and_a_block_size_asked_for(warehouse, tmp_path):
    _wall_run(warehouse)
    out = tmp_path / "some.json"
    report = export_perfetto(warehouse, PerfettoSpec(("wall",), out, sources=("pool", "kv")))
    assert report.by_source == {"pool": 3, "kv": 3}
    assert _process_names(_events(out)) == {1: "wall · pool", 2: "wall · KV events"}
    with pytest.raises(Exception, match=r"run 'wall' stores DSA steps at block size 64, not 16"):
        export_perfetto(warehouse, PerfettoSpec(("wall",), out, dsa_block_size=16))


def test_several_runs_lie_side_by_side_in_the_order_given(warehouse, tmp_path):
    """The second run's processes come after the first's, its events on them; the ranks
    differ between the runs (rank 0 and none), so the file names no rank."""
    _wall_run(warehouse)
    ingest(warehouse, [str(_kineto(tmp_path / "rank0.json", 0))], run_name="prof")
    out = tmp_path / "both.json"
    report = export_perfetto(warehouse, PerfettoSpec(("prof", "wall"), out))
    assert [name for _, name in report.runs] == ["prof", "wall"]
    names = _process_names(_events(out))
    assert list(names.values()) == [
        "prof · rank 0 · pid 0",
        "prof · rank 0 · pid 4242",
        "wall · pid 4242",
        "wall · rank 0 · pid 4242",
        "wall · DSA steps (block size 64)",
        "wall · pool",
        "wall · engine metrics",
        "wall · serving counters",
        "wall · KV events",
        "wall · benchmark requests",
    ]
    assert list(names) == list(range(1, 11))
    document = json.loads(out.read_text())
    assert "distributedInfo" not in document
    assert document["otherData"]["runs"] == {rid: name for rid, name in report.runs}
    kernel = next(e for e in document["traceEvents"] if e["name"] == "sm90_gemm_bf16")
    assert kernel["pid"] == 1 and kernel["tid"] == 7


# -- output and errors ------------------------------------------------------------------------


def test_a_failure_midway_leaves_no_file_and_keeps_the_old_one(warehouse, tmp_path, monkeypatch):
    _wall_run(warehouse)
    out = tmp_path / "wall.json"
    out.write_text("an earlier export")

    def fails(run):
        run.writer.write([{"ph": "C", "name": "x", "pid": 1, "ts": 0.0, "args": {"v": 1}}])
        raise RuntimeError("the disk went away")

    monkeypatch.setitem(perfetto._WRITERS, "kv", fails)
    with pytest.raises(RuntimeError, match="the disk went away"):
        export_perfetto(warehouse, PerfettoSpec(("wall",), out))
    assert out.read_text() == "an earlier export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wall.json", "wh"]


def test_an_unknown_run_is_one_sentence_and_exit_1(cli, warehouse, tmp_path):
    _wall_run(warehouse)
    out = tmp_path / "x.json"
    status, _, err = cli(
        "-w", warehouse.location, "export", "perfetto", "--run", "nope", "-o", str(out)
    )
    assert status == 1
    assert err.splitlines() == [
        "Error: no run 'nope'; 'kvtrace sql \"SELECT run_id, run_name FROM runs\"' lists the runs"
    ]
    assert not out.exists()


def test_a_run_with_nothing_to_draw_is_one_sentence_and_exit_1(cli, warehouse, tmp_path):
    _put(warehouse, "arrivals", {"workload_requests": [{"request_idx": 0, "arrival_s": 0.0}]})
    out = tmp_path / "x.json"
    status, _, err = cli(
        "-w", warehouse.location, "export", "perfetto", "--run", "arrivals", "-o", str(out)
    )
    assert status == 1
    assert err.splitlines() == [
        "Error: run 'arrivals' has nothing to export: no rows with a time in timeline_events, "
        "timeline_counters, dsa_steps, dsa_prefill, pool_snapshots, engine_metrics, "
        "serving_counters, kv_events, request_timings, request_metrics, requests"
    ]
    assert not out.exists()


def test_the_command_says_what_it_wrote(cli, warehouse, tmp_path):
    _wall_run(warehouse)
    out = tmp_path / "wall.json"
    status, _, err = cli(
        "-w", warehouse.location, "export", "perfetto", "--run", "wall", "-o", str(out),
        "--source", "pool", "--source", "requests",
    )  # fmt: skip
    assert status == 0, err
    # 9 drawn, and 5 names: 2 processes, the pool worker's thread, 2 request lanes
    assert err.splitlines() == [
        f"wrote {out}: 14 events of wall (pool 3, requests 6)",
        "note: run 'wall': 1 requests have no arrival time and are left out",
    ]
    status, _, err = cli(
        "-w", warehouse.location, "export", "perfetto", "--run", "wall", "-o", str(out),
        "--source", "gpu",
    )  # fmt: skip
    assert status == 2 and "'gpu' is not one of profiler, counters, dsa" in err


def test_lanes_reuse_the_lowest_free_lane():
    lanes = Lanes()
    # [0, 10) lane 0; [2, 5) lane 1; [3, 4) lane 2; [5, 6) lane 1 again (ended at 5);
    # [4, 9) lane 2 (ended at 4); [10, 11) lane 0
    taken = [lanes.take(s, e) for s, e in ((0, 10), (2, 5), (3, 4), (4, 9), (5, 6), (10, 11))]
    assert taken == [0, 1, 2, 2, 1, 0]
    assert lanes.count == 3


# -- Perfetto's own trace processor -----------------------------------------------------------


def _trace_processor_shell() -> str:
    """The trace_processor_shell the perfetto package runs, where it is on this machine
    (it downloads it on first use: PERFETTO_BINARY_PATH names one already here)."""
    pytest.importorskip("perfetto.trace_processor", reason="the perfetto package is not installed")
    from perfetto.prebuilts.manifests.trace_processor_shell import TRACE_PROCESSOR_SHELL_MANIFEST

    given = os.environ.get("PERFETTO_BINARY_PATH")
    if given:
        return given
    machine = platform.machine().lower()
    for entry in TRACE_PROCESSOR_SHELL_MANIFEST:
        if entry.get("platform") == sys.platform and machine in entry.get("machine", []):
            # where perfetto.prebuilts.perfetto_prebuilts caches what it downloaded
            cached = (
                Path.home()
                / ".local/share/perfetto/prebuilts"
                / f"trace_processor_shell-{entry['sha256'][:16]}"
            )
            if cached.exists():
                return str(cached)
    pytest.skip(
        "Perfetto's trace_processor_shell binary is not on this machine: the perfetto "
        "package downloads it on first use, and there is no network here"
    )


def test_perfettos_trace_processor_reads_the_tracks(warehouse, tmp_path):
    """What Perfetto's JSON importer makes of the file (google/perfetto
    src/trace_processor/importers/json/json_trace_parser_impl.cc at 74fbed7d and
    json_trace_tokenizer.cc at 692321f2): a process per process_name event, a slice per
    complete event and thread-scoped instant, a process counter track per counter
    event's name and args key, named "<name> <key>", times in nanoseconds."""
    binary = _trace_processor_shell()
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    _wall_run(warehouse)
    ingest(warehouse, [str(_kineto(tmp_path / "rank0.json", 0))], run_name="prof")
    out = tmp_path / "both.json"
    export_perfetto(warehouse, PerfettoSpec(("prof", "wall"), out))
    events = _events(out)
    processor = TraceProcessor(trace=str(out), config=TraceProcessorConfig(bin_path=binary))
    try:
        processes = {
            (row.pid, row.name)
            for row in processor.query("SELECT pid, name FROM process WHERE name IS NOT NULL")
        }
        (slices,) = [row.n for row in processor.query("SELECT count(*) AS n FROM slice")]
        counters = {
            (row.name, round(row.ts / 1000), row.value)
            for row in processor.query(
                "SELECT t.name, c.ts, c.value FROM counter AS c "
                "JOIN process_counter_track AS t ON c.track_id = t.id"
            )
        }
    finally:
        processor.close()
    assert processes == set(_process_names(events).items())
    # every complete event and instant is a slice (Perfetto counts µs as ns)
    assert slices == sum(e["ph"] in ("X", "i") for e in events)
    assert ("layer 0 unique blocks", 1000, 5.0) in counters
    assert ("w GPU resident blocks", 2_000_000, 1.0) in counters
    assert ("prefetch hits", 1015, 3.0) in counters
