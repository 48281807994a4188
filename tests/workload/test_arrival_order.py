"""An arrival trace out of arrival order keeps every request: each keeps its data row as
its key (so the same file adds nothing again and a grown one only its new requests), its
arrival time counts from the trace's earliest arrival, and the ingest says how many
requests were out of order.  Mooncake's published trace, shuffled, and CSV traces.  Every
workload view and analysis takes the requests in arrival order (arrival_s, then
request_idx), so a shuffled trace answers every question as the same trace sorted."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping

import pytest

from kvtrace import connect
from kvtrace.ingest import _lines as lines
from kvtrace.ingest import ingest
from kvtrace.ingest.readers import workload as workload_reader
from kvtrace.warehouse import Warehouse
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


# -- every analysis follows arrival order, not file order ---------------------------------

_ANSWERS = (
    "SELECT * FROM workload_requests ORDER BY run_id, arrival_s, request_idx",
    "SELECT * FROM workload_arrival_summary",
    "SELECT * FROM workload_arrival_by_model",
    "SELECT * FROM workload_arrivals(60)",
    "SELECT * FROM workload_arrivals(5)",
    "SELECT * FROM workload_lengths",
    "SELECT * FROM workload_prefix_hits",
    "SELECT * FROM workload_prefix_reuse",
    "SELECT * FROM workload_session_reuse",
    "SELECT * FROM workload_prefix_tree",
    *(
        f"SELECT * FROM workload_prefix_hit_curve('{policy}', [2, 7, 40], '{semantics}', "
        f"'{weight}', 0.25)"
        for policy, semantics in (
            ("lru", "block"),
            ("opt", "block"),
            ("fifo", "block"),
            ("lru", "prefix"),
            ("fifo", "prefix"),
            ("radix_lru", "prefix"),
            ("opt", "prefix"),
        )
        for weight in ("blocks", "tokens", "requests")
    ),
    *(
        f"SELECT * FROM workload_prefix_requests('{policy}', [3, 40], '{semantics}', 0.25, "
        "prefill_tok_s := 1000.0)"
        for policy, semantics in (("lru", "block"), ("radix_lru", "prefix"), ("opt", "prefix"))
    ),
)


def _mooncake_slice(seed: int) -> list[dict]:
    """A real slice of Mooncake's trace (48 distinct time stamps over 400 requests, so
    many ties), each request given one of a few sessions."""
    chosen = random.Random(seed)
    records = [json.loads(line) for line in MOONCAKE.read_text().splitlines()[:400]]
    return [{**r, "session_id": f"s{chosen.randrange(6)}"} for r in records]


def _generated(seed: int) -> list[dict]:
    """Requests whose ids repeat under other parents (not chained), at a few time stamps."""
    chosen = random.Random(seed)
    stems = [[chosen.randrange(40) for _ in range(chosen.randrange(1, 6))] for _ in range(8)]
    return [
        {
            "timestamp": chosen.randrange(30) * 250,
            "input_length": chosen.randrange(1, 12) * 300,
            "output_length": chosen.randrange(1, 50),
            "hash_ids": chosen.choice(stems)[: chosen.randrange(1, 6)]
            + [chosen.randrange(40) for _ in range(chosen.randrange(0, 4))],
            "session_id": f"s{chosen.randrange(4)}",
        }
        for _ in range(150)
    ]


def _answers(location: str) -> dict[str, dict[str, list[dict]]]:
    """Each query's rows, per run (keyed by the run's name), the run column left out."""
    con = connect(location)
    names = dict(con.execute("SELECT run_id, run_name FROM runs").fetchall())
    answers: dict[str, dict[str, list[dict]]] = {}
    for query in _ANSWERS:
        result = con.execute(query)
        columns = [c[0] for c in result.description]
        for row in result.fetchall():
            named = dict(zip(columns, row, strict=True))
            run = names[named.pop("run_id")]
            answers.setdefault(run, {}).setdefault(query, []).append(named)
    return answers


def _in_arrival_order(records: list[dict]) -> list[int]:
    """The data rows in arrival order: a stable sort of the file by time stamp."""
    return sorted(range(len(records)), key=lambda i: records[i]["timestamp"])


def _by_arrival(rows: dict[str, list[dict]], place: Mapping[int, int]) -> dict[str, list[tuple]]:
    """The rows with each request named by its place in arrival order, not its data row."""
    return {
        query: [
            tuple(
                place[value] if column == "request_idx" else value for column, value in row.items()
            )
            for row in found
        ]
        for query, found in rows.items()
    }


def _close(found: object, expected: object) -> bool:
    """Equal, floats to their summation order."""
    if isinstance(found, float) and isinstance(expected, float):
        return math.isclose(found, expected, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(found, list | tuple) and isinstance(expected, list | tuple):
        return len(found) == len(expected) and all(map(_close, found, expected))
    return found == expected


def _same(found: dict[str, list[tuple]], expected: dict[str, list[tuple]]) -> None:
    """Equal answers, query by query; the first row that differs named."""
    assert found.keys() == expected.keys()
    for query, rows in expected.items():
        assert len(found[query]) == len(rows), query
        for got, wanted in zip(found[query], rows, strict=True):
            assert _close(got, wanted), f"{query}: {got} != {wanted}"


def _leading_hits(records: list[dict]) -> list[int]:
    """Each request's leading run of blocks some request arriving before it read, in
    arrival order (an infinite prefix cache)."""
    seen: set[int] = set()
    hits = []
    for i in _in_arrival_order(records):
        ids = records[i]["hash_ids"]
        hits.append(next((k for k, h in enumerate(ids) if h not in seen), len(ids)))
        seen.update(ids)
    return hits


@pytest.mark.parametrize(
    ("make", "seed"),
    [(_mooncake_slice, 1), (_mooncake_slice, 2), (_mooncake_slice, 3), (_generated, 4)],
)
def test_a_shuffled_trace_answers_every_workload_question_as_the_same_trace_sorted(
    tmp_path, make, seed
):
    records = make(seed)
    random.Random(seed).shuffle(records)
    order = _in_arrival_order(records)
    files = {
        "shuffled": records,
        "sorted": [records[i] for i in order],  # stable: ties keep their file order
    }
    for name, rows in files.items():
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    location = warehouse_at(tmp_path / "wh")
    report = ingest(Warehouse(location, create=True), [str(tmp_path / f"{n}.jsonl") for n in files])
    assert (report.rows, report.rejected) == (2 * len(records), 0)
    answers = _answers(location)
    in_place = {row: row for row in range(len(records))}  # the sorted file's rows
    shuffled_place = {row: place for place, row in enumerate(order)}
    _same(
        _by_arrival(answers["shuffled"], shuffled_place),
        _by_arrival(answers["sorted"], in_place),
    )
    # and what an infinite prefix cache serves is counted in arrival order
    hits = answers["shuffled"]["SELECT * FROM workload_prefix_hits"]
    assert [row["request_idx"] for row in hits] == order
    assert [row["hit_blocks"] for row in hits] == _leading_hits(records)
