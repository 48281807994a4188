"""An engine restarted while its KV events are collected: its sequence numbers begin at
0 again, which starts a new epoch; nothing of one epoch is folded onto another, and a
batch delivered twice is still kept once."""

from __future__ import annotations

import pytest

from kvtrace import connect
from kvtrace.collectors import _kv_event_stream as kv_event_stream
from kvtrace.warehouse.rows import kv_event_epochs
from kvtrace.warehouse.rows.kv_event_epochs import Arrival, EngineEpochs
from tests.collectors.kv_collection import HANG_GUARD_S, Collection, stored_event
from tests.collectors.kv_publisher import ArrayBatch, Publisher

BATCHES = 100  # of the first engine
EVENTS_OF = "SELECT epoch, seq, block_hash FROM kv_events WHERE kind = 'stored' ORDER BY ALL"


@pytest.fixture
def publisher():
    publisher = Publisher()
    yield publisher
    publisher.close()


def _publish(publisher: Publisher, count: int, first_hash: int, *, dropped=()) -> None:
    """``count`` batches of one stored block each, hashes from ``first_hash`` on; those of
    the sequence numbers in ``dropped`` go to the replay buffer only."""
    for seq in range(count):
        batch = ArrayBatch(float(first_hash + seq), [stored_event([first_hash + seq], None, 0)])
        publisher.publish(batch, drop=seq in dropped)


def _restart_after_first_engine(
    collection: Collection, publisher: Publisher, *, replay: bool = True
) -> None:
    """The first engine's batches all committed, then the engine restarted and the
    collector connected to it again."""
    _publish(publisher, BATCHES, 0)
    collection.wait_until_committed(lambda report: report.events >= BATCHES)
    publisher.restart()
    publisher.wait_for_subscriber()
    if replay:
        publisher.wait_for_replay_client()


def _expected(epochs: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    """(epoch, seq, hash) of each epoch's batches, given as (batches, first hash)."""
    return sorted(
        (epoch, seq, str(first + seq))
        for epoch, (count, first) in enumerate(epochs)
        for seq in range(count)
    )


def test_a_restarted_engine_is_a_new_epoch_and_nothing_is_folded(warehouse, publisher):
    collection = Collection(warehouse, publisher)
    _restart_after_first_engine(collection, publisher)
    _publish(publisher, BATCHES, 1000)
    report = collection.finish()
    con = connect(warehouse)
    assert con.sql("SELECT count(*) FROM kv_events WHERE kind = 'stored'").fetchall() == [(200,)]
    assert con.sql(EVENTS_OF).fetchall() == _expected([(BATCHES, 0), (BATCHES, 1000)])
    assert con.sql(
        "SELECT epoch, seq, detail FROM kv_events WHERE kind = 'restart'"
    ).fetchall() == [(1, 0, "sequence numbers went back from 99 to 0: the engine restarted")]
    assert (report.events, report.restarts, report.gaps) == (200, 1, 0)


def test_a_restarted_engine_whose_first_batch_was_missed_is_replayed(
    warehouse, publisher, monkeypatch
):
    monkeypatch.setattr(kv_event_stream, "REPLAY_TIMEOUT_S", HANG_GUARD_S)
    collection = Collection(warehouse, publisher)
    _restart_after_first_engine(collection, publisher)
    _publish(publisher, 2 * BATCHES, 1000, dropped={0})  # sent before the collector was back
    report = collection.finish()
    con = connect(warehouse)
    assert con.sql("SELECT count(*) FROM kv_events WHERE kind = 'stored'").fetchall() == [(300,)]
    assert con.sql(EVENTS_OF).fetchall() == _expected([(BATCHES, 0), (2 * BATCHES, 1000)])
    assert con.sql("SELECT epoch, seq FROM kv_events WHERE kind = 'restart'").fetchall() == [(1, 1)]
    assert (report.replayed, report.gaps, report.restarts) == (1, 0, 1)


def test_without_replay_a_restarted_engine_s_missed_batches_are_a_gap_row(warehouse, publisher):
    collection = Collection(warehouse, publisher, replay=False)
    _restart_after_first_engine(collection, publisher, replay=False)
    _publish(publisher, 2 * BATCHES, 1000, dropped={0, 1, 2})
    collection.finish()
    con = connect(warehouse)
    assert con.sql("SELECT epoch, seq, detail FROM kv_events WHERE kind = 'gap'").fetchall() == [
        (1, 0, "sequence numbers 0 to 2 missed (no --replay endpoint)")
    ]
    assert con.sql("SELECT count(*) FROM kv_events WHERE kind = 'stored'").fetchall() == [(297,)]


def test_a_batch_delivered_twice_is_kept_once_and_is_no_restart(warehouse, publisher):
    collection = Collection(warehouse, publisher)
    _publish(publisher, 5, 0)
    publisher.resend(4)
    publisher.resend(0)
    publisher.publish(ArrayBatch(5.0, [stored_event([5], None, 0)]))
    report = collection.finish()
    assert (report.messages, report.events, report.restarts, report.replayed) == (8, 6, 0, 0)
    con = connect(warehouse)
    assert con.sql(EVENTS_OF).fetchall() == _expected([(6, 0)])
    assert con.sql("SELECT count(*) FROM kv_events WHERE kind <> 'stored'").fetchall() == [(0,)]


def test_the_rule_a_repeat_is_the_same_bytes_under_the_same_number(monkeypatch):
    monkeypatch.setattr(kv_event_epochs, "REPEAT_WINDOW", 3)
    epochs = EngineEpochs()
    for seq in range(5):
        assert epochs.arrive(seq, b"batch %d" % seq) == Arrival(0)
        epochs.taken(seq, b"batch %d" % seq)
    assert epochs.arrive(4, b"batch 4") == Arrival(0, repeat=True)
    assert epochs.arrive(2, b"batch 2") == Arrival(0, repeat=True)
    # older than the window: no longer known, so the numbers went back
    assert epochs.arrive(1, b"batch 1") == Arrival(1, went_back_from=4)
    epochs.taken(1, b"batch 1 of the new engine")
    assert epochs.arrive(1, b"batch 1") == Arrival(2, went_back_from=1)
