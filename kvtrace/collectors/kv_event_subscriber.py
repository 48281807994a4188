"""``kvtrace collect kv-events``: record the KV-cache events serving engines publish.

vLLM (``--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq", ...}'``)
and SGLang publish every change of their block pool on a ZMQ PUB socket as multipart
messages ``(topic, 8-byte big-endian sequence number, msgpack EventBatch)``, and answer
on a ROUTER socket a request for the batches from a sequence number on (each
``(seq, payload)``, then an end marker of sequence -1 and an empty payload).

One thread subscribes to every engine.  A jump in an engine's sequence numbers is filled
from its replay socket when it answers within a second, else recorded as a ``gap`` row;
a message that cannot be read is an ``error`` row, and collection goes on.  Rows are
committed in batches (every few seconds, or sooner when many arrive): memory stays flat
under a burst (ZMQ's receive queue is bounded, and what it drops comes back by replay or
as a gap), and a crash loses at most one batch.  Ctrl-C, SIGTERM or ``--duration`` end
the run after a last commit.  Before anything is written, the first message of some
engine must arrive within ``connect_timeout_s``, and some message must be in the event
format: otherwise one sentence says which.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from kvtrace.collectors.endpoints import labelled
from kvtrace.errors import InputError
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse.bookkeeping import collection_run_id, run_row
from kvtrace.warehouse.kv_event_rows import BatchRows, MalformedBatch, batch_rows
from kvtrace.warehouse.schema.kv_events import KV_EVENT_BLOCKS, KV_EVENTS

END_OF_REPLAY = -1
RECEIVE_QUEUE = 10_000  # messages ZMQ holds per engine while a batch is being committed
FLUSH_ROWS = 200_000  # commit as soon as this many event rows wait (reading stops there)
REPLAY_TIMEOUT_S = 1.0
POLL_MS = 100
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
    run_id: str
    messages: int = 0
    events: int = 0
    replayed: int = 0
    gaps: int = 0
    errors: int = 0
    commits: int = 0


@dataclass
class _Stream:
    """One engine's sockets and where its sequence numbers stand."""

    source: EventSource
    sub: Any
    replay: Any = None
    last_seq: int | None = None
    heard: bool = False


@dataclass
class _Pending:
    rows: BatchRows = field(default_factory=BatchRows)
    written_blocks: set[str] = field(default_factory=set)


def collect_kv_events(
    warehouse: Warehouse,
    sources: list[EventSource],
    *,
    topic: str = "",
    duration_s: float | None = None,
    connect_timeout_s: float = 10.0,
    run_name: str | None = None,
    batch_s: float = 5.0,
    stop: threading.Event | None = None,
    on_batch: Callable[[CollectReport], None] | None = None,
) -> CollectReport:
    """Subscribe to ``sources`` until ``duration_s`` passes, ``stop`` is set or Ctrl-C."""
    try:
        import zmq
    except ImportError:
        raise InputError(
            "collecting KV events needs pyzmq: pip install 'kvtrace[kv-events]'"
        ) from None

    if not sources:
        raise InputError("give at least one --endpoint")
    started_at = datetime.now(timezone.utc)
    name = run_name or f"kv-events-{started_at:%Y%m%dT%H%M%SZ}"
    report = CollectReport(collection_run_id(name))
    stop = stop or threading.Event()
    context = zmq.Context()
    streams = [_open_stream(context, source, topic) for source in sources]
    poller = zmq.Poller()
    for stream in streams:
        poller.register(stream.sub, zmq.POLLIN)
    pending = _Pending()
    writer = _Writer(warehouse, report, name, started_at, sources, topic)
    origin = time.monotonic()
    deadline = origin + duration_s if duration_s is not None else None
    next_flush = origin + batch_s
    refused = False
    try:
        while not stop.is_set():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            ready = dict(poller.poll(POLL_MS))
            for stream in streams:
                if stream.sub in ready:
                    _drain(stream, pending.rows, report)
            started = report.commits or report.events or now - origin >= connect_timeout_s
            if not report.commits:
                _check_started(streams, report, now - origin, connect_timeout_s)
            if started and (
                time.monotonic() >= next_flush or len(pending.rows.events) >= FLUSH_ROWS
            ):
                writer.flush(pending)
                next_flush = time.monotonic() + batch_s
                if on_batch:
                    on_batch(report)
        for stream in streams:  # what arrived before the stop is kept
            while _drain(stream, pending.rows, report):
                writer.flush(pending)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how an open-ended collection ends: write what was received
    except InputError:
        refused = True  # nothing (readable) came: nothing is written
        raise
    finally:
        try:
            if report.messages and not refused:
                writer.flush(pending)
        finally:
            for stream in streams:
                stream.sub.close(linger=0)
                if stream.replay is not None:
                    stream.replay.close(linger=0)
            context.term()
    if not report.messages:
        raise InputError(_silence(sources, connect_timeout_s))
    return report


def _open_stream(context: Any, source: EventSource, topic: str) -> _Stream:
    import zmq

    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE)
    sub.setsockopt(zmq.SUBSCRIBE, topic.encode())
    try:
        sub.connect(source.endpoint)
    except zmq.ZMQError as exc:
        sub.close(linger=0)
        raise InputError(f"cannot connect to {source.endpoint}: {exc}") from None
    replay = None
    if source.replay is not None:
        replay = context.socket(zmq.DEALER)
        replay.connect(source.replay)
    return _Stream(source, sub, replay)


def _drain(stream: _Stream, rows: BatchRows, report: CollectReport) -> bool:
    """Read the messages waiting on ``stream`` (without blocking) until none is left, or
    until `FLUSH_ROWS` rows wait to be committed; True in the second case."""
    import zmq

    while len(rows.events) < FLUSH_ROWS:
        try:
            frames = stream.sub.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return False
        report.messages += 1
        stream.heard = True
        if len(frames) != 3 or len(frames[1]) != 8:
            _error(
                stream,
                rows,
                report,
                None,
                f"a message of {len(frames)} frames, not (topic, 8-byte sequence number, payload)",
            )
            continue
        seq = int.from_bytes(frames[1], "big")
        if stream.last_seq is not None and seq <= stream.last_seq and seq != 0:
            continue  # delivered twice (after a replay)
        if stream.last_seq is not None and seq > stream.last_seq + 1:
            _fill_gap(stream, seq, rows, report)
        _take(stream, seq, frames[2], rows, report)
    return True


def _take(
    stream: _Stream, seq: int, payload: bytes, rows: BatchRows, report: CollectReport
) -> None:
    import msgspec

    try:
        decoded = msgspec.msgpack.decode(payload)
        found = batch_rows(decoded, seq, stream.source.worker)
    except (msgspec.DecodeError, MalformedBatch) as exc:
        _error(stream, rows, report, seq, f"not a KV-event batch: {exc}"[:300])
        stream.last_seq = seq
        return
    rows.extend(found)
    report.events += len(found.events)
    stream.last_seq = seq


def _fill_gap(stream: _Stream, seq: int, rows: BatchRows, report: CollectReport) -> None:
    """Ask the replay socket for the batches after ``last_seq`` and before ``seq``; what
    does not come back within `REPLAY_TIMEOUT_S` becomes a gap row."""

    first_missing = (stream.last_seq or 0) + 1
    if stream.replay is not None:
        while stream.replay.poll(0):  # what a replay given up on sent late
            stream.replay.recv_multipart()
        stream.replay.send_multipart([b"", first_missing.to_bytes(8, "big")])
        give_up = time.monotonic() + REPLAY_TIMEOUT_S
        while time.monotonic() < give_up and stream.replay.poll(POLL_MS):
            frames = stream.replay.recv_multipart()
            if len(frames) != 3:
                continue
            replayed = int.from_bytes(frames[1], "big", signed=True)
            if replayed == END_OF_REPLAY:
                break
            if (stream.last_seq or -1) < replayed < seq:
                _take(stream, replayed, frames[2], rows, report)
                report.replayed += 1
            if replayed >= seq - 1:
                break
    missing_from = (stream.last_seq if stream.last_seq is not None else -1) + 1
    if missing_from < seq:
        report.gaps += 1
        rows.events.append(
            {
                "worker": stream.source.worker,
                "seq": missing_from,
                "kind": "gap",
                "detail": f"sequence numbers {missing_from} to {seq - 1} missed"
                + ("" if stream.replay is not None else " (no --replay endpoint)"),
            }
        )
    stream.last_seq = seq - 1


def _error(
    stream: _Stream, rows: BatchRows, report: CollectReport, seq: int | None, detail: str
) -> None:
    report.errors += 1
    rows.events.append(
        {"worker": stream.source.worker, "seq": seq, "kind": "error", "detail": detail}
    )


def _check_started(
    streams: list[_Stream], report: CollectReport, waited_s: float, timeout_s: float
) -> None:
    """Before the first commit: one sentence when nothing, or nothing readable, came."""
    if waited_s < timeout_s:
        return
    if report.messages and report.messages == report.errors:
        raise InputError(
            f"{report.messages} message(s) arrived in {timeout_s:g} s and none was a "
            "KV-event batch in vLLM's format (topic, sequence number, msgpack EventBatch): "
            "is the endpoint a KV-event publisher?"
        )
    if not report.messages:
        raise InputError(_silence([s.source for s in streams], timeout_s))


def _silence(sources: list[EventSource], timeout_s: float) -> str:
    listed = ", ".join(s.endpoint for s in sources)
    return (
        f"no KV events from {listed} within {timeout_s:g} s: is the engine running with "
        '--kv-events-config \'{"enable_kv_cache_events": true, "publisher": "zmq", ...}\' '
        "and the endpoint right?"
    )


class _Writer:
    """Commits what arrived; the first commit also records the run."""

    def __init__(
        self,
        warehouse: Warehouse,
        report: CollectReport,
        run_name: str,
        started_at: datetime,
        sources: list[EventSource],
        topic: str,
    ) -> None:
        self.warehouse, self.report = warehouse, report
        self.run_row = run_row(
            report.run_id,
            run_name,
            "kv_events",
            source="collect",
            collector_config={
                "collector": "kv-events",
                "endpoints": {s.worker: s.endpoint for s in sources},
                "replay": {s.worker: s.replay for s in sources if s.replay},
                "topic": topic,
            },
            started_at=started_at,
        )

    def flush(self, pending: _Pending) -> None:
        events, blocks = pending.rows.events, pending.rows.blocks
        new_blocks: dict[str, dict[str, Any]] = {}
        for block in blocks:
            key = block["block_hash"]
            if key not in pending.written_blocks and key not in new_blocks:
                new_blocks[key] = block
        with self.warehouse.transaction(self.report.run_id, operation="collect") as commit:
            if events:
                table = pa.Table.from_pylist(
                    [{**row, "run_id": self.report.run_id} for row in events],
                    schema=KV_EVENTS.schema,
                )
                order = [(c, "ascending") for c in KV_EVENTS.sort_by]
                self.warehouse.write(commit, "kv_events", table.sort_by(order))
            if new_blocks:
                table = pa.Table.from_pylist(
                    [{**row, "run_id": self.report.run_id} for row in new_blocks.values()],
                    schema=KV_EVENT_BLOCKS.schema,
                )
                self.warehouse.write(commit, "kv_event_blocks", table)
            if self.report.commits == 0:
                self.warehouse.write_rows(commit, "runs", [self.run_row])
        pending.written_blocks.update(new_blocks)
        pending.rows = BatchRows()
        self.report.commits += 1
