"""The prefix-cache what-if against an engine's own KV cache (``kv_cache_fidelity``).

An engine's KV-cache events show what its pool did; ``kv_events_as_workload`` turns its
stored events into the requests that caused them (each a chain of block hashes, its
reused prefix included).  Replaying those requests through the simulator with the
engine's pool size and policy, bucket by bucket in time, puts what the simulation
predicts beside what the engine did: blocks stored (misses), evicted, stored again
after an eviction, and resident.  Where they agree the what-if can be trusted for that
engine; where they part, the table shows when.

The simulated pool holds ``capacity_blocks`` blocks (by default the most the engine held
at once, its pool as far as the events show); every miss inserts a block and, once the
pool is full, evicts one.
"""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np
import pyarrow.compute as pc

from kvtrace.analysis.policies import engine_replay_policies
from kvtrace.analysis.prefix_cache import PrefixSimulation, PrefixTrace, trace_of
from kvtrace.errors import InputError


def kv_cache_fidelity_rows(
    con: duckdb.DuckDBPyConnection,
    policy: str,
    capacity_blocks: int | None,
    bucket_s: float,
) -> list[dict[str, Any]]:
    """Per run, worker and time bucket: observed against simulated pool activity."""
    names = engine_replay_policies()
    if policy not in names:
        raise InputError(f"expected a policy of {', '.join(names)}, got {policy!r}")
    if not bucket_s > 0:
        raise InputError(f"the bucket must be a positive number of seconds, got {bucket_s}")
    if capacity_blocks is not None and capacity_blocks < 1:
        raise InputError(f"the capacity must be at least one block, got {capacity_blocks}")
    observed = _observed(con, bucket_s)
    requests = con.sql(
        "SELECT run_id, worker, request_idx, timestamp, hash_ids, input_length AS input_tokens, "
        "input_length // len(hash_ids) AS hash_block_tokens FROM kv_events_as_workload "
        "ORDER BY run_id, worker, request_idx"
    ).to_arrow_table()
    rows: list[dict[str, Any]] = []
    for (run_id, worker), buckets in sorted(observed.items()):
        mine = requests.filter(
            pc.and_(pc.equal(requests["run_id"], run_id), pc.equal(requests["worker"], worker))
        )
        if mine.num_rows == 0:
            continue
        trace = trace_of(mine, warmup=0.0)
        times = np.asarray(mine["timestamp"].to_numpy(zero_copy_only=False), np.float64) / 1e3
        capacity = capacity_blocks or max(b["resident_blocks"] for b in buckets.values())
        simulated = _simulated(trace, times, policy, capacity, bucket_s)
        for bucket in sorted(set(buckets) | set(simulated)):
            seen = buckets.get(bucket, {})
            sim = simulated.get(bucket, {})
            rows.append(
                {
                    "run_id": run_id,
                    "worker": worker,
                    "t_s": bucket * bucket_s,
                    "capacity_blocks": capacity,
                    "observed_stored": seen.get("stored", 0),
                    "simulated_stored": sim.get("stored", 0),
                    "observed_removed": seen.get("removed", 0),
                    "simulated_evicted": sim.get("evicted", 0),
                    "observed_restores": seen.get("restores", 0),
                    "simulated_restores": sim.get("restores", 0),
                    "observed_resident": seen.get("resident_blocks"),
                    "simulated_resident": sim.get("resident"),
                }
            )
    return rows


def _observed(
    con: duckdb.DuckDBPyConnection, bucket_s: float
) -> dict[tuple[str, str], dict[int, dict[str, int]]]:
    """What each worker's pool did per bucket, over all its media."""
    found: dict[tuple[str, str], dict[int, dict[str, int]]] = {}
    for run_id, worker, bucket, stored, removed, restores, resident in con.execute(
        "SELECT run_id, worker, round(t_s / $b)::BIGINT, sum(stored), sum(removed), "
        "sum(restores), sum(resident_blocks) FROM kv_pool_residency($b) GROUP BY ALL",
        {"b": bucket_s},
    ).fetchall():
        found.setdefault((run_id, worker), {})[bucket] = {
            "stored": int(stored),
            "removed": int(removed),
            "restores": int(restores),
            "resident_blocks": int(resident),
        }
    return found


def _simulated(
    trace: PrefixTrace, times: np.ndarray, policy: str, capacity: int, bucket_s: float
) -> dict[int, dict[str, int]]:
    """Per bucket: the simulated pool's stores, evictions, re-stores and occupancy."""
    hit = PrefixSimulation(trace, policy, "prefix").hits(capacity)
    miss = ~hit
    first = np.zeros(len(trace.ids), bool)
    first[np.unique(trace.ids, return_index=True)[1]] = True
    restore = miss & ~first
    inserted = np.cumsum(miss)
    evicted = np.maximum(inserted - capacity, 0)
    lengths = np.diff(trace.starts)
    # requests come in time order, so each bucket's reads are one contiguous range
    buckets = np.repeat(np.floor(times / bucket_s).astype(np.int64), lengths)
    found_buckets, first = np.unique(buckets, return_index=True)
    last = np.append(first[1:], len(buckets)) - 1
    stored = np.add.reduceat(miss.astype(np.int64), first)
    restores = np.add.reduceat(restore.astype(np.int64), first)
    evictions = np.diff(evicted[last], prepend=0)
    resident = np.minimum(inserted[last], capacity)
    return {
        int(bucket): {
            "stored": int(stored[k]),
            "evicted": int(evictions[k]),
            "restores": int(restores[k]),
            "resident": int(resident[k]),
        }
        for k, bucket in enumerate(found_buckets)
    }
