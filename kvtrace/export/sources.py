"""What a Perfetto export can hold: one entry per source table, in the order a run's
sources are written (and its processes numbered)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExportSource:
    """A source of trace events: its name (``--source``), the tables it reads and what
    its rows become in the trace."""

    name: str
    reads: str
    becomes: str


SOURCES: tuple[ExportSource, ...] = (
    ExportSource(
        "profiler",
        "timeline_events",
        "complete events (X) with their tid, stream and Kineto args, one process per "
        "(rank, pid), on the profiler's clock",
    ),
    ExportSource(
        "counters",
        "timeline_counters",
        "counter tracks (C) in the process of their (rank, pid), on the profiler's clock",
    ),
    ExportSource(
        "dsa",
        "dsa_steps, dsa_prefill",
        "a thread per layer with a slice per decode step (and prefill step), and counters "
        "unique blocks and fetch bytes per layer",
    ),
    ExportSource(
        "pool",
        "pool_snapshots",
        "counter tracks per worker (capacity, held, available, other, ... tokens); a "
        "failed poll as an instant",
    ),
    ExportSource(
        "engine",
        "engine_metrics",
        "a counter track per worker and series (counters, gauges, histograms' _sum and "
        "_count), as scraped",
    ),
    ExportSource(
        "serving",
        "serving_counters",
        "a counter track per worker and quantity in kvtrace's terms (and part): a gauge's "
        "value, a counter's increases since the run began",
    ),
    ExportSource(
        "kv",
        "kv_events",
        "a counter track of resident blocks per worker and medium (kv_pool_residency)",
    ),
    ExportSource(
        "requests",
        "request_timings, request_metrics, requests",
        "a slice per request from arrival to its end, TTFT nested in it, on lanes",
    ),
)

SOURCE_NAMES: tuple[str, ...] = tuple(source.name for source in SOURCES)


def source_help() -> str:
    """The ``--source`` choices with the tables each reads."""
    return ", ".join(f"{s.name} ({s.reads})" for s in SOURCES)
