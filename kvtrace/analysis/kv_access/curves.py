"""Run-level answers from the unit outcomes: hit curves and reuse-distance histograms.

These back the SQL macros ``dsa_hit_curve`` and ``dsa_reuse`` (``queries/dsa_access.sql``)
and the ``kvtrace whatif`` command.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np

from kvtrace.analysis.kv_access import GRANULARITIES, POLICIES, SCOPES, Granularity, Policy, Scope
from kvtrace.analysis.kv_access.simulate import UnitOutcome, simulate_units
from kvtrace.analysis.kv_access.stream import read_pieces, run_layouts
from kvtrace.errors import QueryError


def check_arguments(
    block_size: int, policy: str, granularity: str, scope: str, capacities: Sequence[int] = ()
) -> None:
    """Raise `QueryError` with one sentence for an argument the what-if cannot take."""
    if block_size is None or block_size < 1:
        raise QueryError(f"the block size must be a positive number of tokens, got {block_size}")
    for name, value, allowed in (
        ("policy", policy, POLICIES),
        ("granularity", granularity, GRANULARITIES),
        ("scope", scope, SCOPES),
    ):
        if value not in allowed:
            raise QueryError(f"unknown {name} {value!r}; expected one of " + ", ".join(allowed))
    bad = [c for c in capacities if c is None or c < 1]
    if bad:
        raise QueryError(f"capacities must be at least 1 item, got {bad[0]}")


@dataclass
class RunCurve:
    """One run's accesses and hits at each capacity, plus what the whatif needs."""

    run_id: str
    accesses: int
    largest_working_set: int
    capacities: np.ndarray
    hits: np.ndarray
    distance_hist: np.ndarray | None  # LRU only: summed over the run's units
    first_touches: int
    step_ids: list[np.ndarray]
    step_tiers: list[np.ndarray]
    layers: int  # traced layers of the run (the layers one block item carries)


def run_curves(
    con: duckdb.DuckDBPyConnection,
    block_size: int,
    policy: Policy,
    granularity: Granularity,
    scope: Scope,
    capacities: Sequence[int] = (),
    tier_limits: Sequence[int] = (),
    runs: Sequence[str] | None = None,
) -> Iterator[RunCurve]:
    """Simulate ``policy`` over the access stream of every run (or of ``runs``), one run
    at a time."""
    check_arguments(block_size, policy, granularity, scope, capacities)
    named = np.asarray(sorted(set(int(c) for c in capacities)), dtype=np.int64)
    limits = np.asarray(tier_limits, dtype=np.int64)
    layouts = run_layouts(con, block_size, granularity, runs)
    pieces = read_pieces(con, block_size, granularity, scope, layouts)

    def pinned(run_id: str, request_id: int | None) -> int:
        return layouts[run_id].pinned_items(request_id, granularity)

    units: list[UnitOutcome] = []
    for unit in simulate_units(pieces, policy, named, limits, pinned):
        if units and unit.run_id != units[0].run_id:
            yield combine(units, named, len(layouts[units[0].run_id].layers))
            units = []
        units.append(unit)
    if units:
        yield combine(units, named, len(layouts[units[0].run_id].layers))


def share_units(
    con: duckdb.DuckDBPyConnection,
    block_size: int,
    policy: Policy,
    granularity: Granularity,
    scope: Scope,
    tier_limits: Sequence[int],
    run_id: str,
    requests: tuple[int, int] | None,
) -> tuple[list[UnitOutcome], int]:
    """The cache units of one share of a run (its requests with ids in ``requests``, or
    all of it), simulated as `run_curves` does; with the run's traced layers.

    The key layout is the whole run's, so the units of a run's shares, concatenated in
    request order, are those `run_curves` combines.
    """
    check_arguments(block_size, policy, granularity, scope, ())
    layouts = run_layouts(con, block_size, granularity, [run_id])
    pieces = read_pieces(con, block_size, granularity, scope, layouts, requests)
    units = list(
        simulate_units(
            pieces,
            policy,
            np.zeros(0, np.int64),
            np.asarray(tier_limits, dtype=np.int64),
            lambda run, request: layouts[run].pinned_items(request, granularity),
        )
    )
    return units, len(layouts[run_id].layers)


def combine(units: list[UnitOutcome], named: np.ndarray, layers: int) -> RunCurve:
    span = max(u.span for u in units)
    length = max(int(span) - 1, 0).bit_length() + 1
    grid = 2 ** np.arange(length, dtype=np.int64)
    hits = sum(u.hits_at_grid(length) for u in units)
    named_hits = sum(u.named_hits for u in units) if len(named) else np.zeros(0, np.int64)
    capacities = np.concatenate([grid, named])
    all_hits = np.concatenate([hits, named_hits])
    order = np.argsort(capacities, kind="stable")
    capacities, all_hits = capacities[order], all_hits[order]
    keep = np.concatenate(([True], capacities[1:] != capacities[:-1]))
    hists = [u.distance_hist for u in units if u.distance_hist is not None]
    hist = None
    if hists:
        hist = np.zeros(max(len(h) for h in hists), dtype=np.int64)
        for h in hists:
            hist[: len(h)] += h
    return RunCurve(
        units[0].run_id,
        sum(u.accesses for u in units),
        max(u.distinct for u in units),
        capacities[keep],
        all_hits[keep],
        hist,
        sum(u.first_touches for u in units),
        [u.step_ids for u in units],
        [u.step_tiers for u in units],
        layers,
    )


def hit_curve_rows(
    con: duckdb.DuckDBPyConnection,
    block_size: int,
    policy: Policy,
    granularity: Granularity,
    scope: Scope,
    capacities: Sequence[int] = (),
) -> list[dict[str, Any]]:
    """The rows of ``dsa_hit_curve`` (see its documentation)."""
    rows = []
    for curve in run_curves(con, block_size, policy, granularity, scope, capacities):
        for capacity, hits in zip(curve.capacities.tolist(), curve.hits.tolist(), strict=True):
            rows.append(
                {
                    "run_id": curve.run_id,
                    "block_size": block_size,
                    "policy": policy,
                    "granularity": granularity,
                    "scope": scope,
                    "capacity_blocks": capacity,
                    "accesses": curve.accesses,
                    "hits": hits,
                    "hit_rate": hits / curve.accesses if curve.accesses else None,
                    "missed_blocks": curve.accesses - hits,
                }
            )
    return rows


def reuse_rows(
    con: duckdb.DuckDBPyConnection, block_size: int, granularity: Granularity, scope: Scope
) -> list[dict[str, Any]]:
    """The rows of ``dsa_reuse``: per run, accesses per LRU stack distance."""
    rows = []
    for curve in run_curves(con, block_size, "lru", granularity, scope):
        base = {
            "run_id": curve.run_id,
            "block_size": block_size,
            "granularity": granularity,
            "scope": scope,
        }
        rows.append({**base, "distance": None, "accesses": curve.first_touches})
        hist = curve.distance_hist if curve.distance_hist is not None else np.zeros(0)
        for distance in np.flatnonzero(hist).tolist():
            rows.append({**base, "distance": distance, "accesses": int(hist[distance])})
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
