"""Rows of ``kv_events`` and ``kv_event_blocks`` from the KV-cache event batches that
serving engines publish (vLLM's ``vllm/distributed/kv_events.py``; SGLang and Dynamo use
the same structs).

A batch is ``EventBatch(ts, events, data_parallel_rank)``; each event is a tagged
``BlockStored(block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
...)``, ``BlockRemoved(block_hashes, medium, ...)`` or ``AllBlocksCleared()``.  Engines
encode them with msgspec either array-like (a batch ``[ts, events, rank]``, an event
``["BlockStored", hashes, parent, ...]``, trailing defaults left out) or as maps (an event
``{"type": "BlockStored", ...}``); both decode here to the same rows.  A block hash is an
integer or bytes: it is kept as decimal text or hex.  The collector (live ZMQ) and ingest
(recorded files) both build their rows here, and a value beyond its column (a ``lora_id``
or sequence number past int64) makes the batch malformed rather than reaching Arrow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FIELDS",
    "FLOAT_LIMIT",
    "INT32_MAX",
    "INT64_LIMIT",
    "KINDS",
    "BatchRows",
    "MalformedBatch",
    "TooManyBlocks",
    "batch_rows",
    "check_seq",
]

# The fields of each event, in the order array-like encodings send them.
FIELDS: dict[str, tuple[str, ...]] = {
    "BlockStored": (
        "block_hashes",
        "parent_block_hash",
        "token_ids",
        "block_size",
        "lora_id",
        "medium",
    ),
    "BlockRemoved": ("block_hashes", "medium"),
    "AllBlocksCleared": (),
}
KINDS = {"BlockStored": "stored", "BlockRemoved": "removed", "AllBlocksCleared": "cleared"}
INT32_MAX = 2**31 - 1
INT64_LIMIT = 2**63  # sequence numbers and LoRA ids are int64 (the wire allows uint64)
FLOAT_LIMIT = 2**1023  # a batch's ts becomes a float64 (a JSON integer may be larger)


class MalformedBatch(ValueError):
    """A message that is not a KV-event batch; the text says what is wrong."""


class TooManyBlocks(ValueError):
    """A batch of more block events than its reader allows."""


def check_seq(seq: int) -> None:
    """`MalformedBatch` unless ``seq`` is a sequence number kv_events can hold."""
    if not 0 <= seq < INT64_LIMIT:
        raise MalformedBatch(
            f"sequence number {seq} is {'negative' if seq < 0 else 'beyond int64'}"
        )


@dataclass
class BatchRows:
    """The rows of one or more batches: one per (event, block), and each stored block's
    tokens."""

    events: list[dict[str, Any]] = field(default_factory=list)
    blocks: list[dict[str, Any]] = field(default_factory=list)

    def extend(self, other: BatchRows) -> None:
        self.events.extend(other.events)
        self.blocks.extend(other.blocks)


def batch_rows(
    batch: object, seq: int, worker: str, *, epoch: int = 0, max_blocks: int | None = None
) -> BatchRows:
    """The rows of one decoded batch (a list or a dict); `MalformedBatch` otherwise, and
    `TooManyBlocks` when its events name more than ``max_blocks`` blocks."""
    if isinstance(batch, (list, tuple)) and len(batch) >= 2:
        ts, events = batch[0], batch[1]
        rank = batch[2] if len(batch) > 2 else None
    elif isinstance(batch, dict) and "events" in batch:
        ts, events, rank = batch.get("ts"), batch["events"], batch.get("data_parallel_rank")
    else:
        raise MalformedBatch("not an EventBatch (ts, events, data_parallel_rank)")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        raise MalformedBatch(f"the batch's ts is not a number: {ts!r}"[:200])
    if isinstance(ts, int) and not -FLOAT_LIMIT < ts < FLOAT_LIMIT:
        raise MalformedBatch(f"the batch's ts is beyond a float: {ts}"[:200])
    if not isinstance(events, (list, tuple)):
        raise MalformedBatch("the batch's events are not a list")
    if rank is not None and (not isinstance(rank, int) or not 0 <= rank <= INT32_MAX):
        raise MalformedBatch(f"data_parallel_rank is not a rank: {rank!r}"[:200])
    fields = [_event_fields(event, position) for position, event in enumerate(events)]
    if max_blocks is not None:
        blocks = sum(_block_count(values) for _, values in fields)
        if blocks > max_blocks:
            raise TooManyBlocks(
                f"a message of {blocks:,} block events, over the bound of {max_blocks:,}"
            )
    rows = BatchRows()
    base = {"worker": worker, "epoch": epoch, "dp_rank": rank, "seq": seq, "ts": float(ts)}
    for position, (tag, values) in enumerate(fields):
        rows.extend(_event_rows(tag, values, {**base, "position": position}, position))
    return rows


def _block_count(values: dict[str, Any]) -> int:
    """The rows an event makes: one per block hash (one for a clear, or a bad event)."""
    hashes = values.get("block_hashes")
    return len(hashes) if isinstance(hashes, (list, tuple)) else 1


def _event_fields(event: object, position: int) -> tuple[str, dict[str, Any]]:
    """An event's tag and its fields by name, from either encoding."""
    if isinstance(event, (list, tuple)) and event and isinstance(event[0], str):
        tag, values = event[0], list(event[1:])
        names = FIELDS.get(tag)
        if names is None:
            raise MalformedBatch(f"event {position} has an unknown tag {tag!r}"[:200])
        return tag, dict(zip(names, values, strict=False))
    if isinstance(event, dict) and isinstance(event.get("type"), str):
        tag = event["type"]
        if tag not in FIELDS:
            raise MalformedBatch(f"event {position} has an unknown tag {tag!r}"[:200])
        return tag, event
    raise MalformedBatch(f"event {position} is not a tagged KV-cache event")


def _event_rows(tag: str, values: dict[str, Any], base: dict[str, Any], position: int) -> BatchRows:
    rows = BatchRows()
    kind = KINDS[tag]
    if kind == "cleared":
        rows.events.append({**base, "kind": kind, "block_idx": 0})
        return rows
    hashes = values.get("block_hashes")
    if not isinstance(hashes, (list, tuple)):
        raise MalformedBatch(f"event {position} ({tag}) has no list of block_hashes")
    keys = [_hash_text(h, position) for h in hashes]
    medium = values.get("medium")
    if medium is not None and not isinstance(medium, str):
        raise MalformedBatch(f"event {position}: medium is not text: {medium!r}"[:200])
    if kind == "removed":
        for index, key in enumerate(keys):
            rows.events.append(
                {**base, "kind": kind, "block_idx": index, "medium": medium, "block_hash": key}
            )
        return rows
    block_size = values.get("block_size")
    if (
        not isinstance(block_size, int)
        or isinstance(block_size, bool)
        or not 0 < block_size <= INT32_MAX
    ):
        raise MalformedBatch(f"event {position}: block_size is not a positive integer")
    parent = values.get("parent_block_hash")
    parent_key = None if parent is None else _hash_text(parent, position)
    lora = values.get("lora_id")
    if lora is not None and (not isinstance(lora, int) or isinstance(lora, bool)):
        raise MalformedBatch(f"event {position}: lora_id is not an integer: {lora!r}"[:200])
    if lora is not None and not -INT64_LIMIT <= lora < INT64_LIMIT:
        raise MalformedBatch(f"event {position}: lora_id {lora} is beyond int64")
    tokens = _token_ids(values.get("token_ids"), position)
    for index, key in enumerate(keys):
        rows.events.append(
            {
                **base,
                "kind": kind,
                "block_idx": index,
                "medium": medium,
                "lora_id": lora,
                "block_hash": key,
                "parent_hash": parent_key if index == 0 else keys[index - 1],
                "block_size": block_size,
            }
        )
        chunk = tokens[index * block_size : (index + 1) * block_size] if tokens else None
        rows.blocks.append({"block_hash": key, "block_size": block_size, "token_ids": chunk})
    return rows


def _hash_text(value: object, position: int) -> str:
    if isinstance(value, bool):
        raise MalformedBatch(f"event {position}: a block hash is a boolean")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, str) and value:  # a JSON file's text form of either
        return value.lower()
    raise MalformedBatch(f"event {position}: a block hash is neither an integer nor bytes")


def _token_ids(value: object, position: int) -> Sequence[int] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= INT32_MAX for t in value
    ):
        raise MalformedBatch(f"event {position}: token_ids are not a list of token ids")
    return value
