"""HTA's answers and kvtrace's ``definitions := 'hta'`` answers to the same questions (on
one folder of traces; for each run of a warehouse), in one shape, and the differences
between them in words.

Each answer maps a key (a rank, a stream, a kernel type, ...) to a number or a tuple of
numbers, per analysis.  HTA numbers ranks from 0 where a trace gives none; kvtrace says
-1, and the answers here use HTA's.  Analyses HTA cannot answer on a trace (it raises,
as its own checks do on some generated traces) are left out of its answers, and only
those it gives are compared.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import duckdb

from tests.timeline.hta_quiet import quiet_hta

Answers = dict[str, dict[Any, Any]]

# analyses compared on every trace, in the order they are reported
ANALYSES = (
    "temporal breakdown",
    "kernel type breakdown",
    "comm/comp overlap",
    "kernel launch stats",
    "queue length",
    "idle time breakdown",
    "kernel durations",
    "memory bandwidth",
    "memory bandwidth summary",
    "critical path",
)
SUMMARY = ("count", "mean", "std", "min", "25%", "50%", "75%", "max")


def hta_answers(folder: Path, annotation: str | None = None) -> Answers:
    """HTA 0.5's answers on the traces in ``folder`` (all their ranks), with the critical
    path of the first rank's first instance of ``annotation`` when one is given."""
    import hta.trace_analysis

    with quiet_hta():
        analysis = hta.trace_analysis.TraceAnalysis(
            trace_dir=str(folder), include_last_profiler_step=True
        )
        ranks = sorted(analysis.t.traces)
        found: Answers = {}
        offset = analysis.t.min_ts  # HTA moves the first event to 0
        kernels = functools.cache(  # the type table and the per-kernel table at once
            lambda: analysis.get_gpu_kernel_breakdown(
                visualize=False, include_memory_kernels=True, num_kernels=10**9
            )
        )
        steps: list[tuple[str, Callable[[], dict[Any, Any]]]] = [
            ("temporal breakdown", lambda: _temporal(analysis)),
            ("kernel type breakdown", lambda: _kernel_types(kernels()[0])),
            ("comm/comp overlap", lambda: _overlap(analysis)),
            ("kernel launch stats", lambda: _launches(analysis, ranks)),
            ("queue length", lambda: _queues(analysis, ranks, offset)),
            ("idle time breakdown", lambda: _idle(analysis, ranks)),
            ("kernel durations", lambda: _durations(kernels()[1])),
            ("memory bandwidth", lambda: _bandwidth(analysis, ranks, offset)),
            ("memory bandwidth summary", lambda: _bandwidth_summary(analysis, ranks)),
        ]
        if annotation is not None:
            steps.append(("critical path", lambda: _critical_path(analysis, ranks, annotation)))
        for name, answer in steps:
            try:
                found[name] = answer()
            except (AssertionError, ValueError, KeyError, IndexError, TypeError):
                continue  # HTA gives no answer on this trace
    return found


def _temporal(analysis: Any) -> dict[Any, Any]:
    table = analysis.get_temporal_breakdown(visualize=False)
    return {
        int(row["rank"]): (
            row["kernel_time(us)"],
            row["idle_time(us)"],
            row["compute_time(us)"],
            row["non_compute_time(us)"],
        )
        for row in table.to_dict("records")
    }


def _kernel_types(types: Any) -> dict[Any, Any]:
    return {
        kind.lower(): float(total)
        for kind, total in zip(types["kernel_type"], types["sum"], strict=True)
        if total != 0
    }


def _overlap(analysis: Any) -> dict[Any, Any]:
    table = analysis.get_comm_comp_overlap(visualize=False)
    return {
        int(row["rank"]): row["comp_comm_overlap_pctg"]
        for row in table.to_dict("records")
        if not math.isnan(row["comp_comm_overlap_pctg"])
    }


def _launches(analysis: Any, ranks: list[int]) -> dict[Any, Any]:
    found = analysis.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
    return {
        rank: sorted(
            zip(
                table["cpu_duration"].astype(float),
                table["gpu_duration"].astype(float),
                table["launch_delay"].astype(float),
                strict=True,
            )
        )
        for rank, table in found.items()
        if len(table)
    }


def _queues(analysis: Any, ranks: list[int], offset: float) -> dict[Any, Any]:
    found = {}
    for rank, series in analysis.get_queue_length_time_series(ranks=ranks).items():
        points = series.reset_index(drop=True)
        points["ts"] = points["ts"] + offset
        grouped = points.groupby(["stream", "ts"], sort=True)["queue_length"]
        last, peak = grouped.last(), grouped.max()
        found[rank] = sorted(
            (int(stream), float(ts), int(last[(stream, ts)]), int(peak[(stream, ts)]))
            for stream, ts in last.index
        )
    return found


def _idle(analysis: Any, ranks: list[int]) -> dict[Any, Any]:
    table, _ = analysis.get_idle_time_breakdown(ranks=ranks, visualize=False)
    return {
        (int(row["rank"]), int(row["stream"]), row["idle_category"]): float(row["idle_time"])
        for row in table.to_dict("records")
        if row["idle_time"] != 0
    }


def _durations(kernels: Any) -> dict[Any, Any]:
    return {
        (int(row["rank"]), row["kernel_type"].lower(), row["name"]): (
            float(row["sum (us)"]),
            float(row["max (us)"]),
            float(row["min (us)"]),
            float(row["mean (us)"]),
            float(row["stddev"]),
        )
        for row in kernels.to_dict("records")
    }


def _bandwidth(analysis: Any, ranks: list[int], offset: float) -> dict[Any, Any]:
    return {
        rank: [
            (name, float(ts) + offset, float(gbps))
            for name, ts, gbps in zip(
                series["name"], series["ts"], series["memory_bw_gbps"], strict=True
            )
        ]
        for rank, series in analysis.get_memory_bw_time_series(ranks=ranks).items()
    }


def _bandwidth_summary(analysis: Any, ranks: list[int]) -> dict[Any, Any]:
    summary = analysis.get_memory_bw_summary(ranks=ranks)
    if summary is None:
        return {}
    statistics = summary["memory_bw_gbps"]
    return {
        (int(rank), name): tuple(_none_for_nan(statistics.loc[(rank, name), s]) for s in SUMMARY)
        for rank, name in statistics.index
    }


def _critical_path(analysis: Any, ranks: list[int], annotation: str) -> dict[Any, Any]:
    graph, succeeded = analysis.critical_path_analysis(
        rank=ranks[0], annotation=annotation, instance_id=0
    )
    assert succeeded
    edges: dict[Any, int] = {}
    for row in graph.get_critical_path_breakdown().to_dict("records"):
        edge = (
            row["type"].removeprefix("critical_path_"),
            None if math.isnan(row["event_idx"]) else int(row["event_idx"]),
            float(row["duration"]),
            row["bound_by"] or None,
        )
        edges[edge] = edges.get(edge, 0) + 1
    return edges


def _none_for_nan(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def kvtrace_answers(con: duckdb.DuckDBPyConnection) -> dict[str, Answers]:
    """kvtrace's answers with ``definitions := 'hta'``, per run of the warehouse behind
    ``con`` (each question asked once for all runs)."""
    found: dict[str, Answers] = {}

    def add(analysis: str, query: str, row: Callable[..., tuple[Any, Any]]) -> None:
        for run_id, *values in con.sql(query).fetchall():
            key, value = row(*values)
            found.setdefault(run_id, {}).setdefault(analysis, {})[key] = value

    def append(analysis: str, query: str) -> None:
        for run_id, rank, *values in con.sql(query).fetchall():
            series = found.setdefault(run_id, {}).setdefault(analysis, {})
            series.setdefault(_rank(rank), []).append(tuple(values))

    hta = "definitions := 'hta'"
    add(
        "temporal breakdown",
        "SELECT run_id, rank, kernel_time_us, idle_us, compute_us, non_compute_us "
        f"FROM timeline_temporal_breakdown({hta})",
        lambda rank, *values: (_rank(rank), tuple(values)),
    )
    add(
        "kernel type breakdown",
        f"SELECT run_id, kernel_type, sum(total_us) FROM timeline_kernel_breakdown({hta}) "
        "WHERE kernel_type <> 'other' GROUP BY ALL HAVING sum(total_us) <> 0",
        lambda kind, total: (kind, total),
    )
    add(
        "comm/comp overlap",
        f"SELECT run_id, rank, overlap_share FROM timeline_comm_comp_overlap({hta}) "
        "WHERE overlap_share IS NOT NULL",
        lambda rank, share: (_rank(rank), round(100 * share, 2)),
    )
    append(
        "kernel launch stats",
        "SELECT run_id, rank, launch_us, kernel_us, launch_delay_us "
        f"FROM timeline_launches({hta}) ORDER BY ALL",
    )
    append(
        "queue length",
        "SELECT run_id, rank, stream, window_us, queued, peak "
        f"FROM timeline_queue_length(1, {hta}) ORDER BY ALL",
    )
    add(
        "idle time breakdown",
        f"UNPIVOT (SELECT run_id, rank, stream, host_wait_us AS host_wait, "
        f"kernel_wait_us AS kernel_wait, other_us AS other FROM timeline_idle_breakdown({hta})) "
        "ON host_wait, kernel_wait, other INTO NAME category VALUE idle_us",
        lambda rank, stream, category, idle: ((_rank(rank), stream, category), idle),
    )
    add(
        "kernel durations",
        "SELECT run_id, rank, kernel_type, name, total_us, max_us, min_us, mean_us, std_us "
        f"FROM timeline_kernel_durations({hta}) WHERE kernel_type <> 'other'",
        lambda rank, kind, name, *values: ((_rank(rank), kind, name), tuple(values)),
    )
    append(
        "memory bandwidth",
        "SELECT run_id, rank, memory_type, t_us, bandwidth_gbps "
        f"FROM timeline_memory_bandwidth({hta})",
    )
    add(
        "memory bandwidth summary",
        "SELECT run_id, rank, memory_type, points, mean_gbps, std_gbps, min_gbps, p25_gbps, "
        f"p50_gbps, p75_gbps, max_gbps FROM timeline_memory_bandwidth_summary({hta})",
        lambda rank, name, *values: ((_rank(rank), name), tuple(values)),
    )
    for answers in found.values():  # HTA leaves out the gaps that sum to nothing
        idle = answers.get("idle time breakdown", {})
        answers["idle time breakdown"] = {k: v for k, v in idle.items() if v != 0}
    return found


def kvtrace_critical_paths(
    con: duckdb.DuckDBPyConnection, annotation: str
) -> dict[str, dict[Any, int]]:
    """The edges of each run's critical path (instance 0 of ``annotation``), counted."""
    found: dict[str, dict[Any, int]] = {}
    for run_id, *edge in con.execute(
        "SELECT run_id, edge_type, event_idx, duration_us, bound_by "
        "FROM timeline_critical_path(annotation := ?, definitions := 'hta')",
        [annotation],
    ).fetchall():
        edges = found.setdefault(run_id, {})
        edges[tuple(edge)] = edges.get(tuple(edge), 0) + 1
    return found


def _rank(rank: int) -> int:
    """HTA's number for a rank: 0 where the trace gives none."""
    return 0 if rank == -1 else rank


def differences(trace: str, ours: Answers, theirs: Answers) -> list[str]:
    """One sentence per analysis whose answers differ: the analysis, the trace, the first
    key that differs and both numbers there."""
    found = []
    for analysis in ANALYSES:
        if analysis not in theirs:
            continue
        mine, other = ours.get(analysis, {}), theirs[analysis]
        for key in sorted(set(mine) | set(other), key=repr):
            a, b = mine.get(key), other.get(key)
            if not _close(a, b):
                where = ""
                if isinstance(a, list) and isinstance(b, list):
                    where = f" ({_first_difference(a, b)})"
                found.append(
                    f"{analysis} on {trace}, {key!r}: kvtrace {_shown(a)}, HTA {_shown(b)}{where}"
                )
                break
    return found


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)
    return bool(a == b)


def _shown(value: Any) -> str:
    """A value for a message: a long list by its length and first items."""
    if isinstance(value, list) and len(value) > 6:
        return f"[{len(value)} items: {', '.join(map(repr, value[:6]))}, ...]"
    return repr(value)


def _first_difference(a: Iterable[Any], b: Iterable[Any]) -> str:
    """Where two lists part, in words."""
    for place, (x, y) in enumerate(zip(a, b, strict=False)):
        if not _close(x, y):
            return f"item {place}: {x!r} against {y!r}"
    return "one list is longer"
