"""Read Dynamo's agentic traces into ``workload_requests`` rows: Agentic Mooncake (schema
``dynamo.agentic_mooncake``, version 2) and Weka traces, each with its own block size
and block hashes local to a scope.

The formats are ai-dynamo/dynamo's (``lib/data-gen`` Weka importer, the replay's
``AgenticMooncakeHeader`` and rows; ``docs/agents/agent-replay.md``):

- Agentic Mooncake: a header line ``{"schema": "dynamo.agentic_mooncake", "version": 2,
  "block_size": B, "hash_id_scope": "local", "source": {"format", "digest"}}``, then a
  row a request: ``request_id``, ``play_id``, ``session_id``, ``model``,
  ``input_length``, ``output_length``, ``hash_ids``, ``not_before_ms`` (the recorded
  start, milliseconds) and ``dependencies`` (``request_id``, ``trigger``, ``delay_ms``,
  ``relation``: sequence, spawn, join).  Hash ids are local to a play.
- Weka: one trace a line (or a whole file one trace): ``id``, ``block_size``,
  ``hash_id_scope``, ``requests``; a request is ``{"type": "n"|"s", "t", "model", "in",
  "out", "hash_ids"}`` (``t`` seconds from the trace's start), and a sub-agent is
  ``{"type": "subagent", "t", "agent_id", "subagent_type", "requests": [...]}`` whose
  requests carry the same trace-relative ``t``.  Hash ids are local to the trace: a
  sub-agent shares its parent's scope.

``hash_id_scope: local`` means a hash id names a block only within its scope, so kvtrace
makes them global (`global_hashes`) with the scope in the salt: an Agentic Mooncake play
is the header's ``source.digest`` and the ``play_id``; a Weka trace is the BLAKE2b
digest of its text and its line.  Within a scope equal ids stay equal (a sub-agent
re-reading its parent's prefix reuses its blocks); two scopes share none.  A scope named
``global`` keeps its ids.

Columns: ``request_key`` the request's id (Weka: ``<trace id>/outer:<i>``, a sub-agent's
``<trace id>/outer:<i>:inner:<j>``, the source ids Dynamo's importer gives them);
``session_id`` the session (Weka: the trace id, a sub-agent's
``<trace id>/subagent:<i>:<agent_id>``); ``turn`` the request's place in its session
from 1; ``parent_id`` the request it follows: the spawning request of a sub-agent's
first request (Agentic Mooncake: its ``spawn`` dependency), else the previous request of
its session (its ``sequence`` dependency); ``request_type`` a Weka sub-agent's
``subagent_type``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kvtrace.errors import InputError
from kvtrace.ingest._lines import (
    LineTexts,
    decode_json,
    json_records,
    raw_text,
    read_chunks,
    read_content,
)
from kvtrace.ingest.readers._linked_requests import (
    LinkedRequest,
    checked_batches,
    global_hashes,
    scope_salt,
)
from kvtrace.warehouse.rows.rejects import BadLine

if TYPE_CHECKING:  # (the workload reader imports this module)
    from kvtrace.ingest.readers.workload import ArrivalChecks, WorkloadFileResult

AGENTIC_SCHEMA = "dynamo.agentic_mooncake"
AGENTIC_VERSION = 2
HASH_SCOPES = ("local", "global")
WEKA_REQUEST_TYPES = ("n", "s")  # a normal and a streaming request
WEKA_SUBAGENT = "subagent"


def is_agentic_header(record: dict[str, Any]) -> bool:
    return record.get("schema") == AGENTIC_SCHEMA


def is_weka_trace(record: dict[str, Any]) -> bool:
    return {"block_size", "hash_id_scope", "requests"} <= set(record)


def looks_like_weka_document(head: bytes) -> bool:
    """Whether a file's start is a JSON document spanning lines (its first line no whole
    object, as a line of JSONL is) that names a Weka trace's keys."""
    first = head.lstrip().split(b"\n", 1)[0]
    if isinstance(decode_json(first), dict):
        return False
    return all(f'"{key}"'.encode() in head for key in ("block_size", "hash_id_scope", "requests"))


# -- Agentic Mooncake ---------------------------------------------------------------------


def read_agentic_mooncake(
    path: Path, checks: ArrivalChecks, progress: Callable[[int], None] | None
) -> Iterator[WorkloadFileResult]:
    """The requests of an Agentic Mooncake file, checked in batches."""
    rejected: list[BadLine] = []
    records = json_records(path, rejected, progress)
    requests = _agentic_requests(path, records)
    yield from checked_batches(requests, checks, LineTexts(path), rejected)


def _agentic_requests(
    path: Path, records: Iterator[tuple[int, bytes, object]]
) -> Iterator[LinkedRequest]:
    header_line, _, header = next(records, (0, b"", None))
    block_tokens, scope, digest = _agentic_header(path, header)
    turns: dict[str, int] = {}
    for line_no, _, row in records:
        index = line_no - header_line - 1
        if not isinstance(row, dict):
            yield _bad(index, line_no, block_tokens, "not a JSON object")
            continue
        session = _text(row.get("session_id"))
        turn = 1
        if session is not None:
            turn = turns[session] = turns.get(session, 0) + 1
        hashes = _hash_list(row.get("hash_ids"))
        play = _text(row.get("play_id"))
        problem = None
        if hashes is None:
            problem = "hash_ids is missing or not a list of integers"
        elif scope == "local":
            if play is None:
                problem = "play_id is missing: its local hash ids name no scope"
            else:
                hashes = _scoped(hashes, f"{digest}/{play}")
        yield LinkedRequest(
            request_idx=index,
            line_no=line_no,
            arrival_s=_seconds(row.get("not_before_ms"), 1000.0),
            input_tokens=_count(row.get("input_length")),
            output_tokens=_count(row.get("output_length")),
            hash_ids=hashes,
            block_tokens=block_tokens,
            session_id=session,
            turn=turn,
            parent_id=_agentic_parent(row.get("dependencies")),
            request_key=_text(row.get("request_id")),
            model=_text(row.get("model")),
            problem=problem,
        )


def _agentic_header(path: Path, header: object) -> tuple[int, str, str]:
    """(block size, hash scope, source digest) from the header; InputError if unusable."""
    if not isinstance(header, dict) or not is_agentic_header(header):
        raise InputError(f"{path} does not start with a {AGENTIC_SCHEMA} header line")
    if header.get("version") != AGENTIC_VERSION:
        raise InputError(
            f"{path} is {AGENTIC_SCHEMA} version {header.get('version')!r}; kvtrace reads "
            f"version {AGENTIC_VERSION}"
        )
    block_tokens = _count(header.get("block_size"))
    scope = header.get("hash_id_scope")
    if block_tokens is None or block_tokens <= 0 or scope not in HASH_SCOPES:
        raise InputError(
            f"{path}'s header needs a positive block_size and a hash_id_scope of "
            f"{' or '.join(HASH_SCOPES)} (it has {header.get('block_size')!r}, {scope!r})"
        )
    source = header.get("source")
    digest = source.get("digest") if isinstance(source, dict) else None
    return block_tokens, str(scope), str(digest)


def _agentic_parent(dependencies: object) -> str | None:
    """The spawning request, else the previous request of the session."""
    if not isinstance(dependencies, list):
        return None
    by_relation = {
        dependency.get("relation"): _text(dependency.get("request_id"))
        for dependency in reversed(dependencies)
        if isinstance(dependency, dict)
    }
    return by_relation.get("spawn") or by_relation.get("sequence")


# -- Weka -------------------------------------------------------------------------------------


def read_weka(
    path: Path, checks: ArrivalChecks, progress: Callable[[int], None] | None
) -> Iterator[WorkloadFileResult]:
    """The requests of every trace of a Weka file, checked in batches."""
    rejected: list[BadLine] = []
    yield from checked_batches(
        _weka_requests(_weka_traces(path, rejected, progress), rejected),
        checks,
        LineTexts(path),
        rejected,
    )


def _weka_traces(
    path: Path, rejected: list[BadLine], progress: Callable[[int], None] | None
) -> Iterator[tuple[int, bytes, object]]:
    """(line, text, trace): a trace a line, or the file's one trace when it spans lines."""
    if _first_line_is_object(path):
        yield from json_records(path, rejected, progress)
        return
    content = read_content(path)
    try:
        yield 1, content, json.loads(content)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{path} is not valid JSON: {exc}") from None


def _first_line_is_object(path: Path) -> bool:
    for chunk in read_chunks(path):
        for line in chunk.data.split(b"\n"):
            if line.strip():
                return isinstance(decode_json(line), dict)
    return False


@dataclass
class _WekaTrace:
    line_no: int
    trace_id: str
    block_tokens: int
    salt: int | None  # None: the ids are global


def _weka_requests(
    traces: Iterator[tuple[int, bytes, object]], rejected: list[BadLine]
) -> Iterator[LinkedRequest]:
    index = 0
    for line_no, text, trace in traces:
        header, problem = _weka_header(line_no, text, trace)
        if header is None:
            rejected.append(BadLine(line_no, problem or "", raw_text(text)))
            continue
        for request in _one_weka_trace(header, trace["requests"], index):  # type: ignore[index]
            index += 1
            yield request


def _weka_header(line_no: int, text: bytes, trace: object) -> tuple[_WekaTrace | None, str]:
    if not isinstance(trace, dict) or not is_weka_trace(trace):
        return None, "not a Weka trace (an object with block_size, hash_id_scope, requests)"
    block_tokens, scope = _count(trace.get("block_size")) or 0, trace.get("hash_id_scope")
    if block_tokens <= 0 or scope not in HASH_SCOPES or not isinstance(trace["requests"], list):
        return None, (
            "a Weka trace needs a positive block_size, a hash_id_scope of local or global "
            "and a list of requests"
        )
    trace_id = _text(trace.get("id")) or f"line {line_no}"
    digest = hashlib.blake2b(text, digest_size=16).hexdigest()
    salt = scope_salt(f"{digest}:{line_no}") if scope == "local" else None
    return _WekaTrace(line_no, trace_id, block_tokens, salt), ""


def _one_weka_trace(
    trace: _WekaTrace, entries: list[Any], first_index: int
) -> Iterator[LinkedRequest]:
    """The trace's requests in file order, a sub-agent's where its marker stands."""
    index = first_index
    turn, previous = 0, None  # the main session's turns so far and its last request
    for outer, entry in enumerate(entries):
        key = f"{trace.trace_id}/outer:{outer}"
        if isinstance(entry, dict) and entry.get("type") == WEKA_SUBAGENT:
            agent = _text(entry.get("agent_id")) or str(outer)
            link = _Link(f"{trace.trace_id}/subagent:{outer}:{agent}", 0, previous)
            kind = _text(entry.get("subagent_type")) or WEKA_SUBAGENT
            inner = entry.get("requests")
            for position, request in enumerate(inner if isinstance(inner, list) else []):
                inner_key = f"{key}:inner:{position}"
                link = _Link(link.session, link.turn + 1, link.parent)
                yield _weka_request(trace, index, request, link, inner_key, kind)
                link = _Link(link.session, link.turn, inner_key)
                index += 1
            continue
        turn += 1
        yield _weka_request(trace, index, entry, _Link(trace.trace_id, turn, previous), key)
        index += 1
        previous = key


@dataclass(frozen=True)
class _Link:
    session: str
    turn: int
    parent: str | None


def _weka_request(
    trace: _WekaTrace,
    index: int,
    entry: object,
    link: _Link,
    key: str,
    kind: str | None = None,
) -> LinkedRequest:
    record = entry if isinstance(entry, dict) else {}
    hashes = _hash_list(record.get("hash_ids", []))
    problem = None
    if record.get("type") not in WEKA_REQUEST_TYPES:
        allowed = "n or s" if kind else "n, s or subagent"
        problem = f"a Weka request's type must be {allowed}"
    elif hashes is None:
        problem = "hash_ids is not a list of integers"
    elif trace.salt is not None:
        hashes = _scoped(hashes, trace.salt)
    return LinkedRequest(
        request_idx=index,
        line_no=trace.line_no,
        arrival_s=_seconds(record.get("t"), 1.0),
        input_tokens=_count(record.get("in")),
        output_tokens=_count(record.get("out")),
        hash_ids=hashes,
        block_tokens=trace.block_tokens,
        session_id=link.session,
        turn=link.turn,
        request_type=kind,
        parent_id=link.parent,
        request_key=key,
        model=_text(record.get("model")),
        problem=problem,
    )


# -- values -----------------------------------------------------------------------------------


def _scoped(hashes: list[int], salt: int | str) -> list[int]:
    """Local ids made global with the scope's salt (a scope's name, or its salt)."""
    salt = scope_salt(salt) if isinstance(salt, str) else salt
    scoped: list[int] = global_hashes(np.array(hashes, dtype=np.int64), salt).tolist()
    return scoped


def _hash_list(value: object) -> list[int] | None:
    """Integer ids as int64 (an unsigned 64-bit id above 2^63 wraps), or None."""
    if not isinstance(value, list) or not all(_is_int(item) for item in value):
        return None
    if not all(-(1 << 63) <= item < (1 << 64) for item in value):
        return None
    return [item - (1 << 64) if item >= (1 << 63) else item for item in value]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(value: object) -> int | None:
    return value if _is_int(value) else None  # type: ignore[return-value]


def _seconds(value: object, per_second: float) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) / per_second
    return None


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _bad(index: int, line_no: int, block_tokens: int, problem: str) -> LinkedRequest:
    return LinkedRequest(index, line_no, None, None, None, None, block_tokens, problem=problem)
