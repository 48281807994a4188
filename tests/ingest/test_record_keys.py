"""Every family: a file that grew adds only its new records, repeated lines add nothing,
and other bytes of the same records add nothing (the record's key decides)."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import DATA, write_jsonl
from tests.serving.fixtures import pool_rows, request_rows


def _count(warehouse, table: str) -> int:
    return connect(warehouse).execute(f"SELECT count(*) FROM {table}").fetchone()[0]


@pytest.mark.parametrize(
    ("rows", "table"),
    [
        (lambda: pool_rows(3)[:12], "pool_snapshots"),
        (lambda: request_rows()[:12], "request_metrics"),
    ],
)
def test_a_serving_file_that_grew_adds_only_its_new_records(warehouse, tmp_path, rows, table):
    records = rows()
    path = write_jsonl(tmp_path / "exp1_metrics.jsonl", records[:6])
    assert ingest(warehouse, [str(path)]).rows == 6
    write_jsonl(path, records)  # the replay went on writing
    report = ingest(warehouse, [str(path)])
    assert report.rows == 6
    assert sum(report.files[0].skipped.values()) == 6
    assert _count(warehouse, table) == 12


@pytest.mark.parametrize(
    ("rows", "table"),
    [
        (lambda: pool_rows(3)[:12], "pool_snapshots"),
        (lambda: request_rows()[:12], "request_metrics"),
    ],
)
def test_every_line_repeated_stores_each_record_once(warehouse, tmp_path, rows, table):
    records = rows()
    path = write_jsonl(tmp_path / "exp1_metrics.jsonl", [r for r in records for _ in (1, 2)])
    report = ingest(warehouse, [str(path)])
    assert report.rows == 12
    assert report.files[0].skipped == {"record repeated within the file": 12}
    assert _count(warehouse, table) == 12


def test_a_grown_arrival_trace_and_eval_file_add_only_their_new_records(warehouse, tmp_path):
    lines = (DATA / "mooncake_conversation_trace.jsonl").read_text().splitlines()
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text("\n".join(lines[:100]) + "\n")
    ingest(warehouse, [str(trace)])
    trace.write_text("\n".join(lines[:150]) + "\n")
    assert ingest(warehouse, [str(trace)]).rows == 50
    assert _count(warehouse, "workload_requests") == 150

    samples = [{"index": i, "pred": "7", "outputs": ["7"], "length": 100} for i in range(8)]
    predictions = write_jsonl(tmp_path / "ruler" / "niah_single_1.jsonl", samples[:5])
    ingest(warehouse, [str(predictions)])
    write_jsonl(predictions, samples)
    assert ingest(warehouse, [str(predictions)]).rows == 3
    assert _count(warehouse, "eval_samples") == 8


def test_a_profiler_trace_gzipped_is_the_same_events(warehouse, tmp_path):
    plain = tmp_path / "rank0.pt.trace.json"
    with gzip.open(DATA / "kineto_sampled_rank0.json.gz", "rb") as source:
        plain.write_bytes(source.read())
    zipped = tmp_path / "rank0.pt.trace.json.gz"
    shutil.copy(DATA / "kineto_sampled_rank0.json.gz", zipped)
    first = ingest(warehouse, [str(plain)]).rows
    assert first > 4000
    again = ingest(warehouse, [str(zipped)])
    assert (again.files[0].status, again.rows) == ("ingested", 0)
    assert _count(warehouse, "timeline_events") == first


def test_a_run_summary_under_another_name_is_stored_once(warehouse, tmp_path):
    summary = {"requests": 4449, "errors": 415}
    first = tmp_path / "exp2_summary.json"
    first.write_text(json.dumps(summary))
    copy = tmp_path / "copy" / "exp2_summary.json"
    copy.parent.mkdir()
    copy.write_text(json.dumps(summary, indent=2))  # other bytes, the same record
    assert ingest(warehouse, [str(first)]).rows == 1
    assert ingest(warehouse, [str(copy)]).rows == 0
    assert _count(warehouse, "run_summaries") == 1


def _kineto_events() -> tuple[dict, int]:
    """The sampled Kineto trace and its number of complete (``X``) events."""
    with gzip.open(DATA / "kineto_sampled_rank0.json.gz", "rb") as source:
        trace = json.load(source)
    complete = sum(1 for e in trace["traceEvents"] if e.get("ph") == "X")
    return trace, complete


@pytest.mark.parametrize("layout", ["each event twice", "the whole list twice"])
def test_a_profiler_trace_with_every_event_repeated_stores_each_event_once(
    warehouse, tmp_path, monkeypatch, layout
):
    from kvtrace.ingest.readers import kineto

    monkeypatch.setattr(kineto, "BATCH_EVENTS", 500)  # repeats in later batches, too
    trace, complete = _kineto_events()
    events = trace["traceEvents"]
    repeated = [e for e in events for _ in (1, 2)] if layout == "each event twice" else events * 2
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps({**trace, "traceEvents": repeated}))
    report = ingest(warehouse, [str(path)])
    assert report.rows == complete == 4811
    assert report.files[0].skipped == {"record repeated within the file": complete}
    stored = connect(warehouse).execute(
        "SELECT count(*), count(DISTINCT (pid, tid, ts_us, dur_us, name, correlation)) "
        "FROM timeline_events"
    )
    assert stored.fetchone() == (complete, complete)


def test_profiler_events_alike_but_for_one_kept_value_are_all_stored(warehouse, tmp_path):
    """Only an exact repeat is left out: the same kernel at the same time on another
    stream, with another correlation id, or given another Kineto event index, is stored."""
    kernel = {
        "ph": "X",
        "cat": "kernel",
        "name": "gemm",
        "pid": 0,
        "tid": 7,
        "ts": 100.5,
        "dur": 3,
        "args": {"stream": 7, "correlation": 1, "Ev Idx": 10},
    }
    variants = [
        kernel,
        {**kernel, "args": {**kernel["args"], "stream": 8}},
        {**kernel, "args": {**kernel["args"], "correlation": 2}},
        {**kernel, "args": {**kernel["args"], "Ev Idx": 11}},
        {**kernel, "args": {"stream": 7, "correlation": 1}},
        {**kernel, "dur": 3.5},
        {**kernel, "args": {**kernel["args"], "Unkept": "x"}},  # the same as the first
    ]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": variants}))
    report = ingest(warehouse, [str(path)])
    assert report.rows == 6
    assert report.files[0].skipped == {"record repeated within the file": 1}
