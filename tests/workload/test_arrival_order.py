"""An arrival trace out of arrival order keeps every request: each keeps its data row as
its key (so the same file adds nothing again and a grown one only its new requests), its
arrival time counts from the trace's earliest arrival, and the ingest says how many
requests were out of order.  Mooncake's published trace, shuffled, and CSV traces."""

from __future__ import annotations

import json
import random

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest, lines
from kvtrace.ingest import workload as workload_reader
from tests.conftest import DATA, warehouse_at

MOONCAKE = DATA / "mooncake_conversation_trace.jsonl"


def _shuffled(count: int, seed: int = 7) -> list[str]:
    records = MOONCAKE.read_text().splitlines()[:count]
    random.Random(seed).shuffle(records)
    return records


def _out_of_order(arrivals: list[float]) -> int:
    """Requests that arrive earlier than one before them in the file."""
    return sum(a < max(arrivals[:i]) for i, a in enumerate(arrivals) if i)


def _stored(location: str) -> list[tuple]:
    query = "SELECT request_idx, arrival_s, input_tokens FROM workload_requests ORDER BY 1"
    return connect(location).execute(query).fetchall()


def _quarantined(location: str) -> int:
    return connect(location).execute("SELECT count(*) FROM quarantine").fetchone()[0]


def _expected(records: list[str]) -> list[tuple]:
    """Each request by its data row, its arrival counted from the earliest (seconds)."""
    stamps = [json.loads(r)["timestamp"] / 1000.0 for r in records]
    origin = min(stamps)
    return [
        (i, stamp - origin, json.loads(r)["input_length"])
        for i, (stamp, r) in enumerate(zip(stamps, records, strict=True))
    ]


def test_a_shuffled_mooncake_trace_keeps_every_request_and_says_so(cli, tmp_path):
    records = _shuffled(200)
    trace = tmp_path / "shuffled.jsonl"
    trace.write_text("\n".join(records) + "\n")
    location = warehouse_at(tmp_path / "wh")
    status, out, err = cli("-w", location, "ingest", str(trace))
    assert status == 0, err
    late = _out_of_order([json.loads(r)["timestamp"] for r in records])
    assert late > 150
    assert "shuffled.jsonl: 200 rows into run" in out and "line(s) rejected (see" not in out
    assert f"  {late:,} requests were out of arrival order; kept" in out, out
    assert _quarantined(location) == 0
    assert _stored(location) == _expected(records)
    # in arrival order: the stable sort of the file by timestamp
    in_order = connect(location).execute(
        "SELECT request_idx FROM workload_requests ORDER BY arrival_s, request_idx"
    )
    by_arrival = sorted(range(200), key=lambda i: json.loads(records[i])["timestamp"])
    assert [row[0] for row in in_order.fetchall()] == by_arrival


def test_a_shuffled_trace_ingested_again_or_grown_adds_only_new_requests(cli, tmp_path):
    records = _shuffled(300)
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(records[:200]) + "\n")
    location = warehouse_at(tmp_path / "wh")
    assert cli("-w", location, "ingest", str(trace))[0] == 0
    first = _stored(location)
    status, out, _ = cli("-w", location, "ingest", str(trace))
    assert status == 0 and "already ingested" in out
    # the grown file's new requests arrive among the old ones (none before the earliest)
    earliest = min(json.loads(r)["timestamp"] for r in records[:200])
    grown = [r for r in records[200:] if json.loads(r)["timestamp"] >= earliest]
    trace.write_text("\n".join(records[:200] + grown) + "\n")
    status, out, _ = cli("-w", location, "ingest", str(trace))
    assert status == 0 and f"{len(grown)} rows into run" in out, out
    stored = _stored(location)
    assert stored[:200] == first
    assert stored == _expected(records[:200] + grown)


@pytest.mark.parametrize("row_group", [7, 1 << 17])
def test_the_earliest_request_late_in_a_long_trace_is_time_zero(tmp_path, monkeypatch, row_group):
    # the earliest arrival comes after row groups were stored: they count from it too
    monkeypatch.setattr(lines, "CHUNK_BYTES", 2000)
    monkeypatch.setattr(workload_reader, "ROW_GROUP_ROWS", row_group)
    records = MOONCAKE.read_text().splitlines()[1000:1100]
    records.append(MOONCAKE.read_text().splitlines()[0])  # timestamp 0, the earliest
    trace = tmp_path / "late.jsonl"
    trace.write_text("\n".join(records) + "\n")
    location = warehouse_at(tmp_path / "wh")
    from kvtrace.warehouse import Warehouse

    report = ingest(Warehouse(location, create=True), [str(trace)])
    assert (report.rows, report.rejected) == (101, 0)
    assert report.files[0].skipped == {}
    assert _stored(location) == _expected(records)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        (
            "azure.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "2023-11-16 18:17:03.5000000,300,3\n"
            "2023-11-16 18:17:02.0000000,100,1\n"
            "2023-11-16 18:17:04.2500000,400,4\n"
            "2023-11-16 18:17:02.7500000,200,2\n",
        ),
        (
            "burst.csv",
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "3.5,ChatGPT,300,3,303,Conversation log\n"
            "2,ChatGPT,100,1,101,Conversation log\n"
            "4.25,GPT-4,400,4,404,API log\n"
            "2.75,GPT-4,200,2,202,API log\n",
        ),
        (
            "split.csv",
            "arrived_at,num_prefill_tokens,num_decode_tokens\n3.5,300,3\n2,100,1\n4.25,400,4\n"
            "2.75,200,2\n",
        ),
    ],
)
def test_a_csv_trace_out_of_order_keeps_every_request(cli, tmp_path, name, text):
    trace = tmp_path / name
    trace.write_text(text)
    location = warehouse_at(tmp_path / "wh")
    status, out, err = cli("-w", location, "ingest", str(trace))
    assert status == 0, err
    assert f"{name}: 4 rows into run" in out and "  2 requests were out of arrival order" in out
    assert _quarantined(location) == 0
    stored = _stored(location)
    assert [(idx, tokens) for idx, _, tokens in stored] == [(0, 300), (1, 100), (2, 400), (3, 200)]
    arrivals = [arrival for _, arrival, _ in stored]
    assert arrivals == pytest.approx([1.5, 0.0, 2.25, 0.75], abs=1e-6)  # (wall-clock seconds)


def test_an_ordered_trace_says_nothing_of_order(cli, tmp_path):
    trace = tmp_path / "ordered.jsonl"
    trace.write_text("\n".join(MOONCAKE.read_text().splitlines()[:50]) + "\n")
    status, out, _ = cli("-w", warehouse_at(tmp_path / "wh"), "ingest", str(trace))
    assert status == 0 and "out of arrival order" not in out
