"""Counters on a profiler's clock: Kineto counter events and named-counter JSONL into
``timeline_counters``, and the writer an offloader uses for the JSONL.

The counter event's shape is the one Kineto's ``ChromeTraceLogger::writeCounterEvent``
writes (pytorch/kineto, libkineto/src/output_json.cpp at 114171df): ``"ph": "C"``,
``cat``, ``name``, ``pid``, ``tid``, ``ts`` and ``args`` mapping each series to a number;
its hardware counters use the pid ``"GPU <n> Counters"`` and one series named ``""``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kvtrace import connect
from kvtrace.collectors.counters import (
    KINETO_BASE_PERIOD_NS,
    CounterWriter,
    kineto_base_time_ns,
)
from kvtrace.errors import InputError
from kvtrace.ingest import ingest
from tests.conftest import DATA
from tests.timeline.events import kineto_event

BASE_NS = 1_735_632_360_000_000_000  # the baseTimeNanoseconds of HTA's amd_mi250_minitoy trace


def _counter(name: str, ts: float, pid: object = 1, **series: object) -> dict:
    return {"ph": "C", "cat": "offload", "name": name, "pid": pid, "tid": 0, "ts": ts,
            "args": series}  # fmt: skip


def _kineto_trace(path: Path, rank: int | None = 2) -> Path:
    events = [
        kineto_event("kernel", "attn", 10, 30, stream=7),
        _counter("kv_pool", 12.5, used_bytes=100, limit_bytes=200),
        kineto_event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 20, 5, stream=9, bytes=64),
        _counter("kv_pool", 40, used_bytes=150, limit_bytes=200),
        _counter("h2d_queue", 41, depth="deep", waiting=3),  # one series is not a number
        _counter("h2d_queue", "late", depth=1),  # no time: the whole event is bad
        _counter("GPU_CYCLES", 42.25, pid="GPU 0 Counters", **{"": 7}),  # a hardware counter
        _counter("kv_pool", 40, used_bytes=150, limit_bytes=200),  # an exact repeat
    ]
    info = {"distributedInfo": {"rank": rank, "world_size": 4}} if rank is not None else {}
    document = {"schemaVersion": 1, **info, "baseTimeNanoseconds": BASE_NS, "traceEvents": events}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


def test_counter_events_become_rows_beside_the_events_on_their_clock_and_rank(warehouse, tmp_path):
    trace = _kineto_trace(tmp_path / "offload" / "rank2.pt.trace.json")
    report = ingest(warehouse, [str(trace.parent)])
    (file,) = report.files
    # 2 complete events + counter rows: kv_pool 2 + 2, h2d_queue 1 (waiting), GPU_CYCLES 1
    assert file.rows == 2 + 6 and file.rejected == 2
    assert file.skipped == {"record repeated within the file": 2}
    con = connect(warehouse)
    rows = con.execute(
        "SELECT rank, pid, counter, series, labels, ts_us, value, source, event_idx "
        "FROM timeline_counters ORDER BY event_idx, series"
    ).fetchall()
    assert rows == [
        (2, "1", "kv_pool", "limit_bytes", "{}", 12.5, 200.0, "kineto", 1),
        (2, "1", "kv_pool", "used_bytes", "{}", 12.5, 100.0, "kineto", 1),
        (2, "1", "kv_pool", "limit_bytes", "{}", 40.0, 200.0, "kineto", 3),
        (2, "1", "kv_pool", "used_bytes", "{}", 40.0, 150.0, "kineto", 3),
        (2, "1", "h2d_queue", "waiting", "{}", 41.0, 3.0, "kineto", 4),
        (2, "GPU 0 Counters", "GPU_CYCLES", "", "{}", 42.25, 7.0, "kineto", 6),
    ]
    events = con.execute("SELECT rank, name, ts_us FROM timeline_events ORDER BY ts_us")
    assert events.fetchall() == [(2, "attn", 10.0), (2, "Memcpy HtoD (Pinned -> Device)", 20.0)]
    reasons = con.execute("SELECT line_no, reason FROM quarantine ORDER BY line_no").fetchall()
    assert [line for line, _ in reasons] == [5, 6]  # traceEvents[4] and [5]
    assert "args.depth must be a number" in reasons[0][1]
    assert "needs a numeric ts" in reasons[1][1]
    config = con.execute("SELECT collector_config FROM runs WHERE kind = 'timeline'").fetchone()[0]
    assert json.loads(config)["base_time_ns"] == BASE_NS


def test_counters_are_read_the_same_in_tiny_blocks(tmp_path, monkeypatch):
    """Counter events decoded in runs with the complete events, or one at a time where
    a run is cut at a block's end, give the same rows; the rank given after the events
    still reaches the last ones."""
    from kvtrace.ingest.readers import kineto

    trace = _kineto_trace(tmp_path / "rank2.pt.trace.json")

    def read() -> list[dict]:
        reader = kineto.KinetoReader(trace)
        tables = []
        for _ in reader.batches():
            tables += reader.take_counters()
        tables += reader.take_counters()
        return [row for table in tables for row in table.to_pylist()]

    whole = read()
    monkeypatch.setattr(kineto, "BLOCK_BYTES", 61)
    monkeypatch.setattr(kineto, "_LOOKAHEAD", 5)
    assert read() == whole and len(whole) == 6
    assert {row["rank"] for row in whole} == {2}


def test_a_trace_without_counter_events_fills_no_counters(warehouse):
    report = ingest(warehouse, [str(DATA / "kineto_sampled_rank0.json.gz")], run_name="s")
    assert report.files[0].rejected == 0
    assert connect(warehouse).execute("SELECT count(*) FROM timeline_counters").fetchone() == (0,)


def _counters_file(path: Path) -> Path:
    lines = [
        {"ts_us": 100.0, "name": "kv_prefetch_hits", "value": 3, "labels": {"layer": 1},
         "rank": 0},
        {"ts_us": 100.0, "name": "kv_prefetch_misses", "value": 1, "labels": {"layer": 1},
         "rank": 0},
        {"ts_us": 150.5, "name": "dram_pool_bytes", "value": 2.5e10,
         "labels": {"tier": "dram", "limit": "24GiB"}, "rank": 0, "pid": 4037},
        {"ts_us": 160, "name": "ssd_bytes_written", "value": 1048576},  # no rank, no labels
        {"ts_us": 170, "name": "h2d_queue_depth", "value": True},  # not a number
        {"ts_us": 180, "name": "", "value": 1},  # no name
        {"name": "h2d_queue_depth", "value": 2},  # no time
        {"ts_us": 190, "name": "x", "value": 1, "labels": {"a": [1]}},  # nested label
        "not an object",
    ]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_named_counters_jsonl_is_recognised_by_its_content(warehouse, tmp_path):
    path = _counters_file(tmp_path / "offload" / "offloader.jsonl")
    report = ingest(warehouse, [str(path)])
    (file,) = report.files
    assert (file.family, file.rows, file.rejected) == ("counters", 4, 5)
    rows = (
        connect(warehouse)
        .execute(
            "SELECT rank, pid, counter, series, labels, ts_us, value, source, event_idx "
            "FROM timeline_counters ORDER BY event_idx"
        )
        .fetchall()
    )
    assert rows == [
        (0, None, "kv_prefetch_hits", None, '{"layer":1}', 100.0, 3.0, "jsonl", 0),
        (0, None, "kv_prefetch_misses", None, '{"layer":1}', 100.0, 1.0, "jsonl", 1),
        (0, "4037", "dram_pool_bytes", None, '{"limit":"24GiB","tier":"dram"}', 150.5,
         2.5e10, "jsonl", 2),
        (None, None, "ssd_bytes_written", None, "{}", 160.0, 1048576.0, "jsonl", 3),
    ]  # fmt: skip
    again = ingest(warehouse, [str(path)], run_name="offload")
    assert again.files[0].status == "already ingested"


def test_a_counters_file_beside_its_trace_joins_the_trace_run(warehouse, tmp_path):
    trace = _kineto_trace(tmp_path / "step" / "rank2.pt.trace.json")
    _counters_file(tmp_path / "step" / "counters.jsonl")
    report = ingest(warehouse, [str(trace.parent)])
    assert len({file.run_id for file in report.files}) == 1
    sources = connect(warehouse).execute(
        "SELECT source, count(*) FROM timeline_counters GROUP BY source ORDER BY source"
    )
    assert sources.fetchall() == [("jsonl", 4), ("kineto", 6)]
    # the run stays a profiler run, whichever file's row the runs view keeps
    kinds = connect(warehouse).execute("SELECT DISTINCT kind FROM _runs_files")
    assert kinds.fetchall() == [("timeline",)]


def test_the_kineto_base_time_rule_matches_published_traces():
    """Kineto's base is the Unix time floored to whole three-month periods: each of
    HTA's published traces that gives a base has one such, and its events lie after it
    within one period."""
    bases = []
    for name in ("triton_example", "amd_mi250_minitoy"):
        with gzip.open(DATA / "hta" / f"{name}.json.gz") as source:
            trace = json.load(source)
        base = trace["baseTimeNanoseconds"]
        first = min(e["ts"] for e in trace["traceEvents"] if e.get("ph") == "X")
        assert kineto_base_time_ns(base + int(first * 1000)) == base
        bases.append(base)
    assert bases[1] == BASE_NS and all(base % KINETO_BASE_PERIOD_NS == 0 for base in bases)


def test_the_writer_puts_values_on_the_profiler_clock(warehouse, tmp_path):
    now = [BASE_NS + 5_000_250]  # 5,000.25 us after the base
    path = tmp_path / "run" / "counters.jsonl"
    path.parent.mkdir()
    with CounterWriter(path, rank=1, clock_ns=lambda: now[0]) as writer:
        assert writer.base_time_ns == BASE_NS
        writer.add("kv_prefetch_hits", 4, labels={"layer": 2})
        now[0] += 1_500  # 1.5 us later
        writer.add("h2d_queue_depth", 3)
        writer.add("ssd_bytes_written", 4096, ts_us=9.0)
        for bad in (float("nan"), 10**400, "7", True):
            with pytest.raises(InputError, match="finite number"):
                writer.add("bad", bad)  # type: ignore[arg-type]
        with pytest.raises(InputError, match="labels of text"):
            writer.add("bad", 1, labels={"blocks": [1, 2]})  # type: ignore[dict-item]
    with pytest.raises(InputError, match="closed"):
        writer.add("late", 1)
    ingest(warehouse, [str(path)])
    rows = (
        connect(warehouse)
        .execute(
            "SELECT rank, counter, labels, ts_us, value FROM timeline_counters ORDER BY event_idx"
        )
        .fetchall()
    )
    assert rows == [
        (1, "kv_prefetch_hits", '{"layer":2}', 5000.25, 4.0),
        (1, "h2d_queue_depth", "{}", 5001.75, 3.0),
        (1, "ssd_bytes_written", "{}", 9.0, 4096.0),
    ]


def test_a_trace_older_than_base_times_takes_a_zero_base(tmp_path):
    path = tmp_path / "counters.jsonl"
    with CounterWriter(path, base_time_ns=0, clock_ns=lambda: 1_682_725_898_236_567_000) as w:
        w.add("x", 1)
    assert json.loads(path.read_text())["ts_us"] == 1_682_725_898_236_567.0


def test_the_writer_makes_the_folder_the_profiler_has_not_written_yet(tmp_path):
    # the guide's CounterWriter("profile/counters.jsonl") runs before the profiler
    # writes its trace into profile/, so the folder may not exist yet
    path = tmp_path / "profile" / "counters.jsonl"
    with CounterWriter(path, base_time_ns=0, clock_ns=lambda: 2_000) as writer:
        writer.add("h2d_queue_depth", 2)
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"ts_us": 2.0, "name": "h2d_queue_depth", "value": 2, "labels": {}, "rank": None}
    ]


def test_values_beyond_a_float_and_not_finite_are_quarantined_not_a_crash(warehouse, tmp_path):
    """JSON allows integers of any size and Python's json writes NaN: neither is a
    counter value, and the file's good values are kept."""
    folder = tmp_path / "odd"
    folder.mkdir()
    huge = "1" + "0" * 400
    (folder / "rank0.pt.trace.json").write_text(
        '{"traceEvents": [{"ph": "C", "name": "q", "pid": 1, "ts": 5, '
        f'"args": {{"ok": 2, "huge": {huge}, "nan": NaN}}}}, '
        f'{{"ph": "C", "name": "q", "pid": 1, "ts": {huge}, "args": {{"ok": 3}}}}]}}'
    )
    (folder / "counters.jsonl").write_text(
        f'{{"ts_us": 1, "name": "a", "value": {huge}}}\n'
        '{"ts_us": 2, "name": "a", "value": NaN}\n'
        f'{{"ts_us": {huge}, "name": "a", "value": 1}}\n'
        '{"ts_us": 3, "name": "a", "value": 7}\n'
    )
    report = ingest(warehouse, [str(folder)])
    assert sorted((f.family, f.rows, f.rejected) for f in report.files) == [
        ("counters", 1, 3),
        ("timeline", 1, 2),
    ]
    rows = connect(warehouse).execute(
        "SELECT source, counter, series, ts_us, value FROM timeline_counters ORDER BY source"
    )
    assert rows.fetchall() == [("jsonl", "a", None, 3.0, 7.0), ("kineto", "q", "ok", 5.0, 2.0)]


def test_the_writer_takes_values_from_several_threads_whole(tmp_path):
    """An offloader's prefetch and writer threads share one writer: every line is one
    whole record, none lost."""
    import threading

    path = tmp_path / "counters.jsonl"
    with CounterWriter(path, base_time_ns=0, clock_ns=lambda: 1_000) as writer:

        def count(thread: int) -> None:
            for i in range(500):
                writer.add(f"thread{thread}", i, labels={"i": i})

        threads = [threading.Thread(target=count, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 2000
    for t in range(4):
        values = [r["value"] for r in records if r["name"] == f"thread{t}"]
        assert values == list(range(500))  # each thread's values in its own order


def test_counters_written_inside_a_profiled_span_land_inside_it_in_the_trace(warehouse, tmp_path):
    """The clock, checked against PyTorch's own profiler: a counter written inside a
    record_function span lies within that span on the trace's clock once both are
    ingested (a counter on another clock, time.perf_counter_ns, would be off by years)."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    folder = tmp_path / "profiled"
    folder.mkdir()
    x = torch.ones(64, 64)
    with (
        profile(activities=[ProfilerActivity.CPU]) as prof,
        CounterWriter(folder / "counters.jsonl") as counters,
    ):
        for step in range(3):
            with record_function(f"offload_step_{step}"):
                counters.add("step_started", step)
                x = x @ x / 64
                counters.add("step_done", step)
    prof.export_chrome_trace(str(folder / "rank0.pt.trace.json"))
    assert json.loads((folder / "rank0.pt.trace.json").read_text())["baseTimeNanoseconds"] == (
        counters.base_time_ns
    )
    ingest(warehouse, [str(folder)])
    rows = (
        connect(warehouse)
        .execute(
            "SELECT c.counter, c.value, c.ts_us - e.ts_us AS after_start, "
            "e.ts_us + e.dur_us - c.ts_us AS before_end "
            "FROM timeline_counters AS c JOIN timeline_events AS e "
            "ON e.name = 'offload_step_' || CAST(c.value AS INTEGER) "
            "AND e.category = 'user_annotation' "
            "ORDER BY c.event_idx"
        )
        .fetchall()
    )
    assert [(name, value) for name, value, _, _ in rows] == [
        (name, float(step)) for step in range(3) for name in ("step_started", "step_done")
    ]
    # inside the span, to within the microsecond Kineto rounds its times to
    assert all(after > -1 and before > -1 for _, _, after, before in rows), rows
