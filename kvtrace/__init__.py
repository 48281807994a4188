"""kvtrace: a columnar trace warehouse and query toolkit for LLM-inference research.

The public API (imported on first use, so ``import kvtrace`` stays light):

- `connect` (path) -> a DuckDB connection with every view of the warehouse;
- `Warehouse`: open or create a warehouse, write commits;
- `trace` (warehouse, run_name=...) -> a `DsaTracer` that traces DSA top-k selections
  of a running engine; `record_topk` (layer, indices, scores) reports one layer's top-k
  to it from inside the indexer; `current_tracer` () -> the open one, if any;
  `DsaTracer`: the tracer itself;
- `KvtraceError`: what the library raises, with one sentence for the user;
- `charts`: every report's charts as Altair charts (`kvtrace.charts.names()`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvtrace._version import __version__
from kvtrace.errors import KvtraceError

_LAZY = {
    "Warehouse": "kvtrace.warehouse",
    "connect": "kvtrace.analysis",
    "DsaTracer": "kvtrace.collectors.dsa_tracer",
    "trace": "kvtrace.collectors.tracing",
    "record_topk": "kvtrace.collectors.tracing",
    "current_tracer": "kvtrace.collectors.tracing",
}
_SUBMODULES = ("charts",)  # imported on first use too

if TYPE_CHECKING:
    from kvtrace import charts
    from kvtrace.analysis import connect
    from kvtrace.collectors.dsa_tracer import DsaTracer
    from kvtrace.collectors.tracing import current_tracer, record_topk, trace
    from kvtrace.warehouse import Warehouse


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"kvtrace.{name}")
    raise AttributeError(f"module 'kvtrace' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names with the lazy ones, so that ``dir`` and a notebook's completion
    show them (nothing is imported)."""
    return sorted({*globals(), *_LAZY, *_SUBMODULES})


__all__ = [
    "DsaTracer",
    "KvtraceError",
    "Warehouse",
    "__version__",
    "charts",
    "connect",
    "current_tracer",
    "record_topk",
    "trace",
]
