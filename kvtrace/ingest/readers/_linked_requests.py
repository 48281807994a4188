"""The requests of a trace that links them into sessions (Bailian, Dynamo's agentic
formats, mooncake-delta), gathered one by one and checked as a batch; and the rule that
makes a file's local block hashes global.

A trace whose ``hash_id_scope`` is ``local`` numbers its blocks afresh in each scope (a
Dynamo agentic play, a Weka trace): hash 7 of one scope and hash 7 of another are
different text.  `global_hashes` mixes a scope's 64-bit salt into every id with the
SplitMix64 finaliser, a bijection of 64-bit integers: within a scope equal ids stay
equal and different ids stay different, and two scopes share an id by chance only (about
n^2 / 2^65 for n ids in all).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from kvtrace.ingest._csv_columns import RowReasons
from kvtrace.warehouse.rows.rejects import BadLine

if TYPE_CHECKING:  # (the workload reader imports this module)
    from kvtrace.ingest.readers.workload import ArrivalChecks, WorkloadFileResult

BATCH_REQUESTS = 1 << 16  # requests checked and stored at a time

_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)


def scope_salt(scope: str) -> int:
    """A scope's 64-bit salt: the first 8 bytes (little-endian) of its BLAKE2b digest."""
    return int.from_bytes(hashlib.blake2b(scope.encode(), digest_size=8).digest(), "little")


def global_hashes(local: np.ndarray, salt: int) -> np.ndarray:
    """``local`` block ids (int64) made global: SplitMix64's finaliser of ``id ^ salt``."""
    with np.errstate(over="ignore"):
        mixed = local.astype(np.int64).view(np.uint64) ^ np.uint64(salt)
        mixed = (mixed ^ (mixed >> np.uint64(30))) * _MIX_1
        mixed = (mixed ^ (mixed >> np.uint64(27))) * _MIX_2
        mixed ^= mixed >> np.uint64(31)
    return mixed.view(np.int64)


@dataclass
class LinkedRequest:
    """One request as its trace states it (arrival in seconds; None where missing)."""

    request_idx: int  # its place among the file's requests, from 0: its key
    line_no: int  # the line that holds it (a nested request: its trace's line)
    arrival_s: float | None
    input_tokens: int | None
    output_tokens: int | None
    hash_ids: list[int] | None
    block_tokens: int
    session_id: str | None = None
    turn: int | None = None
    request_type: str | None = None
    parent_id: str | None = None
    request_key: str | None = None
    model: str | None = None
    problem: str | None = None  # why it goes to the quarantine, found while reading


def checked_batches(
    requests: Iterable[LinkedRequest],
    checks: ArrivalChecks,
    line_text: Callable[[int], str],
    rejected: list[BadLine],
) -> Iterator[WorkloadFileResult]:
    """The requests in batches of `BATCH_REQUESTS`, each checked by ``checks``; the lines
    the source of ``requests`` put in ``rejected`` meanwhile go with the batch (those left
    at the end, in a batch of their own)."""
    batch: list[LinkedRequest] = []
    for request in requests:
        batch.append(request)
        if len(batch) >= BATCH_REQUESTS:
            yield _with_rejected(_checked(batch, checks, line_text), rejected)
            batch = []
    if batch or rejected:
        yield _with_rejected(_checked(batch, checks, line_text), rejected)


def _with_rejected(result: WorkloadFileResult, rejected: list[BadLine]) -> WorkloadFileResult:
    result.rejected = rejected_sorted(rejected, result.rejected)
    rejected.clear()
    return result


def _checked(
    batch: list[LinkedRequest], checks: ArrivalChecks, line_text: Callable[[int], str]
) -> WorkloadFileResult:
    reasons = RowReasons(len(batch))
    problems = [request.problem for request in batch]
    for problem in dict.fromkeys(problem for problem in problems if problem is not None):
        reasons.note(np.array([found == problem for found in problems], dtype=bool), problem)
    arrival = np.array([_number(request.arrival_s) for request in batch], dtype=np.float64)
    reasons.note(~np.isfinite(arrival), "missing or unusable arrival time")
    for field in ("input_tokens", "output_tokens"):
        missing = np.array([getattr(request, field) is None for request in batch], dtype=bool)
        reasons.note(missing, f"missing field {field}")
    lengths = {
        field: np.array([_number(getattr(request, field)) for request in batch], dtype=np.float64)
        for field in ("input_tokens", "output_tokens")
    }
    text = {
        "session_id": pa.array([request.session_id for request in batch], pa.string()),
        "model": pa.array([request.model for request in batch], pa.string()),
    }
    links = {
        "turn": pa.array([request.turn for request in batch], pa.int64()),
        "request_type": pa.array([request.request_type for request in batch], pa.string()),
        "parent_id": pa.array([request.parent_id for request in batch], pa.string()),
        "request_key": pa.array([request.request_key for request in batch], pa.string()),
    }
    return checks.rows(
        np.array([request.line_no for request in batch], dtype=np.int64),
        np.array([request.request_idx for request in batch], dtype=np.int64),
        reasons,
        arrival,
        lengths,
        pa.array([request.hash_ids for request in batch], pa.list_(pa.int64())),
        text,
        line_text,
        links,
        np.array([request.block_tokens for request in batch], dtype=np.int64),
    )


def _number(value: float | int | None) -> float:
    return math.nan if value is None else float(value)


def rejected_sorted(*groups: list[BadLine]) -> list[BadLine]:
    """Quarantine entries of several sources in line order."""
    return sorted((bad for group in groups for bad in group), key=lambda bad: bad.line_no)
