"""Read PyTorch profiler (Kineto) traces: Chrome trace JSON with ``traceEvents``.

Complete events (``"ph": "X"``) become ``timeline_events`` rows: pid and tid as text
(Kineto writes numbers or names), the CUDA stream, device, correlation and external id
from ``args``; for ``gpu_memcpy`` events the copy kind from the name (``Memcpy DtoH
(Device -> Pageable)`` is ``DtoH``) and ``args.bytes``.  Metadata events and other phases
are left out; an event without a numeric ``ts`` and ``dur`` goes to the quarantine.  The
iteration (``ProfilerStep#N``) of each event is worked out by the ``timeline_events``
view, so the file is read once.  The trace's ``distributedInfo`` gives the rank and goes
to ``runs`` with the schema version (Kineto writes these keys before the events; a rank
given only after them is missing from the rows).

Memory stays bounded: the file (plain or gzip) is read in 8 MB blocks, the events of the
``traceEvents`` array are decoded one at a time with ``json.JSONDecoder.raw_decode``, and
every ``BATCH_EVENTS`` rows are handed on as one Arrow batch.  The other top-level keys
(``distributedInfo``, ``deviceProperties``, ...) are small and decoded whole.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from kvtrace.errors import InputError
from kvtrace.warehouse.rejects import BadLine
from kvtrace.warehouse.schema.timeline import TIMELINE_EVENTS

BLOCK_BYTES = 8 << 20
BATCH_EVENTS = 200_000
_LOOKAHEAD = 1 << 16
_COPY_KIND = re.compile(r"Memcpy (\w+)")
_SPACE = re.compile(r"[\s,]*")  # between elements and between keys
_WHITESPACE = re.compile(r"\s*")
_COLON = re.compile(r"\s*:\s*")
_DECODER = json.JSONDecoder()


def looks_like_kineto(path: Path) -> bool:
    """Whether a .json or .json.gz file starts like a Chrome trace."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            head = handle.read(1 << 16)
    except (OSError, EOFError):
        return False
    return b'"traceEvents"' in head or b'"schemaVersion"' in head


@dataclass
class KinetoHeader:
    """What a trace says about itself besides its events."""

    rank: int | None = None
    run_config: dict = field(default_factory=dict)


@dataclass
class KinetoReader:
    """Stream a trace's complete events as Arrow batches; ``rejected`` and ``header``
    are filled in as the file is read."""

    path: Path
    rejected: list[BadLine] = field(default_factory=list)
    header: KinetoHeader = field(default_factory=KinetoHeader)

    def batches(self, progress: Callable[[int], None] | None = None) -> Iterator[pa.Table]:
        rows: list[dict] = []
        others: dict = {}
        for index, event in enumerate(_events(self.path, others, progress)):
            if not isinstance(event, dict) or event.get("ph") != "X":
                continue
            ts, dur = _float(event.get("ts")), _float(event.get("dur"))
            if ts is None or dur is None or dur < 0:
                self.rejected.append(BadLine(index + 1, "an X event needs numeric ts and "
                                             "dur >= 0", json.dumps(event)[:2000]))
                continue
            rows.append(_row(index, event, ts, dur))
            if len(rows) >= BATCH_EVENTS:
                yield self._table(rows, others)
                rows = []
        self._read_header(others)
        if rows:
            yield self._table(rows, others)

    def _table(self, rows: list[dict], others: dict) -> pa.Table:
        self._read_header(others)
        for row in rows:
            row["rank"] = self.header.rank
        return pa.Table.from_pylist(rows, schema=TIMELINE_EVENTS.schema)

    def _read_header(self, others: dict) -> None:
        info = others.get("distributedInfo")
        info = info if isinstance(info, dict) else {}
        self.header.rank = info.get("rank") if isinstance(info.get("rank"), int) else None
        self.header.run_config = {
            "schema_version": others.get("schemaVersion"), "distributed_info": info,
            **({"device_properties": others["deviceProperties"]}
               if "deviceProperties" in others else {})}


def _blocks(path: Path) -> Iterator[str]:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            while block := handle.read(BLOCK_BYTES):
                yield block.decode("utf-8", errors="replace")
    except (OSError, EOFError) as exc:
        raise InputError(f"{path} is not a readable trace: {exc}") from None


def _events(path: Path, others: dict,
            progress: Callable[[int], None] | None) -> Iterator[object]:
    """Every element of the top-level ``traceEvents`` array, in order; the other
    top-level values go into ``others``."""
    blocks = _blocks(path)
    buffer, at, read = "", 0, 0

    def refill() -> bool:
        nonlocal buffer, at, read
        block = next(blocks, None)
        if block is None:
            return False
        buffer, at = buffer[at:] + block, 0
        read += len(block)
        if progress:
            progress(read)
        return True

    def skip(pattern: re.Pattern[str]) -> None:
        nonlocal at
        while True:
            at = pattern.match(buffer, at).end()  # type: ignore[union-attr]
            if at < len(buffer) or not refill():
                return

    def value() -> object:
        nonlocal at
        while len(buffer) - at < _LOOKAHEAD and refill():
            pass  # a number or name is never decoded cut short at a block's end
        while True:
            try:
                decoded, at = _DECODER.raw_decode(buffer, at)
                return decoded
            except json.JSONDecodeError as exc:
                if not refill():
                    raise InputError(f"{path} is cut short or not JSON: {exc.msg} at "
                                     f"character {read - len(buffer) + exc.pos}") from None

    skip(_WHITESPACE)
    if buffer[at:at + 1] != "{":
        raise InputError(f"{path} holds no JSON object; a Chrome trace is one")
    at += 1
    while True:
        skip(_SPACE)
        if buffer[at:at + 1] == "}":
            return
        key = value()
        skip(_COLON)
        if key != "traceEvents":
            others[str(key)] = value()
            continue
        skip(_WHITESPACE)
        if buffer[at:at + 1] != "[":
            raise InputError(f"{path}: traceEvents is not a list")
        at += 1
        while True:
            skip(_SPACE)
            if buffer[at:at + 1] == "]":
                at += 1
                break
            yield value()


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _int(value: object) -> int | None:
    number = _float(value)
    return None if number is None else int(number)


def _row(index: int, event: dict, ts: float, dur: float) -> dict:
    args: dict = event["args"] if isinstance(event.get("args"), dict) else {}
    category = str(event.get("cat", ""))
    name = str(event.get("name", ""))
    kind = _COPY_KIND.match(name) if category == "gpu_memcpy" else None
    return {
        "event_idx": index, "pid": str(event.get("pid")), "tid": str(event.get("tid")),
        "stream": _int(args.get("stream")), "device": _int(args.get("device")),
        "category": category, "name": name, "ts_us": ts, "dur_us": dur,
        "correlation": _int(args.get("correlation")),
        "external_id": _int(args.get("External id")),
        "copy_kind": kind.group(1) if kind else None, "bytes": _int(args.get("bytes")),
    }
