"""Recorded KV-event files (JSONL, msgpack captures): an engine restarted within one file
starts a new epoch as it does for the collector, and a value beyond its column is a
quarantined line, never a failed ingest."""

from __future__ import annotations

import json

import msgpack
import msgspec

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.collectors.kv_collection import stored_event
from tests.collectors.kv_publisher import ArrayBatch

EVENTS_OF = "SELECT epoch, seq, block_hash FROM kv_events WHERE kind = 'stored' ORDER BY ALL"
REASONS = "SELECT line_no, reason FROM quarantine ORDER BY line_no"


def _line(seq: int, block: str) -> dict:
    event = ["BlockStored", [block], None, [1, 2], 2, None, "GPU"]
    return {"seq": seq, "ts": float(seq), "events": [event]}


def test_a_recorded_file_of_a_restarted_engine_keeps_both_epochs(warehouse, tmp_path):
    lines = [_line(0, "a"), _line(1, "b"), _line(2, "c"), _line(0, "d"), _line(1, "e")]
    lines.insert(3, lines[2])  # a line repeated: the same batch again, no restart
    path = tmp_path / "gpu0.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = ingest(warehouse, [str(path)])
    assert report.files[0].rejected == 0
    con = connect(warehouse)
    assert con.sql(EVENTS_OF).fetchall() == [
        (0, 0, "a"),
        (0, 1, "b"),
        (0, 2, "c"),
        (1, 0, "d"),
        (1, 1, "e"),
    ]
    assert con.sql("SELECT epoch, seq FROM kv_events WHERE kind = 'restart'").fetchall() == [(1, 0)]
    ingest(warehouse, [str(path)])  # the same file again adds nothing
    assert con.sql("SELECT count(*) FROM kv_events").fetchall() == [(6,)]


def test_a_recorded_epoch_is_kept_as_written(warehouse, tmp_path):
    lines = [{**_line(0, "a"), "epoch": 0}, {**_line(0, "b"), "epoch": 3}]
    path = tmp_path / "gpu0.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    ingest(warehouse, [str(path)])
    assert connect(warehouse).sql(EVENTS_OF).fetchall() == [(0, 0, "a"), (3, 0, "b")]


def test_a_capture_of_a_restarted_engine_keeps_both_epochs(warehouse, tmp_path):
    import msgpack

    def payload(block: int) -> bytes:
        return msgspec.msgpack.encode(ArrayBatch(1.0, [stored_event([block], None, 0)]))

    path = tmp_path / "gpu0.msgpack"
    path.write_bytes(
        b"".join(msgpack.packb([seq, payload(block)]) for seq, block in [(0, 1), (1, 2), (0, 3)])
    )
    ingest(warehouse, [str(path)])
    assert connect(warehouse).sql(EVENTS_OF).fetchall() == [(0, 0, "1"), (0, 1, "2"), (1, 0, "3")]


def _write_lines(tmp_path, lines: list) -> str:
    path = tmp_path / "gpu0.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def test_values_beyond_their_columns_are_quarantined_lines(warehouse, tmp_path):
    lora = ["BlockStored", ["b"], None, [1, 2], 2, 2**63, "GPU"]
    path = _write_lines(
        tmp_path,
        [
            _line(0, "a"),
            {"seq": 1, "ts": 1.0, "events": [lora]},
            {"seq": 2, "ts": 10**400, "events": []},
            {"seq": 2**63, "ts": 1.0, "events": []},
            {**_line(3, "c"), "epoch": 2**31},
            _line(4, "d"),
        ],
    )
    report = ingest(warehouse, [path])
    assert (report.files[0].rows, report.files[0].rejected) == (2, 4)
    con = connect(warehouse)
    assert con.sql(EVENTS_OF).fetchall() == [(0, 0, "a"), (0, 4, "d")]
    reasons = [reason for _, reason in con.sql(REASONS).fetchall()]
    assert (
        reasons[0] == "not a KV-event batch: event 0: lora_id 9223372036854775808 is beyond int64"
    )
    assert reasons[1].startswith("not a KV-event batch: the batch's ts is beyond a float: 1000")
    assert reasons[2] == "not a KV-event batch: seq is out of range: 9223372036854775808"
    assert reasons[3] == "not a KV-event batch: epoch is out of range: 2147483648"


def test_a_capture_s_sequence_numbers_beyond_int64_are_quarantined(warehouse, tmp_path):
    def payload(block: int) -> bytes:
        return msgspec.msgpack.encode(ArrayBatch(1.0, [stored_event([block], None, 0)]))

    path = tmp_path / "gpu0.msgpack"
    path.write_bytes(
        msgpack.packb([0, payload(1)])
        + msgpack.packb([2**64 - 1, payload(2)])
        + msgpack.packb([-1, payload(3)])
        + msgpack.packb([1, b"\x91" * 100_000 + b"\x00"])  # nested 100,000 deep
        + msgpack.packb([2, payload(4)])
    )
    report = ingest(warehouse, [str(path)])
    assert (report.files[0].rows, report.files[0].rejected) == (2, 3)
    con = connect(warehouse)
    assert con.sql(EVENTS_OF).fetchall() == [(0, 0, "1"), (0, 2, "4")]
    reasons = [reason for _, reason in con.sql(REASONS).fetchall()]
    assert reasons[:2] == [
        "not a KV-event batch: sequence number 18446744073709551615 is beyond int64",
        "not a KV-event batch: sequence number -1 is negative",
    ]
    assert reasons[2].startswith("not a KV-event batch: nested too deeply to read")
