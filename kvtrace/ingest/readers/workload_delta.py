"""Read Dynamo's ``mooncake-delta`` session traces into ``workload_requests`` rows.

The format (ai-dynamo/dynamo ``docs/dynosim/trace-formats.md``, "Mooncake Delta"): the
Mooncake row shape, but each turn of a session holds only the prompt segment it adds;
the replay appends it to the session's prompt so far, which also holds the earlier
turns' outputs (Dynamo's engine tests: turns of 4 input + 2 output tokens, then a delta
of 2, send a prompt of 8).  A file of it looks like any Mooncake trace, so it is read
this way only when asked (``--trace-format mooncake-delta``).

kvtrace expands each turn to the full request: ``input_tokens`` is the session's earlier
inputs and outputs plus this delta; ``hash_ids`` are the session's delta blocks so far,
in order (the trace hashes no output blocks); ``turn`` counts the session's rows from 1;
``request_key`` is ``request_id`` and ``parent_id`` the previous turn's, when the rows
carry ids.  Arrival is ``timestamp`` (or ``created_time``, milliseconds); a later turn
with only ``delay`` / ``delay_ms`` arrives that long after the previous turn's arrival (a
lower bound: the trace does not say when that turn finished).  A row without
``session_id`` is a session of its own.  A turn sent to the quarantine leaves its
session's later turns without a prompt to extend: they go there too, with that reason.
Blocks of 512 tokens, as Mooncake's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvtrace.ingest._lines import LineTexts, json_records
from kvtrace.ingest.readers._linked_requests import LinkedRequest, checked_batches
from kvtrace.warehouse.rows.rejects import BadLine

if TYPE_CHECKING:  # (the workload reader imports this module)
    from kvtrace.ingest.readers.workload import ArrivalChecks, WorkloadFileResult

DELTA_BLOCK_TOKENS = 512
AFTER_BAD_TURN = "an earlier turn of its session was quarantined, so its prompt cannot be rebuilt"


@dataclass
class _Session:
    tokens: int = 0  # the prompt so far: earlier deltas and outputs
    hashes: list[int] = field(default_factory=list)
    turns: int = 0
    arrival_s: float | None = None
    last_key: str | None = None
    broken: bool = False


def read_mooncake_delta(
    path: Path, checks: ArrivalChecks, progress: Callable[[int], None] | None
) -> Iterator[WorkloadFileResult]:
    """Every turn expanded to its full request, checked in batches."""
    rejected: list[BadLine] = []
    requests = _expanded(json_records(path, rejected, progress))
    yield from checked_batches(requests, checks, LineTexts(path), rejected)


def _expanded(records: Iterator[tuple[int, bytes, object]]) -> Iterator[LinkedRequest]:
    sessions: dict[str, _Session] = {}
    for line_no, _, record in records:
        problem = None
        if not isinstance(record, dict):
            record, problem = {}, "not a JSON object"
        name = record.get("session_id")
        key = str(name) if name is not None else f"\0line {line_no}"
        session = sessions.setdefault(key, _Session())
        delta = _count(record, "input_length", "input_tokens")
        output = _count(record, "output_length", "output_tokens")
        hashes = record.get("hash_ids")
        if problem is None:
            problem = _problem(delta, output, hashes, session)
        arrival = _arrival(record, session)
        request_id = record.get("request_id")
        session.turns += 1
        yield LinkedRequest(
            request_idx=line_no - 1,
            line_no=line_no,
            arrival_s=arrival,
            input_tokens=None if problem else session.tokens + delta,  # type: ignore[operator]
            output_tokens=output,
            hash_ids=None if problem else [*session.hashes, *hashes],  # type: ignore[misc]
            block_tokens=DELTA_BLOCK_TOKENS,
            session_id=None if name is None else str(name),
            turn=session.turns,
            parent_id=session.last_key,
            request_key=None if request_id is None else str(request_id),
            problem=problem,
        )
        if problem:
            session.broken = True
            continue
        session.tokens += delta + output  # type: ignore[operator]
        session.hashes += hashes  # type: ignore[arg-type]
        session.arrival_s = arrival
        session.last_key = None if request_id is None else str(request_id)


def _problem(
    delta: int | None, output: int | None, hashes: object, session: _Session
) -> str | None:
    if session.broken:
        return AFTER_BAD_TURN
    if delta is None or delta < 0:
        return "input_length is missing or not a count of tokens"
    if output is None or output < 0:
        return "output_length is missing or not a count of tokens"
    if not isinstance(hashes, list) or not all(
        isinstance(value, int) and not isinstance(value, bool) for value in hashes
    ):
        return "hash_ids is missing or not a list of integers"
    return None


def _count(record: dict[str, Any], *names: str) -> int | None:
    for name in names:
        value = record.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _arrival(record: dict[str, Any], session: _Session) -> float | None:
    for name in ("timestamp", "created_time"):
        value = record.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value) / 1000.0
    for name in ("delay", "delay_ms"):
        value = record.get(name)
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and session.arrival_s is not None
        ):
            return session.arrival_s + float(value) / 1000.0
    return None
