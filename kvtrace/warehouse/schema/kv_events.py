"""KV-cache events of serving engines: one row per (event, block), token ids once per block."""

from __future__ import annotations

import pyarrow as pa

from kvtrace.warehouse.schema.core import TableSpec

__all__ = ["KV_EVENTS", "KV_EVENT_BLOCKS"]

KV_EVENTS = TableSpec(
    "kv_events",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("worker", pa.string()),  # the engine (its --endpoint label, or the file's)
            ("dp_rank", pa.int32()),  # the batch's data-parallel rank, when sent
            ("seq", pa.int64()),  # the batch's sequence number
            ("ts", pa.float64()),  # the batch's time, Unix time in seconds
            ("position", pa.int32()),  # the event's place in its batch
            ("block_idx", pa.int32()),  # the block's place in its event
            # stored, removed, cleared; gap (sequence numbers missed), error (a message
            # that could not be read) and restart (an epoch begins) are kvtrace's own
            ("kind", pa.string()),
            ("medium", pa.string()),  # GPU, CPU, ... when sent
            ("lora_id", pa.int64()),
            ("block_hash", pa.string()),  # decimal for integer hashes, hex for bytes
            ("parent_hash", pa.string()),  # the block before it in its prefix chain
            ("block_size", pa.int32()),  # tokens per block (stored events)
            ("detail", pa.string()),  # what a gap, error or restart row is about
            # the engine's epoch: 0, one more each time its sequence numbers went back (a
            # restart); NULL in files of kvtrace before epochs, read as 0
            ("epoch", pa.int32()),
        ]
    ),
    partition_by=("run_id",),
    sort_by=("worker", "epoch", "seq", "position", "block_idx"),
    record_key=("worker", "epoch", "seq", "position", "block_idx", "kind"),
)

KV_EVENT_BLOCKS = TableSpec(
    "kv_event_blocks",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("block_hash", pa.string()),
            ("block_size", pa.int32()),
            ("token_ids", pa.list_(pa.int32())),  # the block's tokens, when the engine sent them
        ]
    ),
    partition_by=("run_id",),
    sort_by=("block_hash",),
    record_key=("block_hash",),
)
