"""``kvtrace collect kv-events``: record the KV-cache events serving engines publish.

vLLM (``--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq", ...}'``)
and SGLang publish every change of their block pool on a ZMQ PUB socket as multipart
messages ``(topic, 8-byte big-endian sequence number, msgpack EventBatch)``, and answer
on a ROUTER socket a request for the batches from a sequence number on (each
``(seq, payload)``, then an end marker of sequence -1 and an empty payload).

One thread subscribes to every engine; `kvtrace.collectors._kv_event_stream` reads each
engine's messages (epochs across restarts, replay of missed numbers, ``gap``, ``error``
and ``restart`` rows, the size bounds), and collection goes on whatever one message
holds.  Rows are committed in batches (every few seconds, or sooner when many arrive):
memory stays flat under a burst (ZMQ's receive queue is bounded, and what it drops comes
back by replay or as a gap), and a crash loses at most one batch.  Ctrl-C, SIGTERM or
``--duration`` end the run after a last commit.  Before anything is written, the first
message of some engine must arrive within ``connect_timeout_s``, and some message must
be in the event format: otherwise one sentence says which.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from kvtrace.collectors._kv_event_stream import (
    CollectReport,
    EngineStream,
    EventSource,
    Pending,
    drain,
)
from kvtrace.collectors.kv_event_bounds import DEFAULT_BOUNDS, MessageBounds
from kvtrace.errors import InputError
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse.rows.bookkeeping import collection_run_id, run_row
from kvtrace.warehouse.schema.kv_events import KV_EVENTS

RECEIVE_QUEUE = 10_000  # messages ZMQ holds per engine while a batch is being committed
FLUSH_ROWS = 200_000  # commit as soon as this many event rows wait (reading stops there)
POLL_MS = 100


@dataclass(frozen=True)
class KvEventSpec:
    """What a KV-event collection is asked: its topic, its end, its run and its bounds."""

    topic: str = ""  # "": every topic
    duration_s: float | None = None  # None: until stopped
    connect_timeout_s: float = 10.0  # the first message of some engine must come by then
    run_name: str | None = None  # None: kv-events-<time>
    batch_s: float = 5.0  # how often rows are committed
    bounds: MessageBounds = DEFAULT_BOUNDS


def collect_kv_events(
    warehouse: Warehouse,
    sources: list[EventSource],
    spec: KvEventSpec = KvEventSpec(),
    *,
    stop: threading.Event | None = None,
    on_batch: Callable[[CollectReport], None] | None = None,
) -> CollectReport:
    """Subscribe to ``sources`` until ``spec.duration_s`` passes, ``stop`` is set or Ctrl-C."""
    topic, duration_s, batch_s = spec.topic, spec.duration_s, spec.batch_s
    connect_timeout_s = spec.connect_timeout_s
    try:
        import zmq
    except ImportError:
        raise InputError(
            "collecting KV events needs pyzmq: pip install 'kvtrace[kv-events]'"
        ) from None

    if not sources:
        raise InputError("give at least one --endpoint")
    started_at = datetime.now(timezone.utc)
    name = spec.run_name or f"kv-events-{started_at:%Y%m%dT%H%M%SZ}"
    report = CollectReport(collection_run_id(name))
    stop = stop or threading.Event()
    context = zmq.Context()
    streams = [_open_stream(context, source, topic, spec.bounds) for source in sources]
    poller = zmq.Poller()
    for stream in streams:
        poller.register(stream.sub, zmq.POLLIN)
    pending = Pending()
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
                    drain(stream, pending, report, FLUSH_ROWS)
            started = report.commits or report.events or now - origin >= connect_timeout_s
            if not report.commits:
                _check_started(streams, report, now - origin, connect_timeout_s)
            if started and (time.monotonic() >= next_flush or pending.rows >= FLUSH_ROWS):
                writer.flush(pending)
                next_flush = time.monotonic() + batch_s
                if on_batch:
                    on_batch(report)
        for stream in streams:  # what arrived before the stop is kept
            while drain(stream, pending, report, FLUSH_ROWS):
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


def _open_stream(
    context: Any, source: EventSource, topic: str, bounds: MessageBounds
) -> EngineStream:
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
    return EngineStream(source, sub, replay, bounds)


def _check_started(
    streams: list[EngineStream], report: CollectReport, waited_s: float, timeout_s: float
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
        self.written_blocks: set[str] = set()  # the block hashes the run's commits hold
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

    def flush(self, pending: Pending) -> None:
        """Commit what ``pending`` holds (the run's row with the first commit)."""
        run_id = self.report.run_id
        with self.warehouse.transaction(run_id, operation="collect") as commit:
            if pending.events:
                events = _with_run_id(pa.concat_tables(pending.events), run_id)
                order = [(c, "ascending") for c in KV_EVENTS.sort_by]
                self.warehouse.write(commit, "kv_events", events.sort_by(order))
            blocks = self._new_blocks(pending)
            if blocks is not None:
                self.warehouse.write(commit, "kv_event_blocks", _with_run_id(blocks, run_id))
            if self.report.commits == 0:
                self.warehouse.write_rows(commit, "runs", [self.run_row])
        if blocks is not None:
            self.written_blocks.update(blocks["block_hash"].to_pylist())
        pending.events, pending.blocks, pending.rows = [], [], 0
        self.report.commits += 1

    def _new_blocks(self, pending: Pending) -> pa.Table | None:
        """The first row of each block hash no commit of the run has written yet."""
        if not pending.blocks:
            return None
        blocks = pa.concat_tables(pending.blocks)
        new: set[str] = set()
        keep = []
        for index, key in enumerate(blocks["block_hash"].to_pylist()):
            if key not in self.written_blocks and key not in new:
                new.add(key)
                keep.append(index)
        return blocks.take(keep) if keep else None


def _with_run_id(table: pa.Table, run_id: str) -> pa.Table:
    index = table.schema.get_field_index("run_id")
    return table.set_column(index, "run_id", pa.repeat(pa.scalar(run_id), table.num_rows))
