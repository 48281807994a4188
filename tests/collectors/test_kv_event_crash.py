"""``kvtrace collect kv-events`` as a process of its own while the engine it records is
restarted: SIGTERM ends it with every event the two engines sent stored once, each in
its epoch; SIGKILL leaves a healthy warehouse whose events are those of its commits,
once each and in their epochs."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from kvtrace import connect
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse.ops.integrity import check
from tests.collectors.kv_collection import (
    HANG_GUARD_S,
    collector_process,
    stored_event,
    wait_for_rows,
)
from tests.collectors.kv_publisher import ArrayBatch, Publisher
from tests.conftest import warehouse_at

FIRST, SECOND = 100, 150  # batches of the engine before and after its restart
MISSED = 10  # the restarted engine's first batches, sent before the collector was back
STORED = "SELECT epoch, seq, block_hash FROM kv_events WHERE kind = 'stored'"


@pytest.fixture
def publisher():
    publisher = Publisher()
    yield publisher
    publisher.close()


def _stored(location: str) -> list[tuple[int, int, str]]:
    """The stored events the warehouse shows, in the order they were sent."""
    return sorted(connect(location).sql(STORED).fetchall())


def _wait_for_stored(location: str, process: subprocess.Popen, count: int) -> None:
    wait_for_rows(location, process, STORED, count)


def _publish(publisher: Publisher, epoch: int, seqs: range, *, dropped: int = 0) -> None:
    for seq in seqs:
        block = epoch * 1000 + seq
        batch = ArrayBatch(float(block), [stored_event([block], None, 0)])
        publisher.publish(batch, drop=seq < dropped)


def _expected(epoch: int, count: int) -> list[tuple[int, int, str]]:
    return [(epoch, seq, str(epoch * 1000 + seq)) for seq in range(count)]


def _through_a_restart(location: str, publisher: Publisher) -> subprocess.Popen:
    """A collector that has committed the first engine's batches and received the
    restarted engine's first ones."""
    process = collector_process(location, publisher)
    publisher.wait_for_subscriber()
    _publish(publisher, 0, range(FIRST))
    _wait_for_stored(location, process, FIRST)
    publisher.restart()
    publisher.wait_for_subscriber()
    publisher.wait_for_replay_client()
    _publish(publisher, 1, range(SECOND // 2), dropped=MISSED)
    _wait_for_stored(location, process, FIRST + 1)
    return process


def test_sigterm_after_an_engine_restart_keeps_every_event_once_in_its_epoch(tmp_path, publisher):
    location = warehouse_at(tmp_path / "wh")
    process = _through_a_restart(location, publisher)
    _publish(publisher, 1, range(SECOND // 2, SECOND))
    _wait_for_stored(location, process, FIRST + SECOND)
    os.kill(process.pid, signal.SIGTERM)
    out, err = process.communicate(timeout=HANG_GUARD_S)
    assert process.returncode == 0, err
    assert f"{FIRST + SECOND:,} block events ({MISSED} batches replayed, 0 gaps" in out
    assert _stored(location) == _expected(0, FIRST) + _expected(1, SECOND)
    con = connect(location)
    assert con.sql("SELECT epoch, seq FROM kv_events WHERE kind <> 'stored'").fetchall() == [
        (1, MISSED)
    ]  # the restart, seen where the first batch of the new engine came
    assert check(Warehouse(location)).healthy


def test_sigkill_after_an_engine_restart_leaves_each_committed_event_once(tmp_path, publisher):
    location = warehouse_at(tmp_path / "wh")
    process = _through_a_restart(location, publisher)
    _publish(publisher, 1, range(SECOND // 2, SECOND))  # some of them still in flight
    process.kill()
    process.communicate(timeout=HANG_GUARD_S)
    assert check(Warehouse(location)).healthy
    events = _stored(location)
    # what the commits hold: the first engine whole, then the restarted one's batches
    # in the order they came (its missed ones replayed first), none twice
    assert FIRST < len(events) <= FIRST + SECOND
    assert events == (_expected(0, FIRST) + _expected(1, SECOND))[: len(events)]
    restarts = connect(location).sql("SELECT epoch FROM kv_events WHERE kind = 'restart'")
    assert restarts.fetchall() == [(1,)]
