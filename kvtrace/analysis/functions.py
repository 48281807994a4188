"""The SQL functions behind the analyses: ``kvtrace_hit_curve``, ``kvtrace_reuse``,
``kvtrace_prefix_hit_curve``, ``kvtrace_prefix_requests``, ``kvtrace_cost_model``,
``kvtrace_kv_cache_fidelity``, ``kvtrace_kernel_sequences`` and ``kvtrace_critical_path``.

Each is called with constant arguments from a table macro of the SQL library
(``dsa_hit_curve``, ``dsa_reuse``, ``workload_prefix_hit_curve``,
``timing_cost_model``, ``kv_cache_fidelity``, ``timeline_kernel_sequences``,
``timeline_critical_path``), reads what it needs through a cursor of
the calling connection, runs the analysis and returns its rows as one list.  The compiled
kernels load on the first call, not when a connection is opened.
"""

from __future__ import annotations

import importlib
import inspect
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa
from duckdb import func

from kvtrace.analysis._columns import (
    COST_MODEL,
    CRITICAL_PATH,
    HIT_CURVE,
    KERNEL_SEQUENCES,
    KV_CACHE_FIDELITY,
    PREFIX_HIT_CURVE,
    PREFIX_REQUESTS,
    REUSE,
)
from kvtrace.sql.catalog import cursor_of
from kvtrace.sql.functions import duckdb_type

if TYPE_CHECKING:
    from kvtrace.analysis.prefix_cache import PrefixCurveSpec

_ARROW = func.PythonUDFType.ARROW
_NULLS_REACH_PYTHON = func.FunctionNullHandling.SPECIAL  # no model, no byte size: NULL


def _constant(column: pa.ChunkedArray) -> Any:
    return column[0].as_py() if len(column) else None


def _prefix_spec(
    policy: pa.ChunkedArray,
    capacities: pa.ChunkedArray,
    semantics: pa.ChunkedArray,
    warmup: pa.ChunkedArray,
    capacity_bytes: pa.ChunkedArray,
    bytes_per_token: pa.ChunkedArray,
    model: pa.ChunkedArray,
    weight: pa.ChunkedArray | None = None,
) -> PrefixCurveSpec:
    """The prefix-cache spec of a SQL call's (constant) arguments (per-request rows take
    no weight)."""
    from kvtrace.analysis.prefix_cache import PrefixCurveSpec

    return PrefixCurveSpec(
        policy=_constant(policy),
        capacities=tuple(_constant(capacities) or []),
        semantics=_constant(semantics),
        weight="blocks" if weight is None else _constant(weight),
        warmup=_constant(warmup),
        capacity_bytes=tuple(_constant(capacity_bytes) or []),
        bytes_per_token=_constant(bytes_per_token),
        model=_constant(model),
    )


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

    def rows(
        struct: pa.StructType, found: list[dict[str, Any]], calls: pa.ChunkedArray
    ) -> pa.Array:
        return pa.array([found] * len(calls), pa.list_(struct))

    def hit_curve(
        bs: pa.ChunkedArray,
        policy: pa.ChunkedArray,
        granularity: pa.ChunkedArray,
        scope: pa.ChunkedArray,
        capacities: pa.ChunkedArray,
        sharing: pa.ChunkedArray,
        sample: pa.ChunkedArray,
    ) -> pa.Array:
        from kvtrace.analysis.kv_access import curves

        found = curves.hit_curve_rows(
            cursor(),
            curves.StreamSpec.checked(
                _constant(bs),
                _constant(granularity),
                _constant(scope),
                _constant(sharing),
                _constant(sample),
            ),
            _constant(policy),
            _constant(capacities) or [],
        )
        return rows(HIT_CURVE, found, bs)

    def reuse(
        bs: pa.ChunkedArray,
        granularity: pa.ChunkedArray,
        scope: pa.ChunkedArray,
        sharing: pa.ChunkedArray,
    ) -> pa.Array:
        from kvtrace.analysis.kv_access import curves

        found = curves.reuse_rows(
            cursor(),
            curves.StreamSpec.checked(
                _constant(bs), _constant(granularity), _constant(scope), _constant(sharing)
            ),
        )
        return rows(REUSE, found, bs)

    def prefix_hit_curve(
        policy: pa.ChunkedArray,
        capacities: pa.ChunkedArray,
        semantics: pa.ChunkedArray,
        weight: pa.ChunkedArray,
        warmup: pa.ChunkedArray,
        capacity_bytes: pa.ChunkedArray,
        bytes_per_token: pa.ChunkedArray,
        model: pa.ChunkedArray,
    ) -> pa.Array:
        from kvtrace.analysis import prefix_cache

        spec = _prefix_spec(
            policy, capacities, semantics, warmup, capacity_bytes, bytes_per_token, model, weight
        )
        found = prefix_cache.prefix_hit_curve_rows(cursor(), spec)
        return rows(PREFIX_HIT_CURVE, found, policy)

    def prefix_requests(
        policy: pa.ChunkedArray,
        capacities: pa.ChunkedArray,
        semantics: pa.ChunkedArray,
        warmup: pa.ChunkedArray,
        capacity_bytes: pa.ChunkedArray,
        bytes_per_token: pa.ChunkedArray,
        model: pa.ChunkedArray,
        prefill_tok_s: pa.ChunkedArray,
        cost_run: pa.ChunkedArray,
    ) -> pa.Array:
        from kvtrace.analysis import prefix_cache

        spec = _prefix_spec(
            policy, capacities, semantics, warmup, capacity_bytes, bytes_per_token, model
        )
        found = prefix_cache.prefix_request_rows(
            cursor(), spec, _constant(prefill_tok_s), _constant(cost_run)
        )
        return rows(PREFIX_REQUESTS, found, policy)

    def on_constants(source: str, struct: pa.StructType, arity: int) -> Callable[..., pa.Array]:
        """A function whose rows are those ``module:function`` finds on a cursor and its
        arguments, each one constant (the module loads on the first call)."""
        module, name = source.split(":")

        def function(*arguments: pa.ChunkedArray) -> pa.Array:
            analysis = getattr(importlib.import_module(module), name)
            return rows(struct, analysis(cursor(), *map(_constant, arguments)), arguments[0])

        function.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter(f"p{i}", inspect.Parameter.POSITIONAL_ONLY) for i in range(arity)]
        )  # DuckDB counts a function's parameters
        return function

    functions: list[tuple[str, Callable[..., pa.Array] | str, list[Any], pa.StructType]] = [
        (
            "kvtrace_hit_curve",
            hit_curve,
            ["BIGINT", "VARCHAR", "VARCHAR", "VARCHAR", "BIGINT[]", "VARCHAR", "DOUBLE"],
            HIT_CURVE,
        ),
        ("kvtrace_reuse", reuse, ["BIGINT", "VARCHAR", "VARCHAR", "VARCHAR"], REUSE),
        (
            "kvtrace_prefix_hit_curve",
            prefix_hit_curve,
            [
                "VARCHAR",
                "BIGINT[]",
                "VARCHAR",
                "VARCHAR",
                "DOUBLE",
                "BIGINT[]",
                "DOUBLE",
                "VARCHAR",
            ],
            PREFIX_HIT_CURVE,
        ),
        (
            "kvtrace_prefix_requests",
            prefix_requests,
            [
                *("VARCHAR", "BIGINT[]", "VARCHAR", "DOUBLE", "BIGINT[]", "DOUBLE", "VARCHAR"),
                *("DOUBLE", "VARCHAR"),
            ],
            PREFIX_REQUESTS,
        ),
        # the rest: a module's rows on constant arguments
        (
            "kvtrace_cost_model",
            "kvtrace.analysis.cost_model:cost_model_rows",
            ["VARCHAR"],
            COST_MODEL,
        ),
        (
            "kvtrace_kv_cache_fidelity",
            "kvtrace.analysis.kv_cache_fidelity:kv_cache_fidelity_rows",
            ["VARCHAR", "BIGINT", "DOUBLE"],
            KV_CACHE_FIDELITY,
        ),
        (
            "kvtrace_kernel_sequences",
            "kvtrace.analysis.kernel_sequences:kernel_sequence_rows",
            ["VARCHAR", "BIGINT", "BIGINT"],
            KERNEL_SEQUENCES,
        ),
        (
            "kvtrace_critical_path",
            "kvtrace.analysis.critical_path:critical_path_rows",
            ["VARCHAR", "BIGINT", "VARCHAR"],
            CRITICAL_PATH,
        ),
    ]
    for name, function, arguments, struct in functions:
        con.create_function(
            name,
            on_constants(function, struct, len(arguments))
            if isinstance(function, str)
            else function,
            arguments,
            f"{duckdb_type(struct)}[]",
            type=_ARROW,
            side_effects=True,
            null_handling=_NULLS_REACH_PYTHON,
        )
