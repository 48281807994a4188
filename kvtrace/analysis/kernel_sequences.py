"""Frequent CUDA kernel sequences (``timeline_kernel_sequences``), as HTA 0.5's
``get_frequent_cuda_kernel_sequences`` finds them.

The roots are the CPU events whose name contains ``operator`` at the shallowest depth
any such event has, with at least ``min_pattern_len`` kernels beneath them.  A root's
pattern is its name followed by the names of the GPU events its calls launched, in
start order; patterns are counted with the GPU time of their kernels and the CPU time
of their roots.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import duckdb
import numpy as np

from kvtrace.analysis.timeline_stacks import (
    call_stacks,
    cpu_gpu_links,
    descendants,
    load_rank,
    rank_groups,
)
from kvtrace.errors import InputError


def kernel_sequence_rows(
    con: duckdb.DuckDBPyConnection, operator: str, min_pattern_len: int, top_k: int | None
) -> list[dict[str, Any]]:
    """Per run and rank, the ``top_k`` most frequent patterns (all when NULL)."""
    if not operator:
        raise InputError("timeline_kernel_sequences needs an operator name (or part of one)")
    if top_k is not None and top_k < 1:
        raise InputError(f"top_k must be at least 1, got {top_k}")
    rows: list[dict[str, Any]] = []
    for run_id, rank in rank_groups(con):
        found = _patterns(con, run_id, rank, operator, min_pattern_len)
        ordered = sorted(found.items(), key=lambda item: (-item[1][0], item[0]))
        for place, (pattern, (count, gpu_us, cpu_us)) in enumerate(ordered[:top_k], 1):
            rows.append(
                {
                    "run_id": run_id,
                    "rank": rank,
                    "place": place,
                    "pattern": pattern,
                    "kernels": pattern.count("|"),
                    "count": count,
                    "gpu_kernel_us": gpu_us,
                    "cpu_op_us": cpu_us,
                }
            )
    return rows


def _patterns(
    con: duckdb.DuckDBPyConnection, run_id: str, rank: int, operator: str, min_pattern_len: int
) -> dict[str, tuple[int, float, float]]:
    events = load_rank(con, run_id, rank)
    links = cpu_gpu_links(events)
    stacks = call_stacks(events, np.arange(len(events)), links)
    candidates = [row for row, name in enumerate(events.name) if operator in name]
    if not candidates:
        return {}
    shallowest = min(int(stacks.depth[row]) for row in candidates)
    found: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for row in candidates:
        if stacks.depth[row] != shallowest:
            continue
        kernels = [r for r in descendants(stacks, row) if events.is_gpu[r]]
        if len(kernels) < min_pattern_len:
            continue
        kernels.sort(key=lambda r: (events.ts[r], r))
        pattern = "|".join([events.name[row], *(events.name[r] for r in kernels)])
        totals = found[pattern]
        totals[0] += 1
        totals[1] += float(events.dur[kernels].sum())
        totals[2] += float(events.dur[row])
    return {pattern: (int(n), gpu, cpu) for pattern, (n, gpu, cpu) in found.items()}
