"""Read ahead in a thread: the next items are produced while the caller works on this one."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar, cast

Item = TypeVar("Item")
_END = object()


def prefetched(
    items: Iterator[Item], depth: int = 1, name: str = "kvtrace-prefetch"
) -> Iterator[Item]:
    """``items``, produced by a thread up to ``depth`` ahead of the caller.

    At most ``depth`` (at least 1) items are being produced or wait while the caller
    holds one.  Worth it when producing and consuming release the GIL (Arrow, DuckDB,
    NumPy and the compiled kernels do).  An exception in the thread is raised again in
    the caller's; the thread stops when the caller stops iterating.
    """
    with ThreadPoolExecutor(1, thread_name_prefix=name) as thread:
        # one thread runs the calls in order, so ``items`` is never advanced twice at once
        pending: deque[Future[object]] = deque(
            thread.submit(next, items, _END) for _ in range(depth)
        )
        try:
            while (item := pending.popleft().result()) is not _END:
                pending.append(thread.submit(next, items, _END))
                yield cast(Item, item)
        finally:
            for future in pending:
                future.cancel()
