"""``kvtrace collect kv-events`` against a loopback publisher that encodes events as
vLLM's structs do, and the KV-event views on hand-made traces (their numbers worked out
by hand, as in the SQL header)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import msgspec
import pytest

from kvtrace import connect
from kvtrace.collectors import kv_event_subscriber
from kvtrace.collectors.kv_event_subscriber import EventSource, KvEventSpec, collect_kv_events
from kvtrace.errors import InputError
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from tests.collectors.kv_collection import Collection, stored_event
from tests.collectors.kv_publisher import (
    AllBlocksCleared,
    ArrayBatch,
    BlockRemoved,
    MapBatch,
    MapBlockRemoved,
    MapBlockStored,
    Publisher,
)
from tests.conftest import DATA, KVTRACE_PROCESS, warehouse_at


@pytest.fixture
def publisher():
    publisher = Publisher()
    yield publisher
    publisher.close()


def test_events_are_recorded_as_vllm_sends_them(warehouse, publisher):
    collection = Collection(warehouse, publisher)
    publisher.publish(ArrayBatch(100.0, [stored_event([11, 12], None, 0)], 0))
    publisher.publish(ArrayBatch(100.5, [stored_event([13], 11, 8), BlockRemoved([12], "GPU")], 0))
    publisher.publish(ArrayBatch(101.7, [AllBlocksCleared()]))
    report = collection.finish()
    assert (report.messages, report.events, report.gaps, report.errors) == (3, 5, 0, 0)
    con = connect(warehouse)
    rows = con.sql(
        "SELECT seq, position, block_idx, kind, block_hash, parent_hash, medium, dp_rank, ts "
        "FROM kv_events ORDER BY seq, position, block_idx"
    ).fetchall()
    assert rows == [
        (0, 0, 0, "stored", "11", None, "GPU", 0, 100.0),
        (0, 0, 1, "stored", "12", "11", "GPU", 0, 100.0),
        (1, 0, 0, "stored", "13", "11", "GPU", 0, 100.5),
        (1, 1, 0, "removed", "12", None, "GPU", 0, 100.5),
        (2, 0, 0, "cleared", None, None, None, None, 101.7),
    ]
    blocks = con.sql("SELECT block_hash, token_ids FROM kv_event_blocks ORDER BY 1").fetchall()
    assert blocks == [("11", [0, 1, 2, 3]), ("12", [4, 5, 6, 7]), ("13", [8, 9, 10, 11])]
    assert con.sql("SELECT kind, source FROM runs").fetchall() == [("kv_events", "collect")]


def test_map_encoded_events_with_byte_hashes_read_the_same(warehouse, publisher):
    collection = Collection(warehouse, publisher)
    a, b = bytes.fromhex("aa" * 32), bytes.fromhex("bb" * 32)
    stored = MapBlockStored([a, b], None, list(range(8)), 4, None, "GPU", None)
    publisher.publish(MapBatch(5.0, [stored, MapBlockRemoved([a], "GPU")], 1))
    collection.finish()
    rows = (
        connect(warehouse)
        .sql(
            "SELECT kind, block_hash, parent_hash, dp_rank FROM kv_events "
            "ORDER BY position, block_idx"
        )
        .fetchall()
    )
    assert rows == [
        ("stored", "aa" * 32, None, 1),
        ("stored", "bb" * 32, "aa" * 32, 1),
        ("removed", "aa" * 32, None, 1),
    ]


def test_dropped_sequence_numbers_are_replayed(warehouse, publisher):
    collection = Collection(warehouse, publisher)
    for seq in range(6):
        batch = ArrayBatch(float(seq), [stored_event([seq + 100], None, 0)])
        publisher.publish(batch, drop=seq in (2, 3))
    report = collection.finish()
    assert (report.replayed, report.gaps) == (2, 0)
    con = connect(warehouse)
    assert con.sql("SELECT list(seq ORDER BY seq) FROM kv_events").fetchall() == [
        ([0, 1, 2, 3, 4, 5],)
    ]


def test_a_gap_the_replay_cannot_fill_is_a_row(warehouse, publisher):
    publisher.replaying = False  # its replay socket never answers
    collection = Collection(warehouse, publisher)
    for seq in range(5):
        publisher.publish(ArrayBatch(float(seq), [stored_event([seq], None, 0)]), drop=seq == 2)
    report = collection.finish()
    assert report.gaps == 1
    con = connect(warehouse)
    assert con.sql("SELECT seq, detail FROM kv_events WHERE kind = 'gap'").fetchall() == [
        (2, "sequence numbers 2 to 2 missed")
    ]
    assert con.sql("SELECT count(*) FROM kv_events WHERE kind = 'stored'").fetchall() == [(4,)]


def test_a_malformed_message_is_an_error_row_and_collection_goes_on(warehouse, publisher):
    collection = Collection(warehouse, publisher)
    publisher.publish(ArrayBatch(1.0, [stored_event([1], None, 0)]))
    publisher.send_raw(b"\xc1 not msgpack")
    publisher.send_raw(msgspec.msgpack.encode([2.0, [["BlockEvicted", [5]]]]))
    publisher.send_frames([b"kv-events", b"short"])
    publisher.publish(ArrayBatch(3.0, [stored_event([2], 1, 4)]))
    report = collection.finish()
    assert report.errors == 3
    con = connect(warehouse)
    errors = [d for (d,) in con.sql("SELECT detail FROM kv_events WHERE kind = 'error'").fetchall()]
    assert len(errors) == 3
    assert any("unknown tag 'BlockEvicted'" in d for d in errors)
    assert con.sql("SELECT count(*) FROM kv_events WHERE kind = 'stored'").fetchall() == [(2,)]


def test_a_burst_of_100k_events_is_committed_in_bounded_batches(warehouse, publisher, monkeypatch):
    monkeypatch.setattr(kv_event_subscriber, "FLUSH_ROWS", 10_000)
    drain, behind = kv_event_subscriber.drain, []

    def drain_after_a_stall(*args):  # the collector falls behind while the burst arrives
        if not behind:
            behind.append(True)
            time.sleep(2)
        return drain(*args)

    monkeypatch.setattr(kv_event_subscriber, "drain", drain_after_a_stall)
    collection = Collection(warehouse, publisher, replay=True)
    for batch in range(1000):
        hashes = list(range(batch * 100, batch * 100 + 100))
        publisher.publish(ArrayBatch(float(batch), [stored_event(hashes, None, 0, size=1)]))
    time.sleep(2)
    report = collection.finish()
    stored = (
        connect(warehouse)
        .sql("SELECT count(*) FROM kv_events WHERE kind = 'stored'")
        .fetchall()[0][0]
    )
    # every event arrives, directly or by replay, and no more than a commit's worth (plus
    # the one batch that crossed the line) ever waits in memory, however far behind the
    # collector fell
    assert stored == report.events == 100_000 and report.gaps == 0
    assert report.commits >= 10
    files = warehouse.snapshot().files.to_pylist()
    assert max(f["rows"] for f in files if f["table"] == "kv_events") <= 10_000 + 100


def test_a_silent_endpoint_is_one_sentence_after_the_wait(warehouse):
    source = EventSource("gpu0", "tcp://127.0.0.1:9")
    started = time.monotonic()
    with pytest.raises(InputError, match=r"no KV events from tcp://127\.0\.0\.1:9 within 1 s"):
        collect_kv_events(warehouse, [source], KvEventSpec(connect_timeout_s=1.0))
    assert time.monotonic() - started < 120  # a hang guard: the wait is 1 s, not forever
    assert connect(warehouse).sql("SELECT count(*) FROM runs").fetchall() == [(0,)]


def test_a_publisher_of_another_format_is_one_sentence(warehouse, publisher):
    result: dict = {}

    def run() -> None:
        source = EventSource("gpu0", publisher.endpoint)
        try:
            collect_kv_events(
                warehouse, [source], KvEventSpec(topic="kv-events", connect_timeout_s=1.5)
            )
        except InputError as exc:
            result["error"] = str(exc)

    thread = threading.Thread(target=run)
    thread.start()
    publisher.wait_for_subscriber()
    for _ in range(5):
        publisher.send_raw(json.dumps({"hello": "world"}).encode())
    thread.join(30)
    assert "none was a KV-event batch in vLLM's format" in result["error"]
    assert connect(warehouse).sql("SELECT count(*) FROM kv_events").fetchall() == [(0,)]


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_sigterm_or_ctrl_c_writes_what_came_and_closes_the_run(tmp_path, publisher, how):
    location = warehouse_at(tmp_path / "wh")
    process = subprocess.Popen(
        [
            *KVTRACE_PROCESS,
            "-w",
            location,
            "collect",
            "kv-events",
            "--endpoint",
            f"gpu0={publisher.endpoint}",
            "--replay",
            publisher.replay_endpoint,
            "--topic",
            "kv-events",
            "--run-name",
            "stopped",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    publisher.wait_for_subscriber()
    for seq in range(20):
        publisher.publish(ArrayBatch(float(seq), [stored_event([seq], None, 0)]))
    time.sleep(1.0)
    os.kill(process.pid, getattr(signal, how))
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "20 batches, 20 block events" in out
    con = connect(location)
    assert con.sql("SELECT count(*) FROM kv_events").fetchall() == [(20,)]
    assert con.sql("SELECT run_name FROM runs").fetchall() == [("stopped",)]


def test_a_wrong_endpoint_exits_non_zero_with_one_sentence(tmp_path):
    location = warehouse_at(tmp_path / "wh")
    done = subprocess.run(
        [
            *KVTRACE_PROCESS,
            "-w",
            location,
            "collect",
            "kv-events",
            "--endpoint",
            "http://127.0.0.1:5557",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "is not a ZMQ address" in done.stderr and "Traceback" not in done.stderr


# -- the views, on traces written by hand --------------------------------------------------


def _ingest_lines(warehouse: Warehouse, tmp_path, lines: list[dict]) -> None:
    path = tmp_path / "gpu0.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    ingest(warehouse, [str(path)])


def _stored_map(hashes, parent, size=4):
    return {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": parent,
        "token_ids": list(range(size * len(hashes))),
        "block_size": size,
        "lora_id": None,
        "medium": "GPU",
    }


def test_pool_residency_is_the_worked_example(warehouse, tmp_path):
    _ingest_lines(
        warehouse,
        tmp_path,
        [
            {"seq": 0, "ts": 1000.0, "events": [_stored_map(["a", "b"], None)]},
            {"seq": 1, "ts": 1001.3, "events": [["BlockRemoved", ["a"], "GPU"]]},
            {"seq": 2, "ts": 1001.7, "events": [_stored_map(["a"], None)]},
        ],
    )
    rows = (
        connect(warehouse)
        .sql(
            "SELECT t_s, stored, removed, restores, resident_blocks, churn_per_s, mean_lifetime_s "
            "FROM kv_pool_residency(1.0)"
        )
        .fetchall()
    )
    assert rows == [
        (0.0, 2, 0, 0, 2, 0.0, None),
        (1.0, 1, 1, 1, 2, 1.0, pytest.approx(1.3)),
    ]


def test_a_cleared_pool_starts_again_from_empty(warehouse, tmp_path):
    _ingest_lines(
        warehouse,
        tmp_path,
        [
            {"seq": 0, "ts": 0.0, "events": [_stored_map(["a", "b", "c"], None)]},
            {"seq": 1, "ts": 0.5, "events": [["AllBlocksCleared"]]},
            {"seq": 2, "ts": 2.0, "events": [_stored_map(["a"], None)]},
        ],
    )
    rows = (
        connect(warehouse)
        .sql("SELECT t_s, resident_blocks, restores FROM kv_pool_residency(1.0)")
        .fetchall()
    )
    assert rows == [(0.0, 3, 0), (2.0, 1, 0)]  # a after a clear is not a re-store


def test_the_prefix_tree_and_the_workload_are_the_worked_example(warehouse, tmp_path):
    _ingest_lines(
        warehouse,
        tmp_path,
        [
            {"seq": 0, "ts": 10.0, "events": [_stored_map(["a", "b"], None)]},
            {"seq": 1, "ts": 10.25, "events": [_stored_map(["c"], "a")]},
        ],
    )
    con = connect(warehouse)
    tree = con.sql("SELECT block_hash, depth, children, stores FROM kv_prefix_tree").fetchall()
    assert tree == [("a", 1, 2, 1), ("b", 2, 0, 1), ("c", 2, 0, 1)]
    summary = con.sql(
        "SELECT blocks, prompts, leaves, shared_prefixes, max_depth FROM kv_prefix_tree_summary"
    ).fetchall()
    assert summary == [(3, 1, 2, 1, 2)]
    workload = con.sql(
        "SELECT request_idx, timestamp, input_length, hash_ids FROM kv_events_as_workload"
    ).fetchall()
    assert workload == [(0, 0, 8, [0, 1]), (1, 250, 8, [0, 2])]


def test_a_line_that_is_not_a_batch_is_quarantined(warehouse, tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(
        json.dumps({"seq": 0, "ts": 1.0, "events": [_stored_map(["a"], None)]})
        + "\n"
        + json.dumps({"seq": 1, "ts": 2.0, "events": [["BlockStored", ["b"], None, [1], 0]]})
        + "\n"
    )
    report = ingest(warehouse, [str(path)])
    assert (report.files[0].rows, report.files[0].rejected) == (1, 1)
    ((reason,),) = connect(warehouse).sql("SELECT reason FROM quarantine").fetchall()
    assert "block_size is not a positive integer" in reason


LRU_OF_TWO = [  # an engine whose pool is an LRU of two blocks
    {"seq": 0, "ts": 50.0, "events": [_stored_map(["a"], None)]},
    {"seq": 1, "ts": 50.1, "events": [_stored_map(["b"], None)]},
    {"seq": 2, "ts": 51.0, "events": [["BlockRemoved", ["a"], "GPU"], _stored_map(["c"], None)]},
    {"seq": 3, "ts": 51.1, "events": [["BlockRemoved", ["b"], "GPU"], _stored_map(["a"], None)]},
]
FIDELITY = (
    "SELECT t_s, capacity_blocks, observed_stored, simulated_stored, observed_removed, "
    "simulated_evicted, observed_restores, simulated_restores, observed_resident, "
    "simulated_resident FROM kv_cache_fidelity({}) ORDER BY t_s"
)


def test_the_whatif_matches_an_engine_whose_pool_is_the_simulated_one(warehouse, tmp_path):
    _ingest_lines(warehouse, tmp_path, LRU_OF_TWO)
    rows = connect(warehouse).sql(FIDELITY.format("")).fetchall()
    # requests [a], [b], [c], [a] through an LRU of 2 (the peak the engine held): the
    # second second misses c and a, evicts a then b, and a comes back
    assert rows == [(0.0, 2, 2, 2, 0, 0, 0, 0, 2, 2), (1.0, 2, 2, 2, 2, 2, 1, 1, 2, 2)]


def test_a_smaller_simulated_pool_parts_from_the_engine(warehouse, tmp_path):
    _ingest_lines(warehouse, tmp_path, LRU_OF_TWO)
    rows = connect(warehouse).sql(FIDELITY.format("capacity_blocks := 1")).fetchall()
    assert rows == [(0.0, 1, 2, 2, 0, 1, 0, 0, 2, 1), (1.0, 1, 2, 2, 2, 2, 1, 1, 2, 1)]


def test_the_sample_of_an_lru_engine_is_reproduced_minute_by_minute(warehouse):
    """tests/data/kv_events: the events an LRU pool of 600 blocks (an OrderedDict, written
    apart from kvtrace) published for 400 Mooncake requests."""
    ingest(warehouse, [str(DATA / "kv_events" / "mooncake_lru600_events.jsonl")])
    con = connect(warehouse)
    rows = con.sql(
        "SELECT capacity_blocks, observed_stored, simulated_stored, observed_removed, "
        "simulated_evicted, observed_restores, simulated_restores "
        "FROM kv_cache_fidelity(bucket_s := 60.0)"
    ).fetchall()
    assert len(rows) == 3
    for capacity, stored, sim_stored, removed, evicted, restores, sim_restores in rows:
        assert capacity == 600
        assert (sim_stored, evicted, sim_restores) == (stored, removed, restores)
    smaller = con.sql(
        "SELECT sum(simulated_evicted) - sum(observed_removed) "
        "FROM kv_cache_fidelity(capacity_blocks := 300, bucket_s := 60.0)"
    ).fetchall()[0][0]
    assert smaller > 0  # a pool half the size evicts more than the engine did


def test_a_raw_msgpack_capture_ingests_like_the_stream(warehouse, tmp_path):
    import msgpack

    payloads = [
        msgspec.msgpack.encode(ArrayBatch(1.0, [stored_event([1, 2], None, 0)], 0)),
        msgspec.msgpack.encode(ArrayBatch(2.0, [BlockRemoved([1], "GPU")], 0)),
    ]
    path = tmp_path / "gpu0.msgpack"
    path.write_bytes(
        msgpack.packb([7, payloads[0]])  # (seq, payload) as the wire carries them
        + payloads[1]  # a bare batch: its place in the file is its seq
        + msgpack.packb("not a batch")
    )
    report = ingest(warehouse, [str(path)])
    assert (report.files[0].fmt, report.files[0].rejected) == ("msgpack", 1)
    rows = (
        connect(warehouse)
        .sql(
            "SELECT worker, seq, kind, block_hash FROM kv_events ORDER BY seq, position, block_idx"
        )
        .fetchall()
    )
    assert rows == [
        ("gpu0", 1, "removed", "1"),
        ("gpu0", 7, "stored", "1"),
        ("gpu0", 7, "stored", "2"),
    ]
