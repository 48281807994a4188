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
    except Exception as exc:  # Ray's start-up fails with a bare Exception or RuntimeError
        raise start_failure(exc, address) from None


def start_failure(exc: Exception, address: str | None) -> KvtraceError:
    """One sentence for a Ray cluster that would not start or be joined: Ray's own first
    line, and what to do.  A node whose start-up timed out (ray/_private/node.py raises
    a bare Exception, ray/_private/services.py a TimeoutError) is most often a machine
    too busy to start Ray's processes in time."""
    cause = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    cause = cause if len(cause) <= 200 else cause[:199] + "…"
    where = (
        "start a cluster on this machine" if address is None else f"join the cluster at {address}"
    )
    timed_out = isinstance(exc, TimeoutError) or "timed out" in str(exc).lower()
    advice = (
        "start a cluster first (ray start --head) and pass --address auto, or use --engine local"
        if address is None
        else "check that cluster with ray status, or use --engine local"
    )
    if timed_out:
        advice = (
            "its start-up timed out, as it can on a busy machine: run again when the machine "
            f"is less loaded, {advice}"
        )
    return KvtraceError(
        f"Ray could not {where} ({type(exc).__name__}: {cause or 'no message'}); {advice}"
    )


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
