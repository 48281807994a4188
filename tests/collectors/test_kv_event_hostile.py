"""Messages the wire format allows but no engine sends well: values beyond their columns,
nesting too deep to decode, a message too large to hold.  Each is an ``error`` row that
says what was wrong, collection goes on, and every good row is committed."""

from __future__ import annotations

import os
import signal

import msgspec
import pytest

from kvtrace import connect
from kvtrace.collectors import _kv_event_stream as kv_event_stream
from kvtrace.collectors.kv_event_bounds import MessageBounds
from tests.collectors.kv_collection import (
    HANG_GUARD_S,
    Collection,
    collector_process,
    stored_event,
    wait_for_rows,
)
from tests.collectors.kv_publisher import ArrayBatch, Publisher
from tests.conftest import warehouse_at

GOOD = "SELECT seq, block_hash FROM kv_events WHERE kind = 'stored' ORDER BY ALL"
ERRORS = "SELECT seq, detail FROM kv_events WHERE kind = 'error' ORDER BY ALL"


@pytest.fixture
def publisher():
    publisher = Publisher()
    yield publisher
    publisher.close()


def _good(publisher: Publisher, block: int) -> int:
    return publisher.publish(ArrayBatch(float(block), [stored_event([block], None, 0)]))


def _between_good_batches(warehouse, publisher, send_bad, **options):
    """A good batch, what ``send_bad`` sends, a good batch; the collector's report and
    its error rows, after checking that both good batches were stored."""
    collection = Collection(warehouse, publisher, **options)
    first = _good(publisher, 1)
    send_bad()
    last = _good(publisher, 2)
    report = collection.finish()
    con = connect(warehouse)
    assert con.sql(GOOD).fetchall() == [(first, "1"), (last, "2")]
    return report, con.sql(ERRORS).fetchall()


def test_a_lora_id_beyond_int64_is_an_error_row(warehouse, publisher):
    batch = ArrayBatch(1.5, [stored_event([7], None, 0, lora_id=2**63)])
    report, errors = _between_good_batches(warehouse, publisher, lambda: publisher.publish(batch))
    assert errors == [
        (1, "not a KV-event batch: event 0: lora_id 9223372036854775808 is beyond int64")
    ]
    assert report.errors == 1


def test_a_sequence_number_beyond_int64_is_an_error_row(warehouse, publisher):
    payload = msgspec.msgpack.encode(ArrayBatch(1.5, [stored_event([7], None, 0)]))
    frames = [publisher.topic, b"\xff" * 8, payload]
    report, errors = _between_good_batches(
        warehouse, publisher, lambda: publisher.send_frames(frames)
    )
    assert errors == [(None, "sequence number 18446744073709551615 is beyond int64")]
    assert (report.errors, report.gaps, report.restarts) == (1, 0, 0)


def test_a_message_nested_too_deeply_is_an_error_row(warehouse, publisher):
    deep = b"\x91" * 100_000 + b"\x00"  # an array in an array ... 100,000 deep
    _, errors = _between_good_batches(warehouse, publisher, lambda: publisher.send_raw(deep))
    assert errors == [(1, "not a KV-event batch: nested too deeply to decode")]


def test_any_failure_to_read_one_message_is_an_error_row(warehouse, publisher, monkeypatch):
    read = kv_event_stream.batch_rows

    def fails_on_the_second(batch, seq, *args, **kwargs):
        if seq == 1:
            raise ZeroDivisionError("division by zero")
        return read(batch, seq, *args, **kwargs)

    monkeypatch.setattr(kv_event_stream, "batch_rows", fails_on_the_second)
    _, errors = _between_good_batches(warehouse, publisher, lambda: _good(publisher, 7))
    assert errors == [(1, "cannot read the message: ZeroDivisionError: division by zero")]


def test_a_message_of_too_many_blocks_is_an_error_row(warehouse, publisher):
    blocks = 200_001  # one over the bound (by default)
    batch = ArrayBatch(1.5, [["BlockRemoved", list(range(blocks)), "GPU"]])
    _, errors = _between_good_batches(
        warehouse, publisher, lambda: publisher.send_raw(msgspec.msgpack.encode(batch))
    )
    assert errors == [
        (1, "a message of 200,001 block events, over the bound of 200,000 (--max-message-blocks)")
    ]


def test_a_message_over_the_size_bound_is_an_error_row(warehouse, publisher):
    batch = ArrayBatch(1.5, [["BlockRemoved", list(range(10_000, 20_000)), "GPU"]])
    payload = msgspec.msgpack.encode(batch)
    _, errors = _between_good_batches(
        warehouse,
        publisher,
        lambda: publisher.send_raw(payload),
        bounds=MessageBounds(bytes=len(payload) - 1),
    )
    assert errors == [
        (
            1,
            f"a message of {len(payload):,} bytes, over the bound of {len(payload) - 1:,} "
            "(--max-message-mb)",
        )
    ]


def test_the_bounds_are_options(warehouse, publisher):
    batch = ArrayBatch(1.5, [["BlockRemoved", list(range(10_000, 20_000)), "GPU"]])
    payload = msgspec.msgpack.encode(batch)
    report, errors = _between_good_batches(
        warehouse,
        publisher,
        lambda: publisher.send_raw(payload),
        bounds=MessageBounds(bytes=len(payload), blocks=10_000),
    )
    assert errors == [] and report.events == 10_002


def test_the_command_line_takes_the_bounds(tmp_path, publisher):
    location = warehouse_at(tmp_path / "wh")
    process = collector_process(location, publisher, "--max-message-blocks", "2")
    publisher.wait_for_subscriber()
    _good(publisher, 1)
    publisher.publish(ArrayBatch(1.5, [stored_event([7, 8, 9], None, 0)]))
    wait_for_rows(location, process, "SELECT kind FROM kv_events", 2)
    os.kill(process.pid, signal.SIGTERM)
    out, err = process.communicate(timeout=HANG_GUARD_S)
    assert process.returncode == 0, err
    assert "1 block events (0 batches replayed, 0 gaps, 1 unreadable, 0 restarts)" in out
    assert connect(location).sql(ERRORS).fetchall() == [
        (1, "a message of 3 block events, over the bound of 2 (--max-message-blocks)")
    ]
