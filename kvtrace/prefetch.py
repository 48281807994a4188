"""Read ahead in a thread: the next items are produced while the caller works on this one."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from queue import Full, Queue
from typing import TypeVar

Item = TypeVar("Item")


def prefetched(
    items: Iterator[Item], depth: int = 2, name: str = "kvtrace-prefetch"
) -> Iterator[Item]:
    """``items``, produced by a thread up to ``depth`` ahead of the caller.

    Worth it when producing and consuming release the GIL (Arrow, DuckDB, NumPy and the
    compiled kernels do).  An exception in the thread is raised again in the caller's;
    the thread stops when the caller stops iterating.
    """
    queue: Queue[tuple[Item] | BaseException | None] = Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        queue.put((item,), timeout=0.1)
                        break
                    except Full:
                        continue
                if stop.is_set():
                    return
            queue.put(None)
        except BaseException as exc:  # raised again in the caller's thread
            queue.put(exc)

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while (entry := queue.get()) is not None:
            if isinstance(entry, BaseException):
                raise entry
            yield entry[0]
    finally:
        stop.set()
        thread.join()
