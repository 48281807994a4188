"""One engine's KV-event messages into rows: sequence numbers, epochs, replay and bounds.

Each message is ``(topic, 8-byte big-endian sequence number, msgpack EventBatch)``.  Its
rows are converted to Arrow as it is read, so whatever cannot be read or stored (a
value beyond its column, nesting too deep to decode, any failure of the decoder) is that
message's ``error`` row and never reaches a commit.  A message over its bounds
(`kvtrace.collectors.kv_event_bounds`) is an ``error`` row that names the bound, read no
further.

Sequence numbers place each batch in an epoch of its engine
(`kvtrace.warehouse.rows.kv_event_epochs`): a repeat is dropped, numbers going back start a
new epoch with a ``restart`` row, and numbers missed (after the last one, or from 0 in a
new epoch) are asked of the engine's replay socket, what it does not send within
`REPLAY_TIMEOUT_S` becoming a ``gap`` row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from kvtrace.collectors._endpoints import labelled
from kvtrace.collectors.kv_event_bounds import DEFAULT_BOUNDS, MessageBounds
from kvtrace.errors import InputError
from kvtrace.warehouse.rows.kv_event_epochs import Arrival, EngineEpochs, restart_row
from kvtrace.warehouse.rows.kv_events import (
    BatchRows,
    MalformedBatch,
    TooManyBlocks,
    batch_rows,
    check_seq,
)
from kvtrace.warehouse.schema.kv_events import KV_EVENT_BLOCKS, KV_EVENTS

END_OF_REPLAY = -1
REPLAY_TIMEOUT_S = 1.0
DETAIL_CHARS = 300
ZMQ_SCHEMES = ("tcp://", "ipc://", "inproc://")


@dataclass(frozen=True)
class EventSource:
    """An engine to subscribe to: its label, PUB endpoint and optional replay endpoint."""

    worker: str
    endpoint: str
    replay: str | None = None

    @classmethod
    def parse(cls, endpoint: str, replay: str | None) -> EventSource:
        """``NAME=tcp://HOST:PORT`` or a bare endpoint (named after its host and port)."""
        name, url = labelled(endpoint)
        if not url.startswith(ZMQ_SCHEMES):
            raise InputError(f"endpoint {endpoint!r} is not a ZMQ address (tcp://HOST:PORT)")
        if replay is not None and not replay.startswith(ZMQ_SCHEMES):
            raise InputError(f"replay endpoint {replay!r} is not a ZMQ address (tcp://HOST:PORT)")
        return cls(name, url, replay)


@dataclass
class CollectReport:
    """What a collection received and wrote, so far."""

    run_id: str
    messages: int = 0
    events: int = 0
    replayed: int = 0
    gaps: int = 0
    errors: int = 0
    restarts: int = 0
    commits: int = 0


@dataclass
class Pending:
    """The rows read since the last commit, as Arrow tables."""

    events: list[pa.Table] = field(default_factory=list)
    blocks: list[pa.Table] = field(default_factory=list)
    rows: int = 0

    def add(self, rows: BatchRows) -> None:
        """Convert ``rows`` and keep them; nothing is kept when they do not convert."""
        events = pa.Table.from_pylist(rows.events, schema=KV_EVENTS.schema)
        blocks = pa.Table.from_pylist(rows.blocks, schema=KV_EVENT_BLOCKS.schema)
        self.events.append(events)
        if blocks.num_rows:
            self.blocks.append(blocks)
        self.rows += events.num_rows


@dataclass
class EngineStream:
    """One engine's sockets, where its sequence numbers stand, and the bounds of what
    it may send."""

    source: EventSource
    sub: Any
    replay: Any = None
    bounds: MessageBounds = DEFAULT_BOUNDS
    epochs: EngineEpochs = field(default_factory=EngineEpochs)
    heard: bool = False


def drain(stream: EngineStream, pending: Pending, report: CollectReport, flush_rows: int) -> bool:
    """Read the messages waiting on ``stream`` (without blocking) until none is left, or
    until ``flush_rows`` rows wait to be committed; True in the second case."""
    import zmq

    while pending.rows < flush_rows:
        try:
            frames = stream.sub.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return False
        report.messages += 1
        stream.heard = True
        _receive(stream, frames, pending, report)
    return True


def _receive(
    stream: EngineStream, frames: list[bytes], pending: Pending, report: CollectReport
) -> None:
    """Place one live message in its epoch, fetch what it shows was missed, and read it."""
    if len(frames) != 3 or len(frames[1]) != 8:
        detail = f"a message of {len(frames)} frames, not (topic, 8-byte sequence number, payload)"
        _error(stream, pending, report, None, detail)
        return
    seq, payload = int.from_bytes(frames[1], "big"), frames[2]
    try:
        check_seq(seq)
    except MalformedBatch as exc:
        _error(stream, pending, report, None, str(exc))
        return
    arrival = stream.epochs.arrive(seq, payload)
    if arrival.repeat:
        return  # delivered twice
    if arrival.went_back_from is not None:
        report.restarts += 1
        pending.add(BatchRows(events=[restart_row(stream.source.worker, arrival, seq)]))
    _fill_gap(stream, arrival, seq, pending, report)
    _take(stream, seq, payload, pending, report)


def _take(
    stream: EngineStream, seq: int, payload: bytes, pending: Pending, report: CollectReport
) -> None:
    """Read the batch ``seq`` of the current epoch into ``pending``, or an error row."""
    import msgspec

    stream.epochs.taken(seq, payload)
    epoch = stream.epochs.epoch
    if len(payload) > stream.bounds.bytes:
        detail = (
            f"a message of {len(payload):,} bytes, over the bound of {stream.bounds.bytes:,} "
            "(--max-message-mb)"
        )
        _error(stream, pending, report, seq, detail)
        return
    try:
        decoded = msgspec.msgpack.decode(payload)
        found = batch_rows(
            decoded, seq, stream.source.worker, epoch=epoch, max_blocks=stream.bounds.blocks
        )
        pending.add(found)
    except (msgspec.DecodeError, MalformedBatch) as exc:
        _error(stream, pending, report, seq, f"not a KV-event batch: {exc}")
        return
    except TooManyBlocks as exc:
        _error(stream, pending, report, seq, f"{exc} (--max-message-blocks)")
        return
    except RecursionError:
        _error(stream, pending, report, seq, "not a KV-event batch: nested too deeply to decode")
        return
    except Exception as exc:  # one message must not end the collection
        _error(
            stream, pending, report, seq, f"cannot read the message: {type(exc).__name__}: {exc}"
        )
        return
    report.events += len(found.events)


def _fill_gap(
    stream: EngineStream, arrival: Arrival, seq: int, pending: Pending, report: CollectReport
) -> None:
    """Ask the replay socket for the batches of this epoch missed before ``seq``; what
    does not come back within `REPLAY_TIMEOUT_S` becomes a gap row."""
    last = stream.epochs.last_seq
    if arrival.went_back_from is not None:
        missing = 0  # the new engine's first batches
    elif last is not None:
        missing = last + 1
    else:
        return  # the first message heard: what came before it is not ours
    if missing >= seq:
        return
    if stream.replay is not None:
        while stream.replay.poll(0):  # what a replay given up on sent late
            stream.replay.recv_multipart()
        stream.replay.send_multipart([b"", missing.to_bytes(8, "big")])
        give_up = time.monotonic() + REPLAY_TIMEOUT_S
        while missing < seq:
            wait_ms = int((give_up - time.monotonic()) * 1000)
            if wait_ms <= 0 or not stream.replay.poll(wait_ms):
                break
            frames = stream.replay.recv_multipart()
            if len(frames) != 3:
                continue
            replayed = int.from_bytes(frames[1], "big", signed=True)
            if replayed == END_OF_REPLAY:
                break
            if missing <= replayed < seq:
                if replayed > missing:
                    _gap(stream, pending, report, missing, replayed)
                _take(stream, replayed, frames[2], pending, report)
                report.replayed += 1
                missing = replayed + 1
    if missing < seq:
        _gap(stream, pending, report, missing, seq)


def _gap(
    stream: EngineStream, pending: Pending, report: CollectReport, first: int, end: int
) -> None:
    """A gap row: the sequence numbers from ``first`` to before ``end`` were missed."""
    report.gaps += 1
    detail = f"sequence numbers {first} to {end - 1} missed" + (
        "" if stream.replay is not None else " (no --replay endpoint)"
    )
    row = {
        "worker": stream.source.worker,
        "epoch": stream.epochs.epoch,
        "seq": first,
        "kind": "gap",
        "detail": detail,
    }
    pending.add(BatchRows(events=[row]))


def _error(
    stream: EngineStream, pending: Pending, report: CollectReport, seq: int | None, detail: str
) -> None:
    report.errors += 1
    row = {
        "worker": stream.source.worker,
        "epoch": stream.epochs.epoch,
        "seq": seq,
        "kind": "error",
        "detail": detail[:DETAIL_CHARS],
    }
    pending.add(BatchRows(events=[row]))
