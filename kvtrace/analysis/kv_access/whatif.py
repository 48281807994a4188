"""The tier what-if: which tier serves each decode step's KV reads, how many bytes, how fast.

Tiers are listed fastest first, each with a capacity (items of the granularity), a
bandwidth (GB/s, 10^9 bytes per second) and a latency per read (µs); the last tier is
unbounded and holds everything (first touches are read from it).  An access is served by
the first tier whose capacity, added to those of the tiers above it, would hit it under
the policy: for LRU that is an exclusive LRU hierarchy (what `LruTiers` simulates live).

Per decode step (of one request for scope ``request``, the batched step for scope
``run``) each tier with anything to read does one batched read: ``latency + bytes /
bandwidth``.  Tiers are read concurrently, so a step's fetch time is the slowest tier's.
A block item carries ``block_size x bytes_per_token`` bytes per layer, times the run's
traced layers at granularity ``block`` (all layers of a block move together).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from kvtrace.analysis.kv_access import (
    DEEPSEEK_V32_BYTES_PER_TOKEN,
    DEFAULT_TIERS,
    Granularity,
    Policy,
    Scope,
)
from kvtrace.analysis.kv_access.curves import (
    RunCurve,
    capacity_for,
    check_arguments,
    combine,
    share_units,
)
from kvtrace.analysis.kv_access.simulate import UnitOutcome
from kvtrace.analysis.shares import request_shares, run_here
from kvtrace.errors import InputError
from kvtrace.sql.runs import run_ids

HIT_TARGETS = (0.90, 0.95, 0.99)
_KEYS = [
    ("run_id", pa.string()),
    ("block_size", pa.int32()),
    ("policy", pa.string()),
    ("granularity", pa.string()),
    ("scope", pa.string()),
]
TIER_ROWS = pa.schema(
    [
        *_KEYS,
        ("tier", pa.string()),
        ("capacity_blocks", pa.int64()),
        ("accesses_served", pa.int64()),
        ("hit_rate", pa.float64()),
        ("bytes_per_step_p50", pa.int64()),
        ("bytes_per_step_p95", pa.int64()),
        ("fetch_us_p50", pa.float64()),
        ("fetch_us_p95", pa.float64()),
    ]
)
RUN_ROWS = pa.schema(
    [
        *_KEYS,
        ("steps", pa.int64()),
        ("accesses", pa.int64()),
        ("first_touches", pa.int64()),
        ("bytes_per_step_p50", pa.int64()),
        ("fetch_us_p50", pa.float64()),
        ("fetch_us_p95", pa.float64()),
        *[(f"hbm_blocks_for_{round(t * 100)}pct", pa.int64()) for t in HIT_TARGETS],
    ]
)


@dataclass(frozen=True)
class Tier:
    """One KV tier: capacity in items (None: unbounded), GB/s, µs per read."""

    name: str
    capacity: int | None
    gbps: float
    latency_us: float

    @classmethod
    def parse(cls, text: str) -> Tier:
        """``NAME:CAPACITY:GBPS:LATENCY_US``, CAPACITY a whole number of items or ``inf``."""
        parts = text.split(":")
        if len(parts) != 4 or not parts[0]:
            raise InputError(
                f"tier {text!r} is not NAME:CAPACITY:GBPS:LATENCY_US (e.g. hbm:4096:3000:0)"
            )
        name, capacity_text, gbps_text, latency_text = parts
        try:
            capacity = None if capacity_text.lower() == "inf" else int(capacity_text)
            gbps, latency = float(gbps_text), float(latency_text)
        except ValueError:
            raise InputError(
                f"tier {text!r}: capacity must be a whole number or inf, "
                "bandwidth and latency numbers"
            ) from None
        if capacity is not None and capacity < 1:
            raise InputError(f"tier {name}: capacity must be at least 1 block, got {capacity}")
        if not (gbps > 0 and math.isfinite(gbps)) or not (latency >= 0 and math.isfinite(latency)):
            raise InputError(f"tier {name}: bandwidth must be positive and latency not negative")
        return cls(name, capacity, gbps, latency)


def check_tiers(tiers: Sequence[Tier]) -> None:
    """One sentence for a tier list the what-if cannot use."""
    if not tiers:
        raise InputError("give at least one tier")
    names = [t.name for t in tiers]
    if len(set(names)) != len(names):
        raise InputError("tier names must differ: " + ", ".join(names))
    if tiers[-1].capacity is not None:
        raise InputError(
            f"the last tier ({tiers[-1].name}) must be unbounded (capacity inf): "
            "every miss is read from it"
        )
    unbounded = [t.name for t in tiers[:-1] if t.capacity is None]
    if unbounded:
        raise InputError(f"only the last tier may be unbounded, not {unbounded[0]}")


@dataclass
class WhatIf:
    """Per (run, block size, tier) rows, and per (run, block size) rows."""

    tiers: pa.Table
    runs: pa.Table

    def combined(self) -> pa.Table:
        """The tier rows with their run's figures beside them (one table to write out)."""
        run_columns = {
            "steps": "steps",
            "accesses": "accesses",
            "first_touches": "first_touches",
            "bytes_per_step_p50": "step_bytes_p50",
            "fetch_us_p50": "step_fetch_us_p50",
            "fetch_us_p95": "step_fetch_us_p95",
            **{c: c for c in self.runs.column_names if c.startswith("hbm_blocks")},
        }
        runs = self.runs.select(["run_id", "block_size", *run_columns]).rename_columns(
            ["run_id", "block_size", *run_columns.values()]
        )
        joined = self.tiers.join(runs, keys=["run_id", "block_size"])
        return joined.sort_by([("run_id", "ascending"), ("block_size", "ascending")])


@dataclass(frozen=True)
class WhatIfSpec:
    """What to simulate: block sizes, tiers (fastest first), policy, granularity, scope,
    KV bytes per token and layer, and the runs by id or name (None: every DSA run)."""

    block_sizes: tuple[int, ...] = (64,)
    tiers: tuple[Tier, ...] = tuple(Tier.parse(text) for text in DEFAULT_TIERS)
    policy: Policy = "lru"
    granularity: Granularity = "block"
    scope: Scope = "request"
    bytes_per_token: int = DEEPSEEK_V32_BYTES_PER_TOKEN
    runs: tuple[str, ...] | None = None

    def check(self) -> None:
        """One sentence for a setting the what-if cannot use."""
        check_tiers(self.tiers)
        if self.bytes_per_token < 1:
            raise InputError(f"bytes per token must be positive, got {self.bytes_per_token}")
        for block_size in self.block_sizes:
            check_arguments(block_size, self.policy, self.granularity, self.scope)


@dataclass(frozen=True)
class WhatIfShare:
    """The requests of one run (ids in a closed range; None: all) at one block size."""

    block_size: int
    run_id: str
    requests: tuple[int, int] | None


@dataclass(frozen=True)
class WhatIfAnalysis:
    """The what-if in shares (`kvtrace.analysis.shares`): a share is some requests of a
    run at a block size (scope ``run``: the whole run), simulated apart and merged in
    request order into each run's curve."""

    spec: WhatIfSpec

    def plan(self, con: duckdb.DuckDBPyConnection, tasks: int) -> list[WhatIfShare]:
        self.spec.check()
        requests = dict(
            con.execute(
                "SELECT run_id, list(DISTINCT request_id ORDER BY request_id) "
                "FROM _dsa_access_rows GROUP BY run_id ORDER BY run_id"
            ).fetchall()
        )
        named = (
            None
            if self.spec.runs is None
            else set(run_ids(con, self.spec.runs, having="dsa_steps", what="DSA rows"))
        )
        chosen = [r for r in requests if named is None or r in named]
        if not chosen:
            raise InputError(
                "no DSA rows to simulate" + (" in the selected runs" if self.spec.runs else "")
            )
        return [
            WhatIfShare(block_size, run_id, share)
            for block_size in self.spec.block_sizes
            for run_id in chosen
            for share in (
                [None] if self.spec.scope == "run" else request_shares(requests[run_id], tasks)
            )
        ]

    def run(
        self, con: duckdb.DuckDBPyConnection, share: WhatIfShare
    ) -> tuple[list[UnitOutcome], int]:
        spec = self.spec
        return share_units(
            con,
            share.block_size,
            spec.policy,
            spec.granularity,
            spec.scope,
            tier_limits(spec.tiers),
            share.run_id,
            share.requests,
        )

    def merge(
        self,
        con: duckdb.DuckDBPyConnection,
        shares: list[WhatIfShare],
        parts: list[tuple[list[UnitOutcome], int]],
    ) -> WhatIf:
        spec = self.spec
        return whatif_of_curves(
            _curves(shares, parts),
            tiers=spec.tiers,
            policy=spec.policy,
            granularity=spec.granularity,
            scope=spec.scope,
            bytes_per_token=spec.bytes_per_token,
            selected=spec.runs,
        )


def _curves(
    shares: list[WhatIfShare], parts: list[tuple[list[UnitOutcome], int]]
) -> Iterator[tuple[int, RunCurve]]:
    """Each (block size, run)'s curve from its shares' units, in plan order."""
    for (block_size, _), group in itertools.groupby(
        zip(shares, parts, strict=True), key=lambda pair: (pair[0].block_size, pair[0].run_id)
    ):
        grouped = list(group)
        units = [unit for _, (part_units, _) in grouped for unit in part_units]
        if units:
            yield block_size, combine(units, np.zeros(0, np.int64), grouped[0][1][1])


def whatif(con: duckdb.DuckDBPyConnection, spec: WhatIfSpec) -> WhatIf:
    """Serve every run's access stream from the spec's tiers, on ``con`` (see the module
    docstring; `kvtrace.analysis.shares.run_analysis` spreads it over an executor)."""
    return run_here(WhatIfAnalysis(spec), con)


def tier_limits(tiers: Sequence[Tier]) -> list[int]:
    """The cumulative capacities of every tier but the last."""
    return [int(c) for c in np.cumsum([t.capacity for t in tiers[:-1]])]


def whatif_of_curves(
    curves: Iterable[tuple[int, RunCurve]],
    *,
    tiers: Sequence[Tier],
    policy: Policy,
    granularity: Granularity,
    scope: Scope,
    bytes_per_token: int,
    selected: Sequence[str] | None,
) -> WhatIf:
    """The what-if rows of simulated runs, given as (block size, curve) in order (the
    one place they are computed, however the curves were simulated)."""
    tier_rows, run_rows = [], []
    for block_size, curve in curves:
        base = {
            "run_id": curve.run_id,
            "block_size": block_size,
            "policy": policy,
            "granularity": granularity,
            "scope": scope,
        }
        item_bytes = block_size * bytes_per_token * (curve.layers if granularity == "block" else 1)
        tier_rows += _tier_rows(base, curve, tiers, item_bytes)
        run_rows.append({**base, **_run_row(curve, tiers, item_bytes)})
    if not run_rows:
        raise InputError("no DSA rows to simulate" + (" in the selected runs" if selected else ""))
    return WhatIf(
        pa.Table.from_pylist(tier_rows, TIER_ROWS), pa.Table.from_pylist(run_rows, RUN_ROWS)
    )


def _per_step(curve: RunCurve, tiers: Sequence[Tier]) -> np.ndarray:
    counts = [c for c in curve.step_tiers if len(c)]
    return np.concatenate(counts) if counts else np.zeros((0, len(tiers)), dtype=np.int64)


def _fetch_us(counts: np.ndarray, tiers: Sequence[Tier], item_bytes: int) -> np.ndarray:
    """Per step and tier: latency plus transfer time, 0 where nothing is read."""
    latency = np.array([t.latency_us for t in tiers])
    bandwidth = np.array([t.gbps for t in tiers]) * 1e9
    return np.where(counts > 0, latency + counts * item_bytes / bandwidth * 1e6, 0.0)


def _percentiles(values: np.ndarray, whole: bool = False) -> tuple[Any, Any]:
    """p50 and p95 (linear), rounded to whole numbers when ``whole``; None when empty."""
    if len(values) == 0:
        return None, None
    p50, p95 = np.percentile(values, [50, 95])
    return (round(p50), round(p95)) if whole else (float(p50), float(p95))


def _tier_rows(
    base: dict[str, Any], curve: RunCurve, tiers: Sequence[Tier], item_bytes: int
) -> list[dict[str, Any]]:
    counts = _per_step(curve, tiers)
    fetch = _fetch_us(counts, tiers, item_bytes)
    rows = []
    for index, tier in enumerate(tiers):
        served = int(counts[:, index].sum())
        bytes_p50, bytes_p95 = _percentiles(counts[:, index] * item_bytes, whole=True)
        fetch_p50, fetch_p95 = _percentiles(fetch[:, index])
        rows.append(
            {
                **base,
                "tier": tier.name,
                "capacity_blocks": tier.capacity,
                "accesses_served": served,
                "hit_rate": served / curve.accesses if curve.accesses else None,
                "bytes_per_step_p50": bytes_p50,
                "bytes_per_step_p95": bytes_p95,
                "fetch_us_p50": fetch_p50,
                "fetch_us_p95": fetch_p95,
            }
        )
    return rows


def _run_row(curve: RunCurve, tiers: Sequence[Tier], item_bytes: int) -> dict[str, Any]:
    counts = _per_step(curve, tiers)
    step_fetch = _fetch_us(counts, tiers, item_bytes).max(axis=1, initial=0.0)
    fetch_p50, fetch_p95 = _percentiles(step_fetch)
    return {
        "steps": len(counts),
        "accesses": curve.accesses,
        "first_touches": curve.first_touches,
        "bytes_per_step_p50": _percentiles(counts.sum(axis=1) * item_bytes, whole=True)[0],
        "fetch_us_p50": fetch_p50,
        "fetch_us_p95": fetch_p95,
        **{f"hbm_blocks_for_{round(t * 100)}pct": capacity_for(curve, t) for t in HIT_TARGETS},
    }
