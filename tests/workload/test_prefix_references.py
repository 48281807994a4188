"""The prefix-cache curves against the reference tools themselves, on generated hash traces
and on Mooncake's published trace, and the invariants that need no reference.

- kvcache-simulator 0.1.3 (its ``lru`` is kvtrace's ``radix_lru``, its ``fifo`` the
  hash-chained pool, its ``optimal`` kvtrace's ``opt``, its ``ceiling`` every block seen
  before): semantics ``prefix``, token weighted, with a warm-up.  It reports no rate for
  a cache that did not fill during the warm-up ("underfilled_at_window"); kvtrace does,
  so those capacities are compared on the ceiling only.
- libCacheSim (its LRU, FIFO and Belady, one request per block read): semantics
  ``block``, block weighted.
- Invariants: no hit rate above its ceiling, LRU never losing hits as the cache grows,
  OPT at least every policy at the same capacity.

A failing comparison names the policy, the capacity, the trace and both numbers.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtrace import connect
from kvtrace.analysis.prefix_cache import PrefixCurveSpec, prefix_hit_curve_rows
from kvtrace.ingest import ingest
from tests.conftest import DATA

kvcache_trace = pytest.importorskip("kvcache_sim.trace")
kvcache_plan = pytest.importorskip("kvcache_sim.plan")
kvcache_policies = pytest.importorskip("kvcache_sim.policies")
libcachesim = pytest.importorskip("libcachesim")

BLOCK = 16  # tokens per block of the generated traces
MOONCAKE = DATA / "mooncake_conversation_trace.jsonl"
NEVER = np.iinfo(np.int64).max


# -- generated traces ----------------------------------------------------------------------


@st.composite
def hash_traces(draw: st.DrawFn) -> tuple[list[list[int]], list[int]]:
    """Requests of block hash ids, either chained (a request extends a prefix of an
    earlier one with ids of its own, as Mooncake's are) or not (ids from a small alphabet,
    repeating under other parents), with input lengths anywhere in the last block."""
    chained = draw(st.booleans())
    count = draw(st.integers(1, 24))
    requests: list[list[int]] = []
    fresh = 1000
    for _ in range(count):
        if chained:
            blocks: list[int] = []
            if requests and draw(st.booleans()):
                earlier = requests[draw(st.integers(0, len(requests) - 1))]
                blocks = list(earlier[: draw(st.integers(0, len(earlier)))])
            for _ in range(draw(st.integers(0 if blocks else 1, 3))):
                blocks.append(fresh)
                fresh += 1
        else:
            blocks = draw(st.lists(st.integers(0, 4), min_size=1, max_size=5))
        requests.append(blocks)
    inputs = [len(b) * BLOCK - draw(st.integers(0, BLOCK - 1)) for b in requests]
    return requests, inputs


def _connection(requests: list[list[int]], inputs: list[int]) -> duckdb.DuckDBPyConnection:
    """A connection whose ``workload_requests`` holds one run of the trace, as ingest
    stores it, the requests arriving in order (the curve reads nothing else)."""
    con = duckdb.connect()
    table = pa.table(
        {
            "run_id": ["generated"] * len(requests),
            "request_idx": list(range(len(requests))),
            "arrival_s": [0.5 * i for i in range(len(requests))],
            "hash_ids": pa.array(requests, pa.list_(pa.int64())),
            "input_tokens": inputs,
            "hash_block_tokens": [BLOCK] * len(requests),
        }
    )
    con.register("workload_requests", table)
    return con


def _curve(
    con: duckdb.DuckDBPyConnection,
    policy: str,
    capacities: list[int],
    semantics: str,
    weight: str,
    warmup: float = 0.0,
) -> dict[int, dict]:
    spec = PrefixCurveSpec(policy, tuple(capacities), semantics, weight, warmup)
    return {row["capacity_blocks"]: row for row in prefix_hit_curve_rows(con, spec)}


def _capacities(requests: list[list[int]]) -> list[int]:
    """1, 2, the distinct paths, the reads, and past the reads."""
    reads = sum(map(len, requests))
    paths = len({tuple(b[: i + 1]) for b in requests for i in range(len(b))})
    return sorted({1, 2, paths, reads, reads + 1, 10 * reads + 7})


# -- kvcache-simulator ---------------------------------------------------------------------


def _kvcache_plan(requests: list[list[int]], inputs: list[int], warmup: float, block: int = BLOCK):
    lines = [
        json.dumps({"hash_ids": b, "input_length": n, "block_size": block})
        for b, n in zip(requests, inputs, strict=True)
    ]
    trace = kvcache_trace.parse_trace_lines(lines, block_size=block)
    return kvcache_plan.build_execution_plan(trace, warmup_fraction=warmup)


THEIRS = {"radix_lru": "lru", "fifo": "fifo", "opt": "optimal"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hash_traces())
def test_prefix_curves_equal_kvcache_simulator_s(trace):
    requests, inputs = trace
    con = _connection(requests, inputs)
    plan = _kvcache_plan(requests, inputs, 0.5)
    capacities = _capacities(requests)
    ceiling = kvcache_policies.simulate_ceiling(plan)
    for ours, theirs in THEIRS.items():
        rows = _curve(con, ours, capacities, "prefix", "tokens", 0.5)
        for capacity in capacities:
            got = rows[capacity]["hit_rate"] or 0.0
            reference = kvcache_policies.simulate_policy(plan, theirs, capacity)
            if reference.measurementMode == "fixed_window":
                assert got == pytest.approx(reference.hitRate, abs=1e-12), (
                    f"{ours} at {capacity} blocks: kvtrace {got}, kvcache-simulator "
                    f"{theirs} {reference.hitRate} on {requests}"
                )
            assert got <= ceiling.hitRate + 1e-12, (
                f"{ours} at {capacity} blocks: kvtrace {got} above kvcache-simulator's "
                f"ceiling {ceiling.hitRate} on {requests}"
            )
    # a pool at least as large as the trace's paths holds every block read before
    paths = capacities[2]
    for policy in ("lru", "radix_lru", "fifo", "opt"):
        rows = _curve(con, policy, [c for c in capacities if c >= paths], "prefix", "tokens", 0.5)
        for capacity, row in rows.items():
            assert (row["hit_rate"] or 0.0) == pytest.approx(ceiling.hitRate, abs=1e-12), (
                f"{policy} at {capacity} blocks: kvtrace {row['hit_rate']}, kvcache-simulator's "
                f"ceiling {ceiling.hitRate} on {requests}"
            )


def test_the_lru_pool_past_the_stream_stops_at_the_ceiling_on_mooncake_s_trace(warehouse):
    """Every first read of a block is a miss, however large the pool: a capacity past the
    number of block reads serves what kvcache-simulator's ceiling serves, not 1.0."""
    ingest(warehouse, [str(MOONCAKE)])
    con = connect(warehouse)
    ((reads,),) = con.sql("SELECT sum(len(hash_ids)) FROM workload_requests").fetchall()
    plan = _kvcache_plan(*_mooncake_requests(), 0.0, block=512)
    ceiling = kvcache_policies.simulate_ceiling(plan).hitRate
    assert 0.3 < ceiling < 0.9
    rows = con.sql(
        "SELECT capacity_blocks, hit_rate FROM workload_prefix_hit_curve('lru', "
        f"[{plan.unique_blocks}, {reads}, {reads + 1}, 1000000000], 'prefix', 'tokens')"
    ).fetchall()
    assert len(rows) == 4
    for capacity, rate in rows:
        assert rate == pytest.approx(ceiling, abs=1e-12), capacity


def _mooncake_requests() -> tuple[list[list[int]], list[int]]:
    records = [json.loads(line) for line in MOONCAKE.read_text().splitlines() if line.strip()]
    return [r["hash_ids"] for r in records], [r["input_length"] for r in records]


# -- libCacheSim ---------------------------------------------------------------------------


def _libcachesim_hits(stream: list[int], capacity: int, policy: str) -> int:
    """Hits of libCacheSim's cache of ``capacity`` one-byte objects over ``stream``."""
    kind = {"lru": libcachesim.LRU, "fifo": libcachesim.FIFO, "opt": libcachesim.Belady}[policy]
    # a hash table of 2^20 slots (its default of 2^24 takes 70 ms to allocate)
    cache = kind(cache_size=capacity, hashpower=20)
    following: dict[int, int] = {}
    next_use = [0] * len(stream)
    for index in range(len(stream) - 1, -1, -1):
        next_use[index] = following.get(stream[index], NEVER)
        following[stream[index]] = index
    hits = 0
    for index, item in enumerate(stream):
        request = libcachesim.Request()
        request.obj_id, request.obj_size, request.clock_time = item, 1, index
        request.next_access_vtime = next_use[index]
        hits += bool(cache.get(request))
    return hits


@settings(max_examples=60, deadline=None)
@given(hash_traces())
def test_block_curves_equal_libcachesim_s(trace):
    requests, inputs = trace
    stream = [b for blocks in requests for b in blocks]
    con = _connection(requests, inputs)
    capacities = sorted({1, 2, len(set(stream)), len(stream), len(stream) + 1})
    for policy in ("lru", "fifo", "opt"):
        _assert_libcachesim_s(con, stream, policy, capacities, f"on {stream}")


def test_block_curves_equal_libcachesim_s_on_mooncake_s_trace():
    requests, inputs = _mooncake_requests()
    stream = [b for blocks in requests for b in blocks]
    con = _connection(requests, inputs)
    distinct = len(set(stream))
    for policy, capacities in (
        ("lru", [1000, distinct // 3, len(stream) + 1]),
        ("fifo", [distinct // 3, distinct]),
        ("opt", [distinct // 3]),
    ):
        _assert_libcachesim_s(con, stream, policy, capacities, "on Mooncake's trace")


def _assert_libcachesim_s(
    con: duckdb.DuckDBPyConnection, stream: list[int], policy: str, capacities: list[int], on: str
) -> None:
    """The block curve's hits at each capacity are libCacheSim's over the same stream."""
    rows = _curve(con, policy, capacities, "block", "blocks")
    for capacity in capacities:
        theirs = _libcachesim_hits(stream, capacity, policy)
        assert rows[capacity]["hits"] == theirs, (
            f"{policy} at {capacity} blocks {on}: kvtrace {rows[capacity]['hits']} hits, "
            f"libCacheSim {theirs}"
        )


# -- invariants ----------------------------------------------------------------------------


def _prefix_ceiling(requests: list[list[int]]) -> int:
    """Block reads a cache that never evicts serves: each request's leading run of paths
    read before."""
    seen: set[tuple] = set()
    served = 0
    for blocks in requests:
        paths = [tuple(blocks[: i + 1]) for i in range(len(blocks))]
        run = 0
        while run < len(paths) and paths[run] in seen:
            run += 1
        served += run
        seen.update(paths)
    return served


POLICIES: dict[str, tuple[str, ...]] = {
    "prefix": ("lru", "fifo", "radix_lru", "opt"),
    "block": ("lru", "fifo", "opt"),
}


@settings(max_examples=80, deadline=None)
@given(hash_traces(), st.sampled_from(["prefix", "block"]))
def test_no_policy_beats_the_ceiling_or_opt_and_lru_never_loses_hits(trace, semantics):
    requests, inputs = trace
    con = _connection(requests, inputs)
    reads = sum(map(len, requests))
    capacities = list(range(1, reads + 3))
    ceiling: Callable[[], int] = (
        (lambda: _prefix_ceiling(requests))
        if semantics == "prefix"
        else (lambda: reads - len({b for blocks in requests for b in blocks}))
    )
    hits = {
        policy: {
            c: row["hits"]
            for c, row in _curve(con, policy, capacities, semantics, "blocks").items()
        }
        for policy in POLICIES[semantics]
    }
    for capacity in capacities:
        for policy, curve in hits.items():
            assert curve[capacity] <= ceiling(), (policy, capacity, requests)
            assert curve[capacity] <= hits["opt"][capacity], (policy, capacity, requests)
    for policy in ("lru", "radix_lru") if semantics == "prefix" else ("lru",):
        curve = [hits[policy][c] for c in capacities]
        assert curve == sorted(curve), (policy, requests)
