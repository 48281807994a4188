"""The one seam every heavy analysis runs through: plan shares, run each, merge in order.

An analysis (`ShareAnalysis`) cuts its work into shares (contiguous request ranges of a
run, say), computes a share from a warehouse connection, and merges the shares' parts in
the order it planned them, so that any cut gives the same answer bit for bit.  Where the
shares run is the caller's choice, made once:

- `run_here`: on one connection, one share after another;
- `run_analysis` with an executor (`concurrent.futures`; a process pool, or the Ray
  engine's `kvtrace.distributed.ray_engine.RayExecutor`): each share a task.  Every task
  reads the same pinned warehouse version, whatever other writers commit meanwhile, and
  a worker process keeps its connection to that version for its next tasks.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any, Generic, Protocol, TypeVar

import duckdb
import numpy as np

from kvtrace.warehouse import Warehouse

S = TypeVar("S")  # a share
P = TypeVar("P")  # what one share gives
R = TypeVar("R", covariant=True)  # the merged answer

THREADS_VARIABLE = "KVTRACE_THREADS"  # DuckDB threads of a worker's connection


class ShareAnalysis(Protocol, Generic[S, P, R]):
    """An analysis in shares.  Implementations are frozen dataclasses: they travel to
    worker processes with their shares."""

    def plan(self, con: duckdb.DuckDBPyConnection, tasks: int) -> list[S]:
        """The shares, in merge order; about ``tasks`` of them where the work allows."""
        ...

    def run(self, con: duckdb.DuckDBPyConnection, share: S) -> P:
        """One share's part (picklable)."""
        ...

    def merge(self, con: duckdb.DuckDBPyConnection, shares: list[S], parts: list[P]) -> R:
        """The answer from every share's part, given in plan order."""
        ...


def run_here(analysis: ShareAnalysis[Any, Any, R], con: duckdb.DuckDBPyConnection) -> R:
    """The analysis on ``con``: its shares in turn."""
    shares = analysis.plan(con, 1)
    return analysis.merge(con, shares, [analysis.run(con, share) for share in shares])


def run_analysis(
    analysis: ShareAnalysis[Any, Any, R],
    warehouse: Warehouse,
    executor: Executor | None = None,
    tasks: int | None = None,
) -> R:
    """The analysis over ``warehouse``: here, or with each share a task of ``executor``
    (about ``tasks`` shares; by default as many as the executor has workers)."""
    from kvtrace.analysis import open_analysis_connection

    if executor is None:
        con = open_analysis_connection(warehouse)
        try:
            return run_here(analysis, con)
        finally:
            con.close()
    pinned = (
        warehouse
        if warehouse.as_of is not None
        else Warehouse(warehouse.location, as_of=warehouse.version)
    )
    con = open_analysis_connection(pinned)
    try:
        workers: int = tasks or getattr(executor, "workers", None) or os.cpu_count() or 1
        shares = analysis.plan(con, workers)
        futures = [
            executor.submit(run_share, pinned.location, pinned.version, analysis, share)
            for share in shares
        ]
        return analysis.merge(con, shares, [future.result() for future in futures])
    finally:
        con.close()


def run_share(location: str, version: int, analysis: ShareAnalysis[S, P, Any], share: S) -> P:
    """One task: a share of ``analysis``, read from the pinned version."""
    return analysis.run(pinned_connection(location, version), share)


@functools.lru_cache(maxsize=2)
def pinned_connection(location: str, version: int) -> duckdb.DuckDBPyConnection:
    """A connection to the warehouse at ``version``, kept by a worker process for its
    next tasks: a version never changes, and opening one loads the whole SQL library.
    DuckDB runs on ``$KVTRACE_THREADS`` threads when the executor set it."""
    from kvtrace.analysis import open_analysis_connection

    con = open_analysis_connection(Warehouse(location, as_of=version))
    if threads := os.environ.get(THREADS_VARIABLE):
        con.execute(f"SET threads = {max(1, int(threads))}")
    return con


def request_shares(requests: Sequence[int], tasks: int) -> list[tuple[int, int] | None]:
    """``requests`` (ids, ascending) cut into at most ``tasks`` contiguous id ranges of
    near-equal counts; one share of every request (None) when ``tasks`` is 1.

    >>> request_shares([1, 2, 3, 7, 9], 2)
    [(1, 3), (7, 9)]
    """
    if tasks <= 1 or len(requests) <= 1:
        return [None]
    chunks = np.array_split(np.asarray(requests, dtype=np.int64), min(tasks, len(requests)))
    return [(int(c[0]), int(c[-1])) for c in chunks if len(c)]
