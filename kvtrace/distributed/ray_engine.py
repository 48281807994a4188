"""The Ray engine: a cluster to start or join, and an executor whose tasks run on it.

Everything kvtrace spreads over workers goes through `RayExecutor`: ingest (a task per
file) and every analysis of `kvtrace.analysis.shares` (a task per share).  The engine
holds no analysis of its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from kvtrace.analysis.shares import THREADS_VARIABLE
from kvtrace.errors import KvtraceError


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
        ray.init(
            address=address,
            logging_level="ERROR",
            log_to_driver=False,
            include_dashboard=False if address is None else None,
        )
    except ConnectionError as exc:
        raise KvtraceError(f"cannot reach the Ray cluster at {address}: {exc}") from None


class RayExecutor(Executor):
    """A `concurrent.futures.Executor` whose tasks run on the Ray cluster; each task's
    DuckDB connections use as many threads as Ray gave it CPUs."""

    @property
    def workers(self) -> int:
        """The cluster's CPUs: how many tasks run at once."""
        return max(1, int(_ray().cluster_resources().get("CPU", os.cpu_count() or 1)))

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        return _ray().remote(_with_threads).remote(fn, *args, **kwargs).future()


def _with_threads(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``fn`` in a Ray task, telling DuckDB the task's CPUs."""
    cpus = _ray().get_runtime_context().get_assigned_resources().get("CPU", 1)
    os.environ[THREADS_VARIABLE] = str(max(1, int(cpus)))
    return fn(*args, **kwargs)
