"""The tier what-if: which tier serves each decode step's KV reads, how many bytes, how fast,
and what a shared pool saves a request's time to first token.

Tiers are listed fastest first, each with a capacity (items of the granularity), a
bandwidth (GB/s, 10^9 bytes per second) and a latency per read (µs); the last tier is
unbounded and holds everything (first touches are read from it).  The policy decides
which tier holds what (`kvtrace.analysis.kv_access.simulate`): LRU is an exclusive
hierarchy read off the stack distances, FIFO is simulated tier by tier with demotion and
promotion, OPT is the ceiling read off cumulative capacities, and sliding_window, lfu
and score are read off their caches at the cumulative capacities too (they nest, so that
is the hierarchy in which each tier demotes its lowest block to the next).

Per decode step (of one request for scope ``request``, the run's slot for scope ``run``)
each tier with anything to read does one batched read: ``latency + bytes / bandwidth``.
Tiers are read concurrently, so a step's fetch time is the slowest tier's.  A block item
carries ``block_size x bytes_per_token`` bytes per layer, times the run's traced layers
at granularity ``block`` (all layers of a block move together).

With sharing ``content`` and scope ``run`` every request arriving finds the leading run of
its prompt blocks that others wrote; reading them instead of computing them saves
``recompute - fetch`` of its TTFT when that is positive (`recompute`).  Replication
(``replicas``: tier name -> copies K) keeps K copies, in the tier above, of each block
that tier read at least K times in the run (a copy pays for itself): the reads of those
blocks move one tier up, and the copies cost K block transfers each.

Sub-block packing (``subblocks``: sizes b in tokens) asks what each tier would move if
every layer fetched only the sub-blocks of b tokens it touched in a block it reads (the
block's tokens cut into sub-blocks from its start, the last one shorter when b does not
divide the block), the tiers staying what the policy made them: per tier and b, the
bytes of whole blocks against those of the touched sub-blocks.
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

from kvtrace.analysis._columns import SIMULATION_KEYS
from kvtrace.analysis.kv_access import (
    DEEPSEEK_V32_BYTES_PER_TOKEN,
    DEFAULT_TIERS,
    DEFAULT_TPOT_MS,
    DEFAULT_WINDOW_TOKENS,
    Granularity,
    Policy,
    Scope,
    Sharing,
)
from kvtrace.analysis.kv_access._figures import HIT_TARGETS, RunFigures
from kvtrace.analysis.kv_access.curves import (
    RunCurve,
    check_policy,
    combine,
    default_threads,
)
from kvtrace.analysis.kv_access.plan import StreamSpec, run_plans
from kvtrace.analysis.kv_access.recompute import (
    PrefillCost,
    prefill_cost,
)
from kvtrace.analysis.kv_access.simulate import RunOutcome, simulate_run
from kvtrace.analysis.policies import policy_named
from kvtrace.analysis.shares import request_shares, run_here
from kvtrace.errors import InputError
from kvtrace.sql.runs import run_ids

TIER_ROWS = pa.schema(
    [
        *SIMULATION_KEYS,
        ("tier", pa.string()),
        ("capacity_blocks", pa.int64()),
        ("accesses_served", pa.int64()),
        ("shared_served", pa.int64()),
        ("hit_rate", pa.float64()),
        ("bytes_total", pa.int64()),
        ("bytes_per_step_p50", pa.int64()),
        ("bytes_per_step_p95", pa.int64()),
        ("fetch_us_p50", pa.float64()),
        ("fetch_us_p95", pa.float64()),
        ("fetch_us_p99", pa.float64()),
        ("recompute_boundary_tokens", pa.int64()),
    ]
)
RUN_ROWS = pa.schema(
    [
        *SIMULATION_KEYS,
        ("stream_order", pa.string()),
        ("sharing_rule", pa.string()),
        ("requests", pa.int64()),
        ("steps", pa.int64()),
        ("accesses", pa.int64()),
        ("first_touches", pa.int64()),
        ("shared_hits", pa.int64()),
        ("bytes_per_step_p50", pa.int64()),
        ("fetch_us_p50", pa.float64()),
        ("fetch_us_p95", pa.float64()),
        ("fetch_us_p99", pa.float64()),
        *[(f"hbm_blocks_for_{round(t * 100)}pct", pa.int64()) for t in HIT_TARGETS],
        ("prefill_source", pa.string()),
        ("reused_prompt_tokens", pa.int64()),
        ("ttft_saved_ms_mean", pa.float64()),
        ("ttft_saved_ms_p50", pa.float64()),
        ("ttft_saved_ms_max", pa.float64()),
        ("window_tokens", pa.int64()),
    ]
)
SECOND_ROWS = pa.schema(
    [
        *SIMULATION_KEYS,
        ("second", pa.int64()),
        ("tier", pa.string()),
        ("steps", pa.int64()),
        ("accesses_served", pa.int64()),
        ("bytes", pa.int64()),
        ("fetch_us_p50", pa.float64()),
        ("fetch_us_p99", pa.float64()),
        ("working_set", pa.int64()),
    ]
)
REQUEST_ROWS = pa.schema(
    [
        *SIMULATION_KEYS,
        ("request_id", pa.int64()),
        ("arrival_s", pa.float64()),
        ("prompt_tokens", pa.int64()),
        ("reused_tokens", pa.int64()),
        ("fetch_us", pa.float64()),
        ("recompute_us", pa.float64()),
        ("ttft_saved_us", pa.float64()),
    ]
)
REPLICA_ROWS = pa.schema(
    [
        *SIMULATION_KEYS,
        ("tier", pa.string()),
        ("copies", pa.int64()),
        ("replicated_blocks", pa.int64()),
        ("reads_moved", pa.int64()),
        ("bytes_saved", pa.int64()),
        ("copy_bytes", pa.int64()),
        ("net_bytes_saved", pa.int64()),
    ]
)
PACKING_ROWS = pa.schema(
    [
        *SIMULATION_KEYS,
        ("tier", pa.string()),
        ("subblock_tokens", pa.int64()),
        ("accesses_served", pa.int64()),
        ("bytes_whole_blocks", pa.int64()),
        ("bytes_subblocks", pa.int64()),
        ("fetched_share", pa.float64()),
    ]
)
TABLES = ("tiers", "runs", "seconds", "requests", "replicas", "packing")
_SCHEMAS = (TIER_ROWS, RUN_ROWS, SECOND_ROWS, REQUEST_ROWS, REPLICA_ROWS, PACKING_ROWS)


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


def parse_replicas(texts: Iterable[str]) -> dict[str, int]:
    """``NAME=K`` settings (K >= 2 copies) as a dict."""
    found: dict[str, int] = {}
    for text in texts:
        name, _, copies = text.partition("=")
        try:
            count = int(copies)
        except ValueError:
            count = 0
        if not name or count < 2:
            raise InputError(f"replicas {text!r} is not NAME=K with K at least 2 (e.g. remote=3)")
        found[name] = count
    return found


@dataclass
class WhatIf:
    """The what-if's tables (see `TABLES`)."""

    tiers: pa.Table
    runs: pa.Table
    seconds: pa.Table
    requests: pa.Table
    replicas: pa.Table
    packing: pa.Table

    def combined(self) -> pa.Table:
        """The tier rows with their run's figures beside them (one table to write out)."""
        keys = [name for name, _ in SIMULATION_KEYS]
        run_columns = {
            name: (f"run_{name}" if name in self.tiers.column_names else name)
            for name in self.runs.column_names
            if name not in keys
        }
        runs = self.runs.select([*keys, *run_columns]).rename_columns(
            [*keys, *run_columns.values()]
        )
        joined = self.tiers.join(runs, keys=keys)
        return joined.sort_by([("run_id", "ascending"), ("block_size", "ascending")])

    def table(self, name: str) -> pa.Table:
        """One of `TABLES`, or ``combined``."""
        return self.combined() if name == "combined" else getattr(self, name)


@dataclass(frozen=True)
class WhatIfSpec:
    """What to simulate: block sizes, tiers (fastest first), policy, granularity, scope,
    sharing, KV bytes per token and layer, the runs by id or name (None: every DSA run),
    the arrivals to replay (a workload run, scope run) at ``tpot_ms`` per step, the
    prefill cost (``prefill_tok_s``, else the run ``cost_run``'s fitted batch timings),
    the replicated tiers (name -> copies), the sliding window's tokens and the sub-block
    sizes (tokens) whose packing is reported."""

    block_sizes: tuple[int, ...] = (64,)
    tiers: tuple[Tier, ...] = tuple(Tier.parse(text) for text in DEFAULT_TIERS)
    policy: Policy = "lru"
    granularity: Granularity = "block"
    scope: Scope = "request"
    sharing: Sharing = "private"
    bytes_per_token: int = DEEPSEEK_V32_BYTES_PER_TOKEN
    runs: tuple[str, ...] | None = None
    arrivals: str | None = None
    tpot_ms: float = DEFAULT_TPOT_MS
    prefill_tok_s: float | None = None
    cost_run: str | None = None
    replicas: tuple[tuple[str, int], ...] = ()
    window_tokens: int = DEFAULT_WINDOW_TOKENS
    subblocks: tuple[int, ...] = ()

    def check(self) -> None:
        """One sentence for a setting the what-if cannot use."""
        check_tiers(self.tiers)
        if self.bytes_per_token < 1:
            raise InputError(f"bytes per token must be positive, got {self.bytes_per_token}")
        check_policy(self.policy, (), self.window_tokens)
        small = [b for b in self.subblocks if b < 1]
        if small:
            raise InputError(f"a sub-block must be at least 1 token, got {small[0]}")
        for block_size in self.block_sizes:
            self.stream(block_size).check()
        names = [t.name for t in self.tiers]
        for name, _ in self.replicas:
            if name not in names:
                raise InputError(f"replicas name tier {name}, not one of " + ", ".join(names))
            if name == names[0]:
                raise InputError(f"tier {name} is the fastest: its copies have no closer tier")

    def tier_index(self, name: str) -> int:
        """Where the tier called ``name`` stands, fastest first."""
        return [t.name for t in self.tiers].index(name)

    def stream(self, block_size: int) -> StreamSpec:
        return StreamSpec(
            block_size, self.granularity, self.scope, self.sharing, self.arrivals, self.tpot_ms
        )


@dataclass(frozen=True)
class WhatIfShare:
    """The requests of one run (indices in a closed range; None: all) at one block size."""

    block_size: int
    run_id: str
    requests: tuple[int, int] | None


@dataclass(frozen=True)
class WhatIfAnalysis:
    """The what-if in shares (`kvtrace.analysis.shares`): a share is some requests of a
    run at a block size (scope ``run``: the whole run), simulated apart and merged in
    request order into each run's tables."""

    spec: WhatIfSpec

    def plan(self, con: duckdb.DuckDBPyConnection, tasks: int) -> list[WhatIfShare]:
        self.spec.check()
        requests = dict(
            con.sql(
                "SELECT run_id, count(DISTINCT request_id) FROM _dsa_access_rows "
                "GROUP BY run_id ORDER BY run_id"
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
        if self.spec.sharing == "content":
            check_shareable(con, chosen)
        return [
            WhatIfShare(block_size, run_id, share)
            for block_size in self.spec.block_sizes
            for run_id in chosen
            for share in (
                [None]
                if self.spec.scope == "run"
                else request_shares(list(range(int(requests[run_id]))), tasks)
            )
        ]

    def run(self, con: duckdb.DuckDBPyConnection, share: WhatIfShare) -> RunOutcome:
        spec = self.spec
        (plan,) = run_plans(con, spec.stream(share.block_size), [share.run_id])
        limits = tier_limits(spec.tiers)
        watched = {spec.tier_index(name): copies for name, copies in spec.replicas}
        outcome = simulate_run(
            con,
            plan,
            policy_named(spec.policy),
            np.zeros(0, np.int64),
            np.asarray(limits, dtype=np.int64),
            share.requests,
            default_threads(),
            watched,
            spec.window_tokens,
            spec.subblocks,
        )
        if share.requests is None:  # the whole run: merge need not plan it again
            outcome.plan = plan
        return outcome

    def merge(
        self,
        con: duckdb.DuckDBPyConnection,
        shares: list[WhatIfShare],
        parts: list[RunOutcome],
    ) -> WhatIf:
        spec = self.spec
        cost = prefill_cost(con, spec.prefill_tok_s, spec.cost_run)
        return whatif_of_curves(_curves(con, spec, shares, parts), spec=spec, cost=cost)


def shareable_runs(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The runs whose blocks can be named by content: they record token ids or prefix
    keys (whether or not a block of a given size is full)."""
    held = con.sql(  # the sources dsa_block_keys names blocks from, without hashing them
        "SELECT run_id FROM dsa_request_tokens UNION SELECT run_id FROM _dsa_key_regions "
        "WHERE prefix_key IS NOT NULL AND key_tokens IS NOT NULL"
    ).fetchall()
    return {run_id for (run_id,) in held}


def check_shareable(con: duckdb.DuckDBPyConnection, runs: Sequence[str] | None) -> None:
    """One sentence when a run (of ``runs``, or of every DSA run) has neither token ids
    nor prefix keys to share blocks by."""
    if runs is None:
        runs = [r for (r,) in con.sql("SELECT DISTINCT run_id FROM dsa_steps").fetchall()]
    shareable = shareable_runs(con)
    lacking = [run for run in runs if run not in shareable]
    if lacking:
        raise InputError(
            f"run {lacking[0]} records neither token ids nor prefix keys, so its blocks "
            "cannot be shared by content; use --sharing private"
        )


def _curves(
    con: duckdb.DuckDBPyConnection,
    spec: WhatIfSpec,
    shares: list[WhatIfShare],
    parts: list[RunOutcome],
) -> Iterator[tuple[int, RunCurve]]:
    """Each (block size, run)'s curve from its shares' outcomes, in plan order."""
    for (block_size, run_id), group in itertools.groupby(
        zip(shares, parts, strict=True), key=lambda pair: (pair[0].block_size, pair[0].run_id)
    ):
        grouped = [part for _, part in group]
        merged = grouped[0]
        for outcome in grouped[1:]:
            merged.add(outcome)
        if merged.units:
            plan = merged.plan or run_plans(con, spec.stream(block_size), [run_id])[0]
            yield block_size, combine(plan, merged, np.zeros(0, np.int64))


def whatif(con: duckdb.DuckDBPyConnection, spec: WhatIfSpec) -> WhatIf:
    """Serve every run's access stream from the spec's tiers, on ``con`` (see the module
    docstring; `kvtrace.analysis.shares.run_analysis` spreads it over an executor)."""
    return run_here(WhatIfAnalysis(spec), con)


def tier_limits(tiers: Sequence[Tier]) -> list[int]:
    """The cumulative capacities of every tier but the last."""
    return [int(c) for c in np.cumsum([t.capacity for t in tiers[:-1]])]


def whatif_of_curves(
    curves: Iterable[tuple[int, RunCurve]], *, spec: WhatIfSpec, cost: PrefillCost
) -> WhatIf:
    """The what-if tables of simulated runs, given as (block size, curve) in order (the
    one place they are computed, however the curves were simulated)."""
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
    for block_size, curve in curves:
        base = {
            "run_id": curve.run_id,
            "block_size": block_size,
            "policy": spec.policy,
            "granularity": spec.granularity,
            "scope": spec.scope,
            "sharing": spec.sharing,
        }
        for name, found in RunFigures(curve, spec, block_size, cost).tables().items():
            rows[name] += [{**base, **row} for row in found]
    if not rows["runs"]:
        raise InputError("no DSA rows to simulate" + (" in the selected runs" if spec.runs else ""))
    schemas = dict(zip(TABLES, _SCHEMAS, strict=True))
    return WhatIf(**{name: pa.Table.from_pylist(rows[name], schemas[name]) for name in TABLES})
