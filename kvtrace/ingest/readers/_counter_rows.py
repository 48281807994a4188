"""Rows of ``timeline_counters``, as the Kineto reader and the named-counter JSONL reader
both build them: one value of one counter (and series) at one time on a profiler's clock.

A value is any finite JSON number (a boolean is not one); a time any finite number of
microseconds within `EXACT_LIMIT`.  Labels are stored as JSON text with their keys
sorted, so equal label sets compare equal in SQL.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass

import pyarrow as pa

from kvtrace.ingest._values import BadValue, finite_number
from kvtrace.warehouse.schema.timeline import TIMELINE_COUNTERS

NO_LABELS = "{}"
_FLOAT_MAX = sys.float_info.max
# the columns that tell two counter values of a file apart, besides their place in it
DIGESTED = ("pid", "counter", "series", "labels", "ts_us", "value")


@dataclass(frozen=True, slots=True)
class CounterRow:
    """One counter value, before its run and rank are known."""

    event_idx: int
    pid: str | None
    counter: str
    series: str | None
    labels: str
    ts_us: float
    value: float


def is_plain_value(value: object) -> bool:
    """Whether ``value`` is a number a float64 holds (the common case, checked fast)."""
    if type(value) is float:
        return math.isfinite(value)
    return type(value) is int and -_FLOAT_MAX <= value <= _FLOAT_MAX


def counter_value(name: str, value: object) -> float:
    """``value`` as a float: any finite JSON number; raises `BadValue` otherwise."""
    return finite_number(name, _within_floats(name, value), limit=_FLOAT_MAX)


def counter_time(name: str, value: object) -> float:
    """A time stamp in microseconds; raises `BadValue` unless a finite number within
    the range a float64 holds to the microsecond exactly."""
    return finite_number(name, _within_floats(name, value))


def _within_floats(name: str, value: object) -> object:
    """``value``, unless an integer too large for a float64 (JSON allows any)."""
    if type(value) is int and not -_FLOAT_MAX <= value <= _FLOAT_MAX:
        raise BadValue(f"{name} is out of range: {value!r}"[:200])
    return value


def labels_text(labels: object) -> str:
    """Labels as JSON text, keys sorted (``{}`` for none); raises `BadValue` unless an
    object whose values are text, numbers or booleans."""
    if labels is None:
        return NO_LABELS
    if not isinstance(labels, dict):
        raise BadValue(f"labels must be an object, got {labels!r}"[:200])
    nested = [key for key, value in labels.items() if isinstance(value, (dict, list))]
    if nested:
        raise BadValue(f"labels must map names to text or numbers; {nested[0]!r} does not")
    return json.dumps(labels, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def counter_table(rows: list[CounterRow], rank: int | None, source: str) -> pa.Table:
    """``rows`` as a ``timeline_counters`` batch (run_id left empty for the sink)."""
    count = len(rows)
    columns = {
        "run_id": pa.nulls(count, pa.string()),
        "rank": pa.repeat(pa.scalar(rank, pa.int32()), count),
        "pid": pa.array([row.pid for row in rows], pa.string()),
        "counter": pa.array([row.counter for row in rows], pa.string()),
        "series": pa.array([row.series for row in rows], pa.string()),
        "labels": pa.array([row.labels for row in rows], pa.string()),
        "ts_us": pa.array([row.ts_us for row in rows], pa.float64()),
        "value": pa.array([row.value for row in rows], pa.float64()),
        "source": pa.repeat(pa.scalar(source, pa.string()), count),
        "event_idx": pa.array([row.event_idx for row in rows], pa.int64()),
    }
    return pa.table(columns, schema=TIMELINE_COUNTERS.schema)


__all__ = [
    "DIGESTED",
    "NO_LABELS",
    "CounterRow",
    "counter_table",
    "counter_time",
    "counter_value",
    "is_plain_value",
    "labels_text",
]
