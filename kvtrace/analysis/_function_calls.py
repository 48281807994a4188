"""The rows of the analysis functions whose constant arguments make a spec first: each
takes a cursor and the SQL call's arguments (`kvtrace.analysis.function_specs` names
them), builds the what-if's or the prefix cache's spec and returns its rows."""

from __future__ import annotations

from typing import Any

import duckdb

from kvtrace.analysis.prefix_cache import PrefixCurveSpec


def _prefix_spec(
    policy: str,
    capacities: list[int] | None,
    semantics: str,
    weight: str,
    warmup: float,
    capacity_bytes: list[int] | None,
    bytes_per_token: float | None,
    model: str | None,
) -> PrefixCurveSpec:
    return PrefixCurveSpec(
        policy=policy,
        capacities=tuple(capacities or []),
        semantics=semantics,
        weight=weight,
        warmup=warmup,
        capacity_bytes=tuple(capacity_bytes or []),
        bytes_per_token=bytes_per_token,
        model=model,
    )


def hit_curve(
    con: duckdb.DuckDBPyConnection,
    bs: int,
    policy: str,
    granularity: str,
    scope: str,
    capacities: list[int] | None,
    sharing: str,
    sample: float,
) -> list[dict[str, Any]]:
    from kvtrace.analysis.kv_access import curves

    spec = curves.StreamSpec.checked(bs, granularity, scope, sharing, sample)
    return curves.hit_curve_rows(con, spec, policy, capacities or [])  # type: ignore[arg-type]


def reuse(
    con: duckdb.DuckDBPyConnection, bs: int, granularity: str, scope: str, sharing: str
) -> list[dict[str, Any]]:
    from kvtrace.analysis.kv_access import curves

    return curves.reuse_rows(con, curves.StreamSpec.checked(bs, granularity, scope, sharing))


def prefix_hit_curve(
    con: duckdb.DuckDBPyConnection,
    policy: str,
    capacities: list[int] | None,
    semantics: str,
    weight: str,
    warmup: float,
    capacity_bytes: list[int] | None,
    bytes_per_token: float | None,
    model: str | None,
) -> list[dict[str, Any]]:
    from kvtrace.analysis.prefix_cache import prefix_hit_curve_rows

    spec = _prefix_spec(
        policy, capacities, semantics, weight, warmup, capacity_bytes, bytes_per_token, model
    )
    return prefix_hit_curve_rows(con, spec)


def prefix_requests(
    con: duckdb.DuckDBPyConnection,
    policy: str,
    capacities: list[int] | None,
    semantics: str,
    warmup: float,
    capacity_bytes: list[int] | None,
    bytes_per_token: float | None,
    model: str | None,
    prefill_tok_s: float | None,
    cost_run: str | None,
) -> list[dict[str, Any]]:
    """Per-request rows take no weight: ``blocks``."""
    from kvtrace.analysis.prefix_cache import prefix_request_rows

    spec = _prefix_spec(
        policy, capacities, semantics, "blocks", warmup, capacity_bytes, bytes_per_token, model
    )
    return prefix_request_rows(con, spec, prefill_tok_s, cost_run)
