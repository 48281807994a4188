"""The Ray engine: a cluster to start or join, an executor for ingest, and the what-if
simulation and the run summary spread over request shares."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future
from typing import Any

import duckdb
import numpy as np

from kvtrace.analysis.kv_access import Granularity, Policy, Scope
from kvtrace.analysis.kv_access.curves import RunCurve, combine, share_units
from kvtrace.analysis.kv_access.simulate import UnitOutcome
from kvtrace.analysis.kv_access.whatif import (
    Tier,
    WhatIf,
    check_tiers,
    tier_limits,
    whatif_of_curves,
)
from kvtrace.analysis.summary_shares import ShareCounts, StoredTrace, merge, trace_requests
from kvtrace.errors import KvtraceError
from kvtrace.warehouse import Warehouse


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise KvtraceError("the Ray engine needs Ray: pip install 'kvtrace[ray]'") from None
    return ray


def start(address: str | None = None) -> None:
    """Join the Ray cluster at ``address`` (``auto``: the one this machine belongs to),
    or start a local one when None; once per process."""
    ray = _ray()
    if ray.is_initialized():
        return
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False,
                 include_dashboard=False if address is None else None)
    except ConnectionError as exc:
        raise KvtraceError(f"cannot reach the Ray cluster at {address}: {exc}") from None


class RayExecutor(Executor):
    """A `concurrent.futures.Executor` whose tasks run on the Ray cluster."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        ray = _ray()
        return ray.remote(fn).remote(*args, **kwargs).future()


@functools.lru_cache(maxsize=2)
def _pinned(location: str, version: int) -> duckdb.DuckDBPyConnection:
    """A connection to the warehouse at ``version``, kept by the worker process for its
    next tasks: a version never changes, and opening one loads the whole SQL library.
    DuckDB runs on as many threads as Ray gave the task CPUs."""
    from kvtrace.analysis import connect

    con = connect(Warehouse(location, as_of=version))
    cpus = _ray().get_runtime_context().get_assigned_resources().get("CPU", 1)
    con.execute(f"SET threads = {max(1, int(cpus))}")
    return con


def _simulate_share(location: str, version: int, block_size: int, policy: Policy,
                    granularity: Granularity, scope: Scope, limits: list[int], run_id: str,
                    requests: tuple[int, int] | None) -> tuple[list[UnitOutcome], int]:
    """One task: the units of a share of a run, read from the pinned version."""
    return share_units(_pinned(location, version), block_size, policy, granularity, scope,
                       limits, run_id, requests)


def request_shares(requests: Sequence[int], tasks: int) -> list[tuple[int, int]]:
    """``requests`` (ids, ascending) cut into at most ``tasks`` contiguous id ranges of
    near-equal counts.

    >>> request_shares([1, 2, 3, 7, 9], 2)
    [(1, 3), (7, 9)]
    """
    chunks = np.array_split(np.asarray(requests, dtype=np.int64), max(1, min(tasks,
                                                                             len(requests))))
    return [(int(c[0]), int(c[-1])) for c in chunks if len(c)]


def _pin(warehouse: Warehouse) -> Warehouse:
    """``warehouse`` held at its current version, for a driver and its tasks to share
    while other writers commit."""
    if warehouse.as_of is not None:
        return warehouse
    return Warehouse(warehouse.location, as_of=warehouse.version)


def _tasks(ray: Any, tasks: int | None) -> int:
    """``tasks``, or as many as the cluster has CPUs."""
    return tasks or max(1, int(ray.cluster_resources().get("CPU", os.cpu_count() or 1)))


def _count_share(location: str, version: int, trace: StoredTrace,
                 requests: tuple[int, int]) -> ShareCounts:
    """One task: the summary counts of a share of a stored trace, from the pinned version."""
    from kvtrace.analysis.summary_shares import share_counts

    return share_counts(_pinned(location, version), trace, requests)


def summary_on_ray(warehouse: Warehouse, run: str, block_size: int | None = None,
                   tasks: int | None = None) -> dict[str, Any]:
    """`kvtrace.analysis.summary.run_summary` with the run's requests cut into shares counted
    as Ray tasks and the counts merged."""
    from kvtrace.analysis import connect
    from kvtrace.analysis.summary import run_summary

    ray = _ray()
    count = ray.remote(_count_share)
    shares = _tasks(ray, tasks)
    warehouse = _pin(warehouse)
    con = connect(warehouse)

    def counts(trace: StoredTrace) -> ShareCounts:
        refs = [count.remote(warehouse.location, warehouse.version, trace, share)
                for share in request_shares(trace_requests(con, trace), shares)]
        return merge(ray.get(refs))

    try:
        return run_summary(con, run, block_size, counts)
    finally:
        con.close()


def whatif_on_ray(warehouse: Warehouse, *, block_sizes: Sequence[int], tiers: Sequence[Tier],
                  policy: Policy, granularity: Granularity, scope: Scope,
                  bytes_per_token: int, runs: Sequence[str] | None,
                  tasks: int | None = None) -> WhatIf:
    """`kvtrace.analysis.kv_access.whatif.whatif` with each run's requests cut into shares
    simulated as Ray tasks (scope ``run``: one task per run), merged in request order."""
    from kvtrace.analysis import connect

    ray = _ray()
    check_tiers(tiers)
    tasks = _tasks(ray, tasks)
    warehouse = _pin(warehouse)
    con = connect(warehouse)
    try:
        requests = dict(con.execute(
            "SELECT run_id, list(DISTINCT request_id ORDER BY request_id) "
            "FROM _dsa_access_rows GROUP BY run_id ORDER BY run_id").fetchall())
    finally:
        con.close()
    chosen = [r for r in requests if runs is None or r in set(runs)]
    limits = tier_limits(tiers)
    simulate = ray.remote(_simulate_share)
    pending = []
    for block_size in block_sizes:
        for run_id in chosen:
            shares = ([None] if scope == "run"
                      else request_shares(requests[run_id], tasks))
            pending.append((block_size, [simulate.remote(
                warehouse.location, warehouse.version, block_size, policy, granularity, scope,
                limits, run_id, share) for share in shares]))

    def curves() -> Iterator[tuple[int, RunCurve]]:
        for block_size, refs in pending:
            parts = ray.get(refs)
            units = [unit for part_units, _ in parts for unit in part_units]
            if units:
                yield block_size, combine(units, np.zeros(0, np.int64), parts[0][1])

    return whatif_of_curves(curves(), tiers=tiers, policy=policy, granularity=granularity,
                            scope=scope, bytes_per_token=bytes_per_token, selected=runs)
