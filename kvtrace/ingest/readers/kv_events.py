"""Read recorded KV-cache events: one event batch per line (JSONL), or a raw msgpack
capture (``*.msgpack``, ``*.mpk``: the payloads as the engine sent them, one after
another, each a batch or ``[seq, batch]`` with the batch as an object or as the
payload's bytes).

A JSONL line is a batch as the engine sent it, decoded: ``{"seq": 7, "ts": ..., "events":
[...], "data_parallel_rank": 0}`` (events as tagged maps, ``{"type": "BlockStored",
...}``, or tagged arrays, ``["BlockStored", hashes, parent, ...]``), or an array-like
batch ``[ts, events, rank]``.  ``seq`` defaults to the line's place in the file and
``worker`` to the file's name.  The rows come from `kvtrace.warehouse.rows.kv_events`,
as the collector's do; a line that is not a batch goes to the quarantine.

A line may give its ``epoch``; otherwise each worker's numbered batches are placed in
epochs as the collector places them (`kvtrace.warehouse.rows.kv_event_epochs`): a sequence
number going back starts a new epoch, with a ``restart`` row, unless the batch is the
one read under that number (a repeat, left out).  A batch numbered by its place in the
file is in the epoch of the batch before it.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from kvtrace.errors import InputError
from kvtrace.ingest._lines import NESTED_TOO_DEEPLY, json_records, raw_text, read_content
from kvtrace.ingest._sources import printable
from kvtrace.ingest._values import BadValue, whole_number
from kvtrace.ingest.family import Advance, FileRows, IngestOptions
from kvtrace.ingest.probe import Probe
from kvtrace.ingest.sink import FileSink
from kvtrace.warehouse.rows.kv_event_epochs import EngineEpochs, restart_row
from kvtrace.warehouse.rows.kv_events import (
    INT32_MAX,
    BatchRows,
    MalformedBatch,
    batch_rows,
    check_seq,
)
from kvtrace.warehouse.rows.rejects import BadLine
from kvtrace.warehouse.schema.kv_events import KV_EVENT_BLOCKS, KV_EVENTS

EVENT_TAGS = (b'"BlockStored"', b'"BlockRemoved"', b'"AllBlocksCleared"')
CAPTURE_SUFFIXES = (".msgpack", ".mpk", ".msgpack.gz", ".mpk.gz")
RAW_TAGS = (b"BlockStored", b"BlockRemoved", b"AllBlocksCleared")


def is_event_batch(record: dict[str, Any]) -> bool:
    events = record.get("events")
    return isinstance(events, list) and "ts" in record


class KvEventsFamily:
    """Recorded KV-cache event batches, into ``kv_events`` and ``kv_event_blocks``."""

    name = "kv-events"
    reads = "KV-cache event batches (BlockStored, BlockRemoved)"
    tables = (KV_EVENTS.name, KV_EVENT_BLOCKS.name)
    reads_only_record_keys = False

    def recognise(self, probe: Probe) -> str | None:
        if probe.path.name.endswith(CAPTURE_SUFFIXES) and any(t in probe.head for t in RAW_TAGS):
            return "msgpack"
        if not any(tag in probe.head for tag in EVENT_TAGS):
            return None
        record = probe.first_record
        first = probe.first_line.lstrip()
        if (record is not None and is_event_batch(record)) or first.startswith(b"["):
            return "jsonl"
        return None

    def forced_format(self, probe: Probe) -> str:
        return "msgpack" if probe.path.name.endswith(CAPTURE_SUFFIXES) else "jsonl"

    def run_name(self, probe: Probe, fmt: str, options: IngestOptions) -> str:
        return options.run_name or probe.path.name.split(".")[0]

    def read(
        self, probe: Probe, fmt: str, sink: FileSink, options: IngestOptions, advance: Advance
    ) -> FileRows:
        reader = _capture_rows if fmt == "msgpack" else _jsonl_rows
        rows, rejected = reader(probe, advance)
        stored = sink.write("kv_events", pa.Table.from_pylist(rows.events, schema=KV_EVENTS.schema))
        blocks = {block["block_hash"]: block for block in reversed(rows.blocks)}  # first wins
        sink.write(
            "kv_event_blocks",
            pa.Table.from_pylist(list(blocks.values()), schema=KV_EVENT_BLOCKS.schema),
        )
        return FileRows("kv_events", rows=stored, rejected=rejected)


def _jsonl_rows(probe: Probe, advance: Advance) -> tuple[BatchRows, list[BadLine]]:
    rows = BatchRows()
    rejected: list[BadLine] = []
    epochs = _FileEpochs()
    default_worker = printable(probe.path.name.split(".")[0])
    for line_no, text, record in json_records(probe.path, rejected, advance):
        try:
            seq, numbered, worker, epoch = line_no - 1, False, default_worker, None
            if isinstance(record, dict):
                if record.get("seq") is not None:
                    seq, numbered = whole_number("seq", record["seq"]), True
                if isinstance(record.get("worker"), str):
                    worker = record["worker"]
                if record.get("epoch") is not None:
                    epoch = _epoch(record["epoch"])
            content = text.strip() if numbered else None
            epochs.read(rows, record, seq, worker, content, epoch)
        except (MalformedBatch, BadValue) as exc:
            rejected.append(BadLine(line_no, f"not a KV-event batch: {exc}", raw_text(text)))
    return rows, rejected


def _epoch(value: object) -> int:
    epoch = whole_number("epoch", value)
    if epoch > INT32_MAX:
        raise BadValue(f"epoch is out of range: {epoch}")
    return epoch


def _capture_rows(probe: Probe, advance: Advance) -> tuple[BatchRows, list[BadLine]]:
    """The batches of a msgpack capture; a value that is not one is quarantined, with its
    place in the file (the n-th value) as its line number."""
    try:
        import msgpack
    except ImportError:
        raise InputError(
            f"{probe.path}: reading a msgpack capture needs msgpack: "
            "pip install 'kvtrace[kv-events]'"
        ) from None
    rows = BatchRows()
    rejected: list[BadLine] = []
    epochs = _FileEpochs()
    worker = printable(probe.path.name.split(".")[0])
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(read_content(probe.path))
    index = 0
    try:
        for index, value in enumerate(unpacker, 1):
            seq, batch, numbered = index - 1, value, False
            if isinstance(value, list) and len(value) == 2 and isinstance(value[0], int):
                seq, batch = value
                numbered = True
            try:
                check_seq(seq)
                content = None
                if numbered:
                    content = batch if isinstance(batch, bytes) else msgpack.packb(batch)
                if isinstance(batch, bytes):
                    batch = msgpack.unpackb(batch, raw=False, strict_map_key=False)
                epochs.read(rows, batch, seq, worker, content)
            except msgpack.StackError:
                rejected.append(BadLine(index, f"not a KV-event batch: {NESTED_TOO_DEEPLY}", ""))
            except (MalformedBatch, ValueError) as exc:
                rejected.append(BadLine(index, f"not a KV-event batch: {exc}"[:300], ""))
    except msgpack.StackError:
        rejected.append(BadLine(index + 1, f"the capture is {NESTED_TOO_DEEPLY} here", ""))
    except (ValueError, msgpack.UnpackException) as exc:
        rejected.append(BadLine(index + 1, f"the capture is cut or corrupt here: {exc}", ""))
    advance(probe.source.size)
    return rows, rejected


class _FileEpochs:
    """Each worker's epochs in one file, as the collector places live batches."""

    def __init__(self) -> None:
        self._workers: dict[str, EngineEpochs] = {}

    def read(
        self,
        rows: BatchRows,
        batch: object,
        seq: int,
        worker: str,
        content: bytes | None,
        epoch: int | None = None,
    ) -> None:
        """Add the rows of ``batch`` in its epoch (``epoch``, when the file gives it),
        after a ``restart`` row when it begins one, and none when it repeats a batch.
        ``content`` is the bytes of a batch that carries its number, None for one
        numbered by its place.  A batch that is not one raises `MalformedBatch`, its
        place in the epochs kept."""
        epochs = self._workers.setdefault(worker, EngineEpochs())
        if epoch is not None or content is None:
            epoch = epochs.epoch if epoch is None else epoch
            rows.extend(batch_rows(batch, seq, worker, epoch=epoch))
            return
        arrival = epochs.arrive(seq, content)
        if arrival.repeat:
            return
        epochs.taken(seq, content)
        if arrival.went_back_from is not None:
            rows.events.append(restart_row(worker, arrival, seq))
        rows.extend(batch_rows(batch, seq, worker, epoch=arrival.epoch))


KV_EVENTS_FAMILY = KvEventsFamily()
