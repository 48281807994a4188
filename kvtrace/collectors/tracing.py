"""The public tracing API: `trace` opens a tracer, `record_topk` reports to it.

``kvtrace.trace(...)`` makes a `DsaTracer` the process's current one, so an indexer deep
inside a model reports its top-k with ``kvtrace.record_topk(layer, indices, scores)``
and needs no tracer handed down to it; without an open tracer the call does nothing.
"""

from __future__ import annotations

import os
from typing import Any

from kvtrace.collectors._dsa_record import CURRENT
from kvtrace.collectors.dsa_tracer import DsaTracer
from kvtrace.errors import InputError
from kvtrace.warehouse import Warehouse

__all__ = ["current_tracer", "record_topk", "trace"]


def trace(
    warehouse: Warehouse | str | os.PathLike[str],
    *,
    run_name: str,
    dataset: str = "unknown",
    **options: Any,
) -> DsaTracer:
    """Open a `DsaTracer` on ``warehouse`` (a `Warehouse`, or a folder or URI, created
    when missing) and make it the one `record_topk` reports to, until it is closed.

    ``options`` are `DsaTracer`'s (block_sizes, topk, prefill, all_ranks, ...).  Use it
    as a context manager: leaving the block, however, commits every completed step."""
    if CURRENT:
        raise InputError(f"a trace is already open ({CURRENT[0].run_name}); close it first")
    if not isinstance(warehouse, Warehouse):
        warehouse = Warehouse(os.fspath(warehouse), create=True)
    tracer = DsaTracer(warehouse, run_name=run_name, dataset=dataset, **options)
    CURRENT.append(tracer)
    return tracer


def record_topk(
    layer_id: int, indices: Any, scores: Any = None, *, kv_group: int | None = None
) -> None:
    """Report one layer's top-k (or, with ``kv_group``, one KV group's) to the open trace
    (`DsaTracer.record_topk`); a no-op when no trace is open or no step is running."""
    if CURRENT:
        CURRENT[0].record_topk(layer_id, indices, scores, kv_group=kv_group)


def current_tracer() -> DsaTracer | None:
    """The open trace, if any."""
    return CURRENT[0] if CURRENT else None
