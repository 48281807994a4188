"""Read Alibaba Bailian (Qwen) traces into ``workload_requests`` rows.

The format, as alibaba-edu/qwen-bailian-usagetraces-anon's README documents it (the
traces of "KVCache Cache in the Wild", USENIX ATC '25): one JSON object a line with
``chat_id``, ``parent_chat_id`` (-1 for a root request), ``timestamp`` (seconds since
the trace's start), ``input_length``, ``output_length``, ``type`` (text, search, image,
file, ...), ``turn`` and ``hash_ids``, one salted hash per 16-token block of the prompt,
remapped to integers over the whole trace (so equal ids are equal blocks across chats).

Each request keeps ``chat_id`` as ``request_key``, ``parent_chat_id`` as ``parent_id``
(NULL for -1), ``turn`` and ``type`` (as ``request_type``); its ``session_id`` is the
root of its parent chain as far as the file names it: the chain is followed up while
the parent is a chat of the file; the top chat is the root when its parent is -1, else
the parent it names (an excerpt may start after the root).  A first pass reads the
parent links, a second the requests a chunk at a time, parsed by Arrow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.ingest._csv_columns import RowReasons
from kvtrace.ingest._lines import parse_chunk, read_chunks

if TYPE_CHECKING:  # (the workload reader imports this module)
    from kvtrace.ingest.readers.workload import ArrivalChecks, WorkloadFileResult

BAILIAN_BLOCK_TOKENS = 16
ROOT_PARENT = -1  # parent_chat_id of a root request
_LINKS = pa.schema([("chat_id", pa.int64()), ("parent_chat_id", pa.int64())])
_SCHEMA = pa.schema(
    [
        *_LINKS,
        ("timestamp", pa.float64()),
        ("input_length", pa.int64()),
        ("output_length", pa.int64()),
        ("type", pa.string()),
        ("turn", pa.int64()),
        ("hash_ids", pa.list_(pa.int64())),
    ]
)


def is_bailian_record(record: dict[str, Any]) -> bool:
    return {"chat_id", "parent_chat_id"} <= set(record)


def session_roots(parents: dict[int, int]) -> dict[int, int]:
    """Each chat's session: the root of its parent chain as far as ``parents`` (chat ->
    parent_chat_id) names it (see the module's rule)."""
    roots: dict[int, int] = {}
    for chat in parents:
        chain, node = [], chat
        while node not in roots:
            chain.append(node)
            parent = parents[node]
            if parent == ROOT_PARENT or parent not in parents or parent in chain:
                roots[node] = node if parent == ROOT_PARENT or parent in chain else parent
                break
            node = parent
        root = roots[node]
        for member in chain:
            roots[member] = root
    return roots


def read_bailian(
    path: Path, checks: ArrivalChecks, progress: Callable[[int], None] | None
) -> Iterator[WorkloadFileResult]:
    """The checked requests of each chunk, with their sessions."""
    roots = session_roots(_parent_links(path))
    for chunk in read_chunks(path):
        parsed = parse_chunk(chunk, _SCHEMA)
        table, line_no = parsed.table, parsed.line_numbers
        reasons = RowReasons(table.num_rows)
        chats = table["chat_id"].to_pylist()
        reasons.note(np.array([chat is None for chat in chats], dtype=bool), "missing chat_id")
        arrival = _present(table["timestamp"], "timestamp", reasons)
        lengths = {
            "input_tokens": _present(table["input_length"], "input_length", reasons),
            "output_tokens": _present(table["output_length"], "output_length", reasons),
        }
        parent = pc.if_else(
            pc.equal(table["parent_chat_id"], ROOT_PARENT), None, table["parent_chat_id"]
        )
        sessions = [None if chat is None else str(roots.get(chat, chat)) for chat in chats]
        links = {
            "turn": table["turn"],
            "request_type": table["type"],
            "parent_id": pc.cast(parent, pa.string()),
            "request_key": pc.cast(table["chat_id"], pa.string()),
        }
        result = checks.rows(
            line_no,
            line_no - 1,
            reasons,
            arrival,
            lengths,
            table["hash_ids"],
            {"session_id": pa.chunked_array([pa.array(sessions, pa.string())])},
            chunk.line_text,
            {name: column.combine_chunks() for name, column in links.items()},
        )
        result.rejected = sorted(parsed.bad + result.rejected, key=lambda bad: bad.line_no)
        yield result
        if progress:
            progress(chunk.source_offset)


def _parent_links(path: Path) -> dict[int, int]:
    """chat_id -> parent_chat_id over the file (a line without chat_id is left out)."""
    parents: dict[int, int] = {}
    for chunk in read_chunks(path):
        table = parse_chunk(chunk, _LINKS).table
        for chat, parent in zip(
            table["chat_id"].to_pylist(), table["parent_chat_id"].to_pylist(), strict=True
        ):
            if chat is not None:
                parents[chat] = ROOT_PARENT if parent is None else parent
    return parents


def _present(column: pa.ChunkedArray, name: str, reasons: RowReasons) -> np.ndarray:
    values = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)
    reasons.note(np.isnan(values), f"missing field {name}")
    return values
