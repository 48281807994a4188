"""The SQL functions behind the analyses, installed on a connection from their registry
(`kvtrace.analysis.function_specs`: ``kvtrace_hit_curve``, ``kvtrace_reuse``,
``kvtrace_prefix_hit_curve``, ``kvtrace_prefix_requests``, ``kvtrace_cost_model``,
``kvtrace_serving_capacity``, ``kvtrace_kv_cache_fidelity``, ``kvtrace_kernel_sequences``
and ``kvtrace_critical_path``).

Each is called with constant arguments from a table macro of the SQL library
(``dsa_hit_curve``, ``dsa_reuse``, ``workload_prefix_hit_curve``,
``timing_cost_model``, ``serving_capacity``, ``kv_cache_fidelity``,
``timeline_kernel_sequences``,
``timeline_critical_path``), reads what it needs through a cursor of
the calling connection, runs the analysis and returns its rows as one list.  The compiled
kernels load on the first call, not when a connection is opened.
"""

from __future__ import annotations

import importlib
import inspect
import weakref
from collections.abc import Callable
from typing import Any

import duckdb
import pyarrow as pa
from duckdb import func

from kvtrace.analysis.function_specs import FUNCTIONS, AnalysisFunction
from kvtrace.sql.catalog import cursor_of
from kvtrace.sql.functions import duckdb_type

__all__ = ["register"]

_ARROW = func.PythonUDFType.ARROW
_NULLS_REACH_PYTHON = func.FunctionNullHandling.SPECIAL  # no model, no byte size: NULL


def _constant(column: pa.ChunkedArray) -> Any:
    return column[0].as_py() if len(column) else None


def register(con: duckdb.DuckDBPyConnection) -> None:
    """Install the analysis functions on ``con``.

    They hold ``con`` weakly: a connection that referred to itself through its own
    functions would never be freed.
    """
    connection = weakref.ref(con)

    def cursor() -> duckdb.DuckDBPyConnection:
        live = connection()
        if live is None:
            raise RuntimeError("the connection of this function was closed")
        return cursor_of(live)

    def on_constants(spec: AnalysisFunction) -> Callable[..., pa.Array]:
        """The function whose rows its implementation finds on a cursor and the call's
        arguments, each one constant (the module loads on the first call)."""
        module, name = spec.implementation.split(":")

        def function(*arguments: pa.ChunkedArray) -> pa.Array:
            analysis = getattr(importlib.import_module(module), name)
            found = analysis(cursor(), *map(_constant, arguments))
            return pa.array([found] * len(arguments[0]), pa.list_(spec.result))

        function.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [
                inspect.Parameter(f"p{i}", inspect.Parameter.POSITIONAL_ONLY)
                for i in range(len(spec.arguments))
            ]
        )  # DuckDB counts a function's parameters
        return function

    for spec in FUNCTIONS:
        con.create_function(
            spec.name,
            on_constants(spec),
            spec.argument_types,
            f"{duckdb_type(spec.result)}[]",
            type=_ARROW,
            side_effects=True,
            null_handling=_NULLS_REACH_PYTHON,
        )
