"""Arrival traces into workload_requests, and the workload views against plain Python."""

from __future__ import annotations

import json
from collections import OrderedDict
from datetime import datetime

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import DATA, warehouse_at

MOONCAKE = DATA / "mooncake_conversation_trace.jsonl"
AZURE = DATA / "azure_llm_inference_code.csv"


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    from kvtrace.warehouse import Warehouse

    warehouse = Warehouse(warehouse_at(tmp_path_factory.mktemp("workload") / "wh"), create=True)
    report = ingest(warehouse, [str(MOONCAKE), str(AZURE)])
    assert [(f.fmt, f.rows, f.rejected) for f in report.files] == [
        ("mooncake", 12031, 0),
        ("azure", 8819, 0),
    ]
    con = connect(warehouse)
    yield con
    con.close()


def _mooncake() -> list[dict]:
    return [json.loads(line) for line in MOONCAKE.read_text().splitlines() if line.strip()]


def test_prefix_reuse_matches_a_walk_over_the_trace(traces):
    seen: set[int] = set()
    blocks = seen_blocks = hit_blocks = 0
    hit_tokens = []
    for record in _mooncake():
        ids = record["hash_ids"]
        leading = next((i for i, h in enumerate(ids) if h not in seen), len(ids))
        blocks += len(ids)
        seen_blocks += sum(h in seen for h in ids)
        hit_blocks += leading
        hit_tokens.append(min(leading * 512, record["input_length"]))
        seen.update(ids)
    row = traces.execute(
        "SELECT requests, blocks, distinct_blocks, seen_blocks, reuse_share, "
        "prefix_hit_share, mean_hit_tokens FROM workload_prefix_reuse"
    ).fetchone()
    assert row == (
        12031,
        blocks,
        len(seen),
        seen_blocks,
        pytest.approx(seen_blocks / blocks),
        pytest.approx(hit_blocks / blocks),
        pytest.approx(np.mean(hit_tokens)),
    )


def _lru_hits(stream: list[int], capacity: int) -> int:
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for key in stream:
        if key in cache:
            hits += 1
            cache.move_to_end(key)
        else:
            cache[key] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits


def test_the_lru_curve_equals_a_simulated_cache_and_opt_bounds_it(traces):
    stream = [h for record in _mooncake() for h in record["hash_ids"]]
    lru = dict(
        traces.execute(
            "SELECT capacity_blocks, hits FROM workload_prefix_hit_curve('lru')"
        ).fetchall()
    )
    for capacity in (1, 64, 1024):
        assert lru[capacity] == _lru_hits(stream, capacity), capacity
    named = traces.execute(  # a named capacity replaces the powers of two
        "SELECT capacity_blocks, hits FROM workload_prefix_hit_curve('lru', [3000])"
    ).fetchall()
    assert named == [(3000, _lru_hits(stream, 3000))]
    opt = dict(
        traces.execute(
            "SELECT capacity_blocks, hits FROM workload_prefix_hit_curve('opt')"
        ).fetchall()
    )
    assert all(opt[c] >= lru[c] for c in opt)
    largest = max(lru)
    reuse = traces.execute("SELECT seen_blocks FROM workload_prefix_reuse").fetchone()[0]
    assert lru[largest] == opt[largest] == reuse  # only first reads miss


def test_the_arrival_summary_of_the_azure_trace(traces):
    lines = AZURE.read_text().splitlines()[1:]
    stamps = np.array(
        [datetime.fromisoformat(line.split(",")[0][:26]).timestamp() for line in lines]
    )
    gaps = np.diff(stamps)
    arrival = stamps - stamps[0]
    busiest = np.bincount(np.floor(arrival / 60).astype(int)).max()
    rate = (len(stamps) - 1) / arrival[-1]
    row = traces.execute(
        "SELECT s.requests, duration_s, rate_per_s, gap_cv, burstiness, peak_to_mean "
        "FROM workload_arrival_summary s JOIN runs USING (run_id) "
        "WHERE run_name = 'azure_llm_inference_code'"
    ).fetchone()
    assert row == (
        8819,
        pytest.approx(arrival[-1], abs=1e-4),
        pytest.approx(rate),
        pytest.approx(gaps.std() / gaps.mean(), rel=1e-4),
        pytest.approx((gaps.std() - gaps.mean()) / (gaps.std() + gaps.mean()), rel=1e-4),
        pytest.approx(busiest / 60 / rate),
    )
    windows = traces.execute(
        "SELECT requests FROM workload_arrivals(10) w JOIN runs USING (run_id) "
        "WHERE run_name = 'azure_llm_inference_code' ORDER BY window_start_s"
    ).fetchall()
    counts = np.bincount(np.floor(arrival / 10).astype(int))
    assert [n for (n,) in windows] == [int(c) for c in counts if c]
    # every window's rate is over the time it covers: the last ends at the last arrival
    rates = traces.execute(
        "SELECT window_start_s, rate_per_s, covered_s, partial FROM workload_arrivals(10) w "
        "JOIN runs USING (run_id) WHERE run_name = 'azure_llm_inference_code' "
        "ORDER BY window_start_s"
    ).fetchall()
    starts = [10 * w for w, c in enumerate(counts) if c]
    covered = [min(10.0, arrival[-1] - start) for start in starts]
    assert covered[-1] < 10  # the trace ends inside its last window
    assert rates == [
        (start, pytest.approx(n / span), pytest.approx(span), span < 10)
        for start, n, span in zip(starts, [int(c) for c in counts if c], covered, strict=True)
    ]


def test_lengths_and_the_prefill_decode_ratio(traces):
    records = _mooncake()
    inputs = np.array([r["input_length"] for r in records])
    outputs = np.array([r["output_length"] for r in records])
    row = traces.execute(
        "SELECT input_mean, input_p90, output_p50, prefill_decode_ratio FROM workload_lengths "
        "l JOIN runs USING (run_id) WHERE run_name = 'mooncake_conversation_trace'"
    ).fetchone()
    assert row == (
        pytest.approx(inputs.mean()),
        pytest.approx(np.percentile(inputs, 90)),
        pytest.approx(np.median(outputs)),
        pytest.approx(inputs.sum() / outputs.sum()),
    )


def test_requests_an_older_kvtrace_stored_twice_count_once(tmp_path):
    """Before records were keyed at ingest, a grown trace ingested again stored its first
    requests twice; the views count each once, gaps included."""
    import pyarrow.parquet as pq

    from kvtrace.warehouse import Warehouse

    lines = AZURE.read_text().splitlines()[1:]
    stamps = np.array(
        [datetime.fromisoformat(line.split(",")[0][:26]).timestamp() for line in lines]
    )
    gaps = np.diff(stamps)
    warehouse = Warehouse(tmp_path / "wh", create=True)
    run_id = ingest(warehouse, [str(AZURE)]).files[0].run_id
    (path,) = warehouse.run_files(run_id, "workload_requests")
    stored = pq.read_table(warehouse.root / path)
    with warehouse.transaction(run_id) as commit:  # past the sink, as an older kvtrace
        warehouse.write(commit, "workload_requests", stored.slice(100, 500))
    con = connect(warehouse)
    assert con.execute("SELECT count(*) FROM _workload_requests_files").fetchone() == (9319,)
    row = con.execute(
        "SELECT s.requests, s.gap_cv, l.requests, l.input_mean "
        "FROM workload_arrival_summary s JOIN workload_lengths l USING (run_id)"
    ).fetchone()
    inputs = np.array([int(line.split(",")[1]) for line in lines])
    assert row == (
        8819,
        pytest.approx(gaps.std() / gaps.mean(), rel=1e-4),
        8819,
        pytest.approx(inputs.mean()),
    )
    windows = con.execute("SELECT sum(requests) FROM workload_arrivals(60)").fetchone()
    assert windows == (8819,)


def test_bad_rows_are_quarantined_and_the_rest_kept(cli, tmp_path):
    trace = tmp_path / "azure_mini.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.9799600,4808,10\n"
        "2023-11-16 18:17:04.5000000,-3,8\n"  # negative length
        "2023-11-16 18:17:04.6000000,12x,8\n"  # unparsable
        "2023-11-16 18:17:02.0000000,100,8\n"  # earlier than the request before it: kept
        "yesterday,100,8\n"
        "2023-11-16 18:17:05.9799600,2000,20\n"
    )
    status, out, err = cli("-w", warehouse_at(tmp_path / "wh"), "ingest", str(trace))
    assert status == 0, err
    assert "3 rows into run azure_mini" in out and "3 line(s) rejected" in out
    status, out, _ = cli(
        "-w",
        warehouse_at(tmp_path / "wh"),
        "sql",
        "SELECT line_no, reason FROM quarantine ORDER BY line_no",
        "-f",
        "csv",
    )
    assert out.splitlines()[1:] == [
        "3,input_tokens is negative",
        "4,input_tokens is not a whole number",
        "6,TIMESTAMP is not a time stamp",
    ]
    status, out, _ = cli(
        "-w",
        warehouse_at(tmp_path / "wh"),
        "sql",
        "SELECT request_idx, arrival_s, input_tokens FROM workload_requests ORDER BY request_idx",
        "-f",
        "csv",
    )
    stored = [line.split(",") for line in out.splitlines()[1:]]
    assert [(int(idx), int(tokens)) for idx, _, tokens in stored] == [
        (0, 4808),
        (3, 100),
        (5, 2000),
    ]
    # seconds since the earliest arrival, the request of line 5
    arrivals = [float(arrival) for _, arrival, _ in stored]
    assert arrivals == pytest.approx([1.97996, 0.0, 3.97996], abs=1e-6)


def test_burstgpt_and_splitwise_columns(cli, tmp_path):
    burst = tmp_path / "burst.csv"
    burst.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "7.5,GPT-4,1000,200,1200,API log\n"
        "9.5,ChatGPT,10,1,11,Conversation log\n"
    )
    split = tmp_path / "split.csv"
    split.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.25,100,10\n1.0,50,5\n")
    status, _, err = cli("-w", warehouse_at(tmp_path / "wh"), "ingest", str(burst), str(split))
    assert status == 0, err
    status, out, _ = cli(
        "-w",
        warehouse_at(tmp_path / "wh"),
        "sql",
        "SELECT r.run_name, w.arrival_s, w.input_tokens, w.output_tokens, "
        "w.model, w.log_type FROM workload_requests w JOIN runs r "
        "USING (run_id) ORDER BY r.run_name, w.arrival_s",
        "-f",
        "csv",
    )
    assert out.splitlines()[1:] == [
        "burst,0.0,472,18,ChatGPT,Conversation log",
        "burst,2.5,1000,200,GPT-4,API log",
        "burst,4.5,10,1,ChatGPT,Conversation log",
        "split,0.0,100,10,,",
        "split,0.75,50,5,,",
    ]
    status, out, _ = cli(
        "-w",
        warehouse_at(tmp_path / "wh"),
        "sql",
        "SELECT a.model, a.requests, a.rate_per_s FROM workload_arrival_by_model "
        "a JOIN runs r USING (run_id) WHERE r.run_name = 'burst' "
        "ORDER BY a.model",
        "-f",
        "csv",
    )
    # ChatGPT: 2 requests 4.5 s apart; GPT-4: one request, so no rate
    assert out.splitlines()[1:] == [f"ChatGPT,2,{1 / 4.5}", "GPT-4,1,"]
    unknown = tmp_path / "other.csv"
    unknown.write_text("when,prompt,answer\n1,2,3\n")
    status, _, err = cli("-w", warehouse_at(tmp_path / "wh"), "ingest", str(unknown))
    assert status == 1
    assert "is not a CSV file kvtrace knows: its header (when, prompt, answer)" in err


def test_a_column_mapping_reads_a_layout_kvtrace_does_not_know(cli, tmp_path):
    trace = tmp_path / "mine.csv"
    trace.write_text("t_ms,prompt,completion,who\n1000,10,2,a\n1500,20,4,b\n")
    status, out, err = cli(
        "-w",
        warehouse_at(tmp_path / "wh"),
        "ingest",
        str(trace),
        "--columns",
        "arrival=t_ms,input_tokens=prompt,output_tokens=completion,model=who,arrival_unit=ms",
    )
    assert status == 0, err
    status, out, _ = cli(
        "-w",
        warehouse_at(tmp_path / "wh"),
        "sql",
        "SELECT arrival_s, input_tokens, output_tokens, model FROM workload_requests ORDER BY 1",
        "-f",
        "csv",
    )
    assert out.splitlines()[1:] == ["0.0,10,2,a", "0.5,20,4,b"]
    status, _, err = cli(
        "-w",
        warehouse_at(tmp_path / "wh"),
        "ingest",
        str(trace),
        "--columns",
        "arrival=t_ms,input_tokens=prompt",
    )
    assert status == 1 and "--columns must name output_tokens" in err
    other = tmp_path / "other.csv"  # other bytes: a copy would be "already ingested"
    other.write_text(trace.read_text() + "2000,30,6,c\n")
    status, _, err = cli(
        "-w",
        warehouse_at(tmp_path / "wh"),
        "ingest",
        str(other),
        "--columns",
        "arrival=t,input_tokens=prompt,output_tokens=completion",
    )
    assert status == 1 and "has no column t (its header: t_ms, prompt, completion, who)" in err


def test_reuse_within_a_session_and_across_sessions(warehouse, tmp_path):
    trace = tmp_path / "sessions.jsonl"
    records = [  # session a: [1, 2], then [1, 2, 3]; session b: [1, 9], then [9, 3]
        {
            "timestamp": 0,
            "input_length": 10,
            "output_length": 1,
            "hash_ids": [1, 2],
            "session_id": "a",
        },
        {
            "timestamp": 1,
            "input_length": 10,
            "output_length": 1,
            "hash_ids": [1, 9],
            "conversation_id": "b",
        },
        {
            "timestamp": 2,
            "input_length": 10,
            "output_length": 1,
            "hash_ids": [1, 2, 3],
            "session_id": "a",
        },
        {
            "timestamp": 3,
            "input_length": 10,
            "output_length": 1,
            "hash_ids": [9, 3],
            "session_id": "b",
        },
    ]
    trace.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    ingest(warehouse, [str(trace)])
    rows = (
        connect(warehouse)
        .execute(
            "SELECT session_id, requests, blocks, seen_in_session, seen_elsewhere "
            "FROM workload_session_reuse"
        )
        .fetchall()
    )
    # a: 5 blocks; 1 and 2 again in its second request; 1 was never someone else's first
    # b: 4 blocks; block 1 first read by a, 9 again in its own second turn, 3 first read by a
    assert rows == [("a", 2, 5, 2, 0), ("b", 2, 4, 1, 2)]


def test_burstgpt_session_ids_are_kept(cli, tmp_path):
    burst = tmp_path / "burst_sessions.csv"
    burst.write_text(
        "Timestamp,Session ID,Model,Request tokens,Response tokens,Total tokens,"
        "Log Type\n1,s-1,ChatGPT,10,2,12,Conversation log\n"
    )
    status, _, err = cli("-w", warehouse_at(tmp_path / "wh"), "ingest", str(burst))
    assert status == 0, err
    status, out, _ = cli(
        "-w",
        warehouse_at(tmp_path / "wh"),
        "sql",
        "SELECT session_id, model FROM workload_requests",
        "-f",
        "csv",
    )
    assert out.splitlines()[1:] == ["s-1,ChatGPT"]
