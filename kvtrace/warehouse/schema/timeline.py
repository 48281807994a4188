"""Profiler timelines: one row per complete event of a Kineto (Chrome trace) file, and one
row per counter value on a profiler's clock (Kineto counter events, named-counter JSONL)."""

from __future__ import annotations

import pyarrow as pa

from kvtrace.warehouse.schema.core import TableSpec

__all__ = ["TIMELINE_COUNTERS", "TIMELINE_EVENTS"]

TIMELINE_EVENTS = TableSpec(
    "timeline_events",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("rank", pa.int32()),
            ("event_idx", pa.int64()),  # the event's place in traceEvents
            ("pid", pa.string()),
            ("tid", pa.string()),
            ("stream", pa.int64()),  # CUDA stream of GPU events, else NULL
            ("device", pa.int64()),
            ("category", pa.string()),
            ("name", pa.string()),
            ("ts_us", pa.float64()),
            ("dur_us", pa.float64()),
            ("correlation", pa.int64()),
            ("external_id", pa.int64()),
            ("copy_kind", pa.string()),  # HtoD, DtoH, DtoD, ... for gpu_memcpy events
            ("bytes", pa.int64()),
            ("wait_on_stream", pa.int64()),  # a Stream Wait Event's stream waited on
            ("wait_on_correlation", pa.int64()),  # ... and its cudaEventRecord's correlation
            ("memory_bw_gbps", pa.float64()),  # a copy's bandwidth as the profiler gave it
        ]
    ),
    partition_by=("run_id",),
    sort_by=("ts_us",),
    # ts_us too: two captures of one rank in one run are different records
    record_key=("rank", "event_idx", "ts_us"),
    record_key_nullable=("rank",),  # a one-process trace names no rank
)

TIMELINE_COUNTERS = TableSpec(
    "timeline_counters",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("rank", pa.int32()),  # NULL for a one-process trace, as timeline_events
            ("pid", pa.string()),
            ("counter", pa.string()),  # a Kineto "C" event's name; a JSONL record's name
            ("series", pa.string()),  # the key inside a "C" event's args; NULL from JSONL
            ("labels", pa.string()),  # JSON object text, keys sorted, "{}" when none
            ("ts_us", pa.float64()),  # on the trace's clock, as timeline_events.ts_us
            ("value", pa.float64()),
            ("source", pa.string()),  # 'kineto' or 'jsonl'
            ("event_idx", pa.int64()),  # the record's place in its file
        ]
    ),
    partition_by=("run_id",),
    sort_by=("ts_us",),
    # one "C" event is one record per series; ts_us tells two captures of a rank apart
    record_key=("rank", "event_idx", "series", "ts_us"),
    record_key_nullable=("rank", "series"),
)
