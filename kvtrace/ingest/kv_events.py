"""Read recorded KV-cache events: one event batch per line (JSONL).

A line is a batch as the engine sent it, decoded: ``{"seq": 7, "ts": ..., "events":
[...], "data_parallel_rank": 0}`` (events as tagged maps, ``{"type": "BlockStored",
...}``, or tagged arrays, ``["BlockStored", hashes, parent, ...]``), or an array-like
batch ``[ts, events, rank]``.  ``seq`` defaults to the line's place in the file and
``worker`` to the file's name.  The rows come from `kvtrace.warehouse.kv_event_rows`,
as the collector's do; a line that is not a batch goes to the quarantine.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from kvtrace.ingest.family import Advance, FileRows, IngestOptions
from kvtrace.ingest.lines import json_records, raw_text
from kvtrace.ingest.probe import Probe
from kvtrace.ingest.sink import FileSink
from kvtrace.ingest.values import BadValue, whole_number
from kvtrace.warehouse.kv_event_rows import BatchRows, MalformedBatch, batch_rows
from kvtrace.warehouse.rejects import BadLine
from kvtrace.warehouse.schema.kv_events import KV_EVENT_BLOCKS, KV_EVENTS

EVENT_TAGS = (b'"BlockStored"', b'"BlockRemoved"', b'"AllBlocksCleared"')


def is_event_batch(record: dict[str, Any]) -> bool:
    events = record.get("events")
    return isinstance(events, list) and "ts" in record


class KvEventsFamily:
    """Recorded KV-cache event batches, into ``kv_events`` and ``kv_event_blocks``."""

    name = "kv-events"

    def recognise(self, probe: Probe) -> str | None:
        if not any(tag in probe.head for tag in EVENT_TAGS):
            return None
        record = probe.first_record
        first = probe.first_line.lstrip()
        if (record is not None and is_event_batch(record)) or first.startswith(b"["):
            return "jsonl"
        return None

    def forced_format(self, probe: Probe) -> str:
        return "jsonl"

    def run_name(self, probe: Probe, fmt: str, options: IngestOptions) -> str:
        return options.run_name or probe.path.name.split(".")[0]

    def read(
        self, probe: Probe, fmt: str, sink: FileSink, options: IngestOptions, advance: Advance
    ) -> FileRows:
        rows = BatchRows()
        rejected: list[BadLine] = []
        default_worker = probe.path.name.split(".")[0]
        for line_no, text, record in json_records(probe.path, rejected, advance):
            try:
                seq, worker = line_no - 1, default_worker
                if isinstance(record, dict):
                    if record.get("seq") is not None:
                        seq = whole_number("seq", record["seq"])
                    if isinstance(record.get("worker"), str):
                        worker = record["worker"]
                rows.extend(batch_rows(record, seq, worker))
            except (MalformedBatch, BadValue) as exc:
                rejected.append(BadLine(line_no, f"not a KV-event batch: {exc}", raw_text(text)))
        stored = sink.write("kv_events", pa.Table.from_pylist(rows.events, schema=KV_EVENTS.schema))
        blocks = {block["block_hash"]: block for block in reversed(rows.blocks)}  # first wins
        sink.write(
            "kv_event_blocks",
            pa.Table.from_pylist(list(blocks.values()), schema=KV_EVENT_BLOCKS.schema),
        )
        return FileRows("kv_events", rows=stored, rejected=rejected)


KV_EVENTS_FAMILY = KvEventsFamily()
