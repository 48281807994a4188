"""Profiler rows as trace events: `timeline_events` as complete events and
`timeline_counters` as counters, on the profiler's clock, in one process per (rank, pid)
of each run.

An event keeps its tid (a number where the stored text is one), name, category, start
and duration as stored, and its ids, stream, device, bytes and bandwidth under the args
keys Kineto writes (PyTorch's profiler, libkineto ``output_json.cpp``: ``stream``,
``device``, ``correlation``, ``External id``, ``bytes``, ``wait_on_stream``,
``wait_on_cuda_event_record_corr_id``, ``memory bandwidth (GB/s)``), so kvtrace's own
Kineto reader reads the file back into the same rows.  Its pid is the export's (each
process is named after its run, rank and stored pid).
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from kvtrace.export._run import RunExport, write_counter_groups

# timeline_events column -> the args key Kineto writes it under
_ARGS = (
    ("stream", "stream"),
    ("device", "device"),
    ("correlation", "correlation"),
    ("external_id", "External id"),
    ("bytes", "bytes"),
    ("wait_on_stream", "wait_on_stream"),
    ("wait_on_correlation", "wait_on_cuda_event_record_corr_id"),
    ("memory_bw_gbps", "memory bandwidth (GB/s)"),
)
_FIRST_ARG = 7  # where the args columns start in a profiler_events row


def register_processes(run: RunExport) -> None:
    """Number the run's profiler processes (rank, then stored pid) into
    ``run.profiler_pids`` and name their GPU streams' threads."""
    pids = run.profiler_pids
    for rank, pid in run.all_rows("profiler_processes"):
        rank_part = [f"rank {rank}"] if rank is not None else []
        pid_part = [f"pid {pid}"] if pid is not None else []  # named counters need none
        name = " · ".join([run.run_name, *rank_part, *pid_part])
        pids[rank, pid] = run.writer.process((run.run_id, "profiler", rank, pid), name)
    for rank, pid, tid, stream in run.all_rows("profiler_streams"):
        run.writer.thread(pids[rank, pid], tid_value(tid), f"stream {stream}")


def write_events(run: RunExport) -> int:
    """The run's profiler events as complete events; returns how many."""
    pids, written = run.profiler_pids, 0
    for rows in run.rows("profiler_events"):
        events = []
        for row in rows:
            rank, pid, tid, category, name, ts, dur = row[:_FIRST_ARG]
            event: dict[str, Any] = {
                "ph": "X",
                "name": name,
                "pid": pids[rank, pid],
                "tid": tid_value(tid),
                "ts": ts,
                "dur": dur,
            }
            if category is not None:
                event["cat"] = category
            args = {
                key: value
                for (_, key), value in zip(_ARGS, row[_FIRST_ARG:], strict=True)
                if value is not None
            }
            if args:
                event["args"] = args
            events.append(event)
        run.writer.write(events)
        written += len(events)
    return written


def write_counters(run: RunExport) -> int:
    """The run's profiler counters: one counter event per stored counter event (its
    series as its args keys; a JSONL counter's under ``value``), named by the counter
    and its labels; returns how many."""
    pids = run.profiler_pids
    return write_counter_groups(
        run,
        "profiler_counters",
        group=lambda row: (row[0], row[1], row[2], row[4], row[5], row[7]),
        event=lambda row: {
            "ph": "C",
            "name": row[2] + labels_suffix(row[4]),
            "pid": pids[row[0], row[1]],
            "ts": row[5],
        },
        arg=lambda row: (row[3] if row[3] is not None else "value", row[6]),
    )


@cache
def tid_value(tid: str) -> int | str:
    """A stored tid as the trace gives it: a number where the text is one (Kineto's
    thread and stream ids), else the text."""
    try:
        number = int(tid)
    except (TypeError, ValueError):
        return tid
    return number if str(number) == tid else tid


@cache
def labels_suffix(labels: str | None) -> str:
    """Labels (JSON object text) as ``{key=value,...}`` after a counter's name; nothing
    when there are none."""
    if not labels:
        return ""
    try:
        parsed = json.loads(labels)
    except ValueError:
        return labels
    if not isinstance(parsed, dict) or not parsed:
        return ""
    return "{" + ",".join(f"{key}={value}" for key, value in sorted(parsed.items())) + "}"
