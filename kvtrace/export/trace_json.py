"""Chrome trace event JSON (what Perfetto's UI and chrome://tracing open), written as it
comes: events go out in batches, so a trace of millions of events is never held whole.

The file is one object: the header's keys, then ``traceEvents`` (the events in the order
written), then the trailer's keys.  Processes get ``pid`` 1, 2, ... in the order they are
first asked for, each announced by a ``process_name`` metadata event (``"ph": "M"``);
threads are named once each by ``thread_name``.  Times (``ts``, ``dur``) are
microseconds, as the format has them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, BinaryIO

import msgspec

Event = dict[str, Any]

_ENCODER = msgspec.json.Encoder()


class TraceWriter:
    """Write a Chrome trace to ``sink``: `process` and `thread` name the tracks, `write`
    adds events, `close` ends the object.  ``events`` counts what was written (metadata
    events too); ``progress`` hears that count after each write."""

    def __init__(
        self,
        sink: BinaryIO,
        header: dict[str, Any] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self._sink = sink
        self._progress = progress
        self._first = True
        self._pids: dict[Hashable, int] = {}
        self._threads: set[tuple[int, int | str]] = set()
        self.events = 0
        head = _ENCODER.encode(header or {})[1:-1]
        sink.write(b"{" + head + (b"," if head else b"") + b'"traceEvents":[\n')

    def process(self, key: Hashable, name: str) -> int:
        """The pid of the process ``key`` stands for; a new one (the next number) is
        named ``name`` when it is first asked for."""
        pid = self._pids.get(key)
        if pid is None:
            pid = self._pids[key] = len(self._pids) + 1
            self.write([{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}])
        return pid

    def thread(self, pid: int, tid: int | str, name: str) -> None:
        """Name thread ``tid`` of process ``pid`` (once; later names are ignored)."""
        if (pid, tid) not in self._threads:
            self._threads.add((pid, tid))
            self.write(
                [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}]
            )

    def write(self, events: list[Event]) -> None:
        """Add ``events`` (encoded in one call, one line per call)."""
        if not events:
            return
        body = _ENCODER.encode(events)[1:-1]
        self._sink.write(body if self._first else b",\n" + body)
        self._first = False
        self.events += len(events)
        if self._progress is not None:
            self._progress(self.events)

    def close(self, trailer: dict[str, Any] | None = None) -> None:
        """End the events and the object with the ``trailer``'s keys."""
        tail = _ENCODER.encode(trailer or {})[1:-1]
        self._sink.write(b"\n]" + (b"," + tail if tail else b"") + b"}\n")
