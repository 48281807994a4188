"""Rows of the serving tables from source records, with every field checked.

A record's fields are found under the names of docs/design.md or their usual aliases
(first match wins) and converted to the column's type; a value of the wrong type or out
of range raises `FieldError`, whose message goes to the quarantine.  Ingest (JSONL
files) and the pool poller (live responses) both build their rows here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from kvtrace.warehouse.schema.serving import (
    POOL_BREAKDOWN,
    POOL_COUNTERS,
    POOL_SNAPSHOTS,
    REQUEST_METRICS,
)

__all__ = ["POOL_ALIASES", "REQUEST_ALIASES", "FieldError", "pool_row", "request_row"]

# canonical name -> accepted source names, first match wins
POOL_ALIASES: dict[str, tuple[str, ...]] = {
    "worker_id": ("worker_id", "worker", "worker_name"),
    "worker_role": ("worker_role", "role"),
    "t_s": ("t_s", "t", "elapsed_s"),
    "ts": ("ts", "timestamp", "time", "wall_time"),
    **{name: (name,) for name in (*POOL_COUNTERS, *POOL_BREAKDOWN)},
    "kvcache_mem_gb": ("kvcache_mem_gb",),
    "last_gen_throughput": ("last_gen_throughput", "gen_throughput"),
    "sessions": ("sessions",),
    "poll_latency_ms": ("poll_latency_ms",),
    "poll_error": ("poll_error", "error"),
}
REQUEST_ALIASES: dict[str, tuple[str, ...]] = {
    "request_id": ("request_id", "rid", "id"),
    "session_id": ("session_id", "session"),
    "turn_id": ("turn_id", "turn", "turn_idx"),
    "prefill_worker": ("prefill_worker", "prefill_worker_id", "p_worker"),
    "decode_worker": ("decode_worker", "decode_worker_id", "d_worker"),
    "execution_mode": ("execution_mode", "mode", "exec_mode"),
    "status": ("status", "outcome"),
    "error_type": ("error_type", "error_kind"),
    "error_message": ("error_message", "error_msg", "error"),
    "kv_transfer_blocks": ("kv_transfer_blocks", "transfer_blocks"),
    "session_reused": ("session_reused", "reused_session"),
    "cached_tokens": ("cached_tokens", "prefix_cached_tokens"),
    "input_tokens": ("input_tokens", "input_length", "prompt_tokens"),
    "output_tokens": ("output_tokens", "output_length", "completion_tokens"),
    "arrival_s": ("arrival_s", "arrival_time_s", "arrival_time", "start_s"),
    "ttft_s": ("ttft_s", "ttft"),
    "latency_s": ("latency_s", "latency", "e2e_latency_s"),
    "truncated": ("truncated", "is_truncated"),
}
_ERROR_STATUSES = {"error", "failed", "failure", "fail"}
_INT64_LIMIT = 2**63


class FieldError(ValueError):
    """A field holds a value of the wrong type or outside its range."""


def _pick(record: dict[str, Any], names: tuple[str, ...]) -> Any:
    for name in names:
        if name in record:
            return record[name]
    return None


def _as_int(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FieldError(f"{name} must be an integer, got {value!r}"[:200])
    if isinstance(value, float) and not value.is_integer():
        raise FieldError(f"{name} must be an integer, got {value!r}")
    if not -_INT64_LIMIT <= value < _INT64_LIMIT:
        raise FieldError(f"{name} is out of range: {value!r}"[:200])
    if value < 0 and (
        name.endswith("_tokens") or name.endswith("_count") or name == "kv_transfer_blocks"
    ):
        raise FieldError(f"{name} is negative: {value!r}")
    return int(value)


def _as_float(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FieldError(f"{name} must be a number, got {value!r}"[:200])
    return float(value)


def _as_text(name: str, value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise FieldError(f"{name} must be a string, got {value!r}"[:200])


def _as_bool(name: str, value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise FieldError(f"{name} must be true or false, got {value!r}"[:200])


def _as_time(name: str, value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = value / 1000 if value > 1e11 else value  # milliseconds since the epoch
        return datetime.fromtimestamp(seconds, timezone.utc)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise FieldError(f"{name} is not a time stamp: {value!r}"[:200]) from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    raise FieldError(f"{name} is not a time stamp: {value!r}"[:200])


_CONVERTERS: dict[pa.DataType, Callable[[str, Any], Any]] = {
    pa.int64(): _as_int,
    pa.float64(): _as_float,
    pa.string(): _as_text,
    pa.bool_(): _as_bool,
    pa.timestamp("us", tz="UTC"): _as_time,
}


def pool_row(record: dict[str, Any]) -> dict[str, Any]:
    """A pool_snapshots row from a record using the documented names or their aliases."""
    row = {}
    for column, names in POOL_ALIASES.items():
        value = _pick(record, names)
        if column == "sessions":
            row[column] = None if value is None else json.dumps(value, sort_keys=True)
            continue
        if column == "t_s" and value is None:
            continue
        kind = POOL_SNAPSHOTS.schema.field(column).type
        row[column] = _CONVERTERS[kind](column, value)
    if row.get("worker_id") is None:
        raise FieldError("missing field worker_id")
    return row


def request_row(record: dict[str, Any]) -> dict[str, Any]:
    """A request_metrics row, with the status normalised to ``ok`` or ``error``."""
    row = {}
    for column, names in REQUEST_ALIASES.items():
        kind = REQUEST_METRICS.schema.field(column).type
        row[column] = _CONVERTERS[kind](column, _pick(record, names))
    if row["status"] is None:
        row["status"] = "error" if row["error_type"] or row["error_message"] else "ok"
    row["status"] = row["status"].lower()
    if row["status"] in _ERROR_STATUSES:
        row["status"] = "error"
    return row
