"""Run-level answers from the simulated units: hit curves and reuse-distance histograms.

These back the SQL macros ``dsa_hit_curve`` and ``dsa_reuse`` (``queries/dsa_access.sql``)
and the ``kvtrace whatif`` command.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from kvtrace.analysis._columns import HIT_CURVE
from kvtrace.analysis.kv_access import DEFAULT_WINDOW_TOKENS, Policy
from kvtrace.analysis.kv_access._passes import grid
from kvtrace.analysis.kv_access.plan import RunPlan, StreamSpec, run_plans
from kvtrace.analysis.kv_access.simulate import RunOutcome, simulate_run
from kvtrace.analysis.policies import block_policies, policy_named
from kvtrace.errors import InputError, QueryError

__all__ = [
    "RunCurve",
    "StreamSpec",
    "check_policy",
    "hit_curve_rows",
    "hit_curve_table",
    "reuse_rows",
    "run_curves",
]


def check_policy(
    policy: str, capacities: Sequence[int] = (), window_tokens: int = DEFAULT_WINDOW_TOKENS
) -> None:
    """Raise `QueryError` with one sentence for a policy, capacity or window the what-if
    cannot take."""
    names = block_policies()
    if policy not in names:
        raise QueryError(f"unknown policy {policy!r}; expected one of " + ", ".join(names))
    bad = [c for c in capacities if c is None or c < 1]
    if bad:
        raise QueryError(f"capacities must be at least 1 item, got {bad[0]}")
    if window_tokens is None or window_tokens < 0:
        raise QueryError(f"the window must be 0 or more tokens, got {window_tokens}")


@dataclass
class RunCurve:
    """One run's accesses and hits at each capacity, plus what the what-if needs."""

    plan: RunPlan
    accesses: int
    largest_working_set: int
    capacities: np.ndarray
    hits: np.ndarray
    shared_hits: np.ndarray
    distance_hist: np.ndarray | None  # LRU only: summed over the run's units
    shared_hist: np.ndarray | None
    first_touches: int
    outcome: RunOutcome

    @property
    def run_id(self) -> str:
        return self.plan.run_id


def default_threads() -> int:
    """Threads a scope-request simulation reads and simulates its windows on."""
    return max(1, min(os.cpu_count() or 1, 8))


def run_curves(
    con: duckdb.DuckDBPyConnection,
    spec: StreamSpec,
    policy: Policy,
    capacities: Sequence[int] = (),
    tier_limits: Sequence[int] = (),
    runs: Sequence[str] | None = None,
    requests: tuple[int, int] | None = None,
    threads: int | None = None,
    window_tokens: int = DEFAULT_WINDOW_TOKENS,
) -> Iterator[RunCurve]:
    """Simulate ``policy`` over the access stream of every run (or of ``runs``), one run
    at a time (of its request indices ``requests`` only, when given; ``window_tokens``
    sizes the sliding window)."""
    spec.check()
    check_policy(policy, capacities, window_tokens)
    chosen = policy_named(policy)
    if spec.sample < 1 and (chosen.block_pass != "stack_distance" or len(tier_limits)):
        raise QueryError(
            "sampling (SHARDS) estimates LRU hit curves only: use policy lru, or sample 1"
        )
    named = np.asarray(sorted(set(int(c) for c in capacities)), dtype=np.int64)
    limits = np.asarray(tier_limits, dtype=np.int64)
    for plan in run_plans(con, spec, list(runs) if runs is not None else None):
        outcome = simulate_run(
            con,
            plan,
            chosen,
            named,
            limits,
            requests,
            threads or default_threads(),
            window_tokens=window_tokens,
        )
        if outcome.units:
            yield combine(plan, outcome, named)


def combine(plan: RunPlan, outcome: RunOutcome, named: np.ndarray) -> RunCurve:
    """A run's curve from its units' outcomes."""
    units = outcome.units
    span = max(u.span for u in units)
    capacities = grid(span)
    hits = np.zeros(len(capacities), dtype=np.int64)
    shared = np.zeros(len(capacities), dtype=np.int64)
    for unit in units:
        unit_hits, unit_shared = unit.at_grid(len(capacities))
        hits += unit_hits
        shared += unit_shared
    named_hits = sum((u.named_hits for u in units), np.zeros(len(named), np.int64))
    named_shared = sum((u.named_shared for u in units), np.zeros(len(named), np.int64))
    all_capacities = np.concatenate([capacities, named])
    order = np.argsort(all_capacities, kind="stable")
    all_capacities = all_capacities[order]
    keep = np.concatenate(([True], all_capacities[1:] != all_capacities[:-1]))
    return RunCurve(
        plan,
        sum(u.accesses for u in units),
        max(u.distinct for u in units),
        all_capacities[keep],
        np.concatenate([hits, named_hits])[order][keep],
        np.concatenate([shared, named_shared])[order][keep],
        _summed([u.distance_hist for u in units]),
        _summed([u.shared_hist for u in units]),
        sum(u.first_touches for u in units),
        outcome,
    )


def _summed(hists: list[np.ndarray | None]) -> np.ndarray | None:
    present = [h for h in hists if h is not None]
    if not present:
        return None
    total = np.zeros(max(len(h) for h in present), dtype=np.int64)
    for h in present:
        total[: len(h)] += h
    return total


def hit_curve_rows(
    con: duckdb.DuckDBPyConnection,
    spec: StreamSpec,
    policy: Policy,
    capacities: Sequence[int] = (),
    runs: Sequence[str] | None = None,
    window_tokens: int = DEFAULT_WINDOW_TOKENS,
) -> list[dict[str, Any]]:
    """The rows of ``dsa_hit_curve`` (see its documentation), of every run or of ``runs``."""
    rows = []
    for curve in run_curves(con, spec, policy, capacities, runs=runs, window_tokens=window_tokens):
        base = {
            "run_id": curve.run_id,
            "block_size": spec.block_size,
            "policy": policy,
            "granularity": spec.granularity,
            "scope": spec.scope,
            "sharing": spec.sharing,
        }
        for capacity, hits, shared in zip(
            curve.capacities.tolist(), curve.hits.tolist(), curve.shared_hits.tolist(), strict=True
        ):
            rows.append(
                {
                    **base,
                    "capacity_blocks": capacity,
                    "accesses": curve.accesses,
                    "hits": hits,
                    "shared_hits": shared,
                    "hit_rate": hits / curve.accesses if curve.accesses else None,
                    "missed_blocks": curve.accesses - hits,
                }
            )
    return rows


def hit_curve_table(
    con: duckdb.DuckDBPyConnection,
    specs: Sequence[StreamSpec],
    policy: Policy,
    capacities: Sequence[int] = (),
    runs: Sequence[str] | None = None,
    window_tokens: int = DEFAULT_WINDOW_TOKENS,
) -> pa.Table:
    """The rows of ``dsa_hit_curve`` for each stream of ``specs``, as one table."""
    rows = [
        row
        for spec in specs
        for row in hit_curve_rows(con, spec, policy, capacities, runs, window_tokens)
    ]
    if not rows:
        raise InputError("no DSA rows to simulate" + (" in the selected runs" if runs else ""))
    return pa.Table.from_pylist(rows, pa.schema(list(HIT_CURVE)))


def reuse_rows(con: duckdb.DuckDBPyConnection, spec: StreamSpec) -> list[dict[str, Any]]:
    """The rows of ``dsa_reuse``: per run, accesses per LRU stack distance."""
    rows = []
    for curve in run_curves(con, spec, "lru"):
        base = {
            "run_id": curve.run_id,
            "block_size": spec.block_size,
            "granularity": spec.granularity,
            "scope": spec.scope,
            "sharing": spec.sharing,
        }
        rows.append(
            {**base, "distance": None, "accesses": curve.first_touches, "shared_accesses": 0}
        )
        hist = curve.distance_hist if curve.distance_hist is not None else np.zeros(0, np.int64)
        shared = curve.shared_hist if curve.shared_hist is not None else np.zeros(0, np.int64)
        shared = np.concatenate([shared, np.zeros(max(0, len(hist) - len(shared)), np.int64)])
        for distance in np.flatnonzero(hist).tolist():
            rows.append(
                {
                    **base,
                    "distance": distance,
                    "accesses": int(hist[distance]),
                    "shared_accesses": int(shared[distance]),
                }
            )
    return rows


def capacity_for(curve: RunCurve, target: float) -> int | None:
    """The smallest capacity whose hit rate reaches ``target`` (None if none does).

    Exact for LRU (from the stack-distance histogram); otherwise the smallest of the
    curve's capacities.
    """
    if curve.accesses == 0:
        return None
    needed = int(np.ceil(target * curve.accesses - 1e-9))
    if curve.distance_hist is not None:
        reached = np.flatnonzero(np.cumsum(curve.distance_hist) >= needed)
        return int(reached[0]) + 1 if len(reached) else None
    reached = np.flatnonzero(curve.hits >= needed)
    return int(curve.capacities[reached[0]]) if len(reached) else None
