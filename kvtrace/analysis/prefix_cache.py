"""A prefix cache over a workload trace's block hashes: hits by capacity and policy.

Every request of a run reads its prompt's blocks (``hash_ids``, one per block of
``hash_block_tokens`` tokens, shared prefixes sharing ids) in order, and one cache serves
the whole run, as a serving engine's prefix cache serves every request.  The same
kernels as the DSA what-if answer it: one LRU stack-distance pass gives every capacity;
OPT (Belady's MIN: the ceiling no online policy beats) and FIFO are simulated once per
capacity.  Capacities are 1, 2, 4, ... up to the first power of two at or above the
run's distinct blocks, plus any named.
"""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np
import pyarrow.compute as pc

from kvtrace.errors import QueryError
from kvtrace.kernels.cache_sim import LruStack, dense_ids, fifo_hits, opt_hits

PREFIX_POLICIES = ("lru", "opt", "fifo")


def prefix_hit_curve_rows(
    con: duckdb.DuckDBPyConnection, policy: str, capacities: list[int]
) -> list[dict[str, Any]]:
    """One row per (run, capacity): accesses, hits and hit rate of the run's cache."""
    if policy not in PREFIX_POLICIES:
        raise QueryError(
            f"expected one of {', '.join(PREFIX_POLICIES)} for the policy, got {policy!r}"
        )
    if any(c is None or c < 1 for c in capacities):
        raise QueryError("cache capacities must be at least 1 block")
    runs = [
        row[0]
        for row in con.execute(
            "SELECT DISTINCT run_id FROM workload_requests WHERE hash_ids IS NOT NULL "
            "ORDER BY run_id"
        ).fetchall()
    ]
    rows = []
    for run_id in runs:
        lists = con.sql(
            "SELECT hash_ids FROM workload_requests WHERE run_id = $run AND hash_ids IS NOT "
            "NULL ORDER BY request_idx",
            params={"run": run_id},
        ).to_arrow_table()["hash_ids"]
        keys = np.asarray(pc.list_flatten(lists).to_numpy(zero_copy_only=False), np.int64)
        ids, distinct = dense_ids(keys)
        grid = 2 ** np.arange(max(distinct - 1, 0).bit_length() + 1, dtype=np.int64)
        wanted = np.unique(np.concatenate([grid, np.asarray(capacities, np.int64)]))
        hits = _hits(ids, distinct, policy, wanted)
        rows += [
            {
                "run_id": run_id,
                "policy": policy,
                "capacity_blocks": int(c),
                "accesses": len(ids),
                "hits": int(h),
                "hit_rate": h / len(ids) if len(ids) else None,
            }
            for c, h in zip(wanted, hits, strict=True)
        ]
    return rows


def _hits(ids: np.ndarray, distinct: int, policy: str, capacities: np.ndarray) -> np.ndarray:
    if policy == "lru":
        distances = LruStack().distances(ids)
        reused = np.sort(distances[distances >= 0])
        return np.searchsorted(reused, capacities, side="left")
    simulate = opt_hits if policy == "opt" else fifo_hits
    return np.array([int(simulate(ids, distinct, int(c)).sum()) for c in capacities])
