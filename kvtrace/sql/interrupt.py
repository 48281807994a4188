"""Ctrl-C and SIGTERM stop a running DuckDB query.

Python runs a signal's handler only when the main thread is back in the interpreter, and
a query runs inside DuckDB until it ends: a cross join would never see Ctrl-C.  While a
query runs, the signal also wakes a watcher thread (Python's wakeup file descriptor),
which interrupts the connection; the query then ends as the signal asked:
`KeyboardInterrupt` for Ctrl-C, `Terminated` for SIGTERM, whatever DuckDB raised.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING

from kvtrace.errors import Terminated

if TYPE_CHECKING:
    import duckdb

_STOPPING = {signal.SIGINT: KeyboardInterrupt, signal.SIGTERM: Terminated}


@contextmanager
def interruptible(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Within the block, Ctrl-C and SIGTERM interrupt ``con``'s query (on the main
    thread; elsewhere the block runs as it is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    received: list[int] = []

    def watch() -> None:
        while data := os.read(read_end, 64):
            signals = [number for number in data if number in _STOPPING]
            if signals:
                received.extend(signals)
                con.interrupt()
            if 0 in data:  # the block ended
                return

    watcher = threading.Thread(target=watch, name="kvtrace-interrupt", daemon=True)
    watcher.start()
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)

    def stop_watching() -> None:
        """End the watcher once it has read every byte written so far."""
        if watcher.is_alive():
            signal.set_wakeup_fd(previous)
            with suppress(OSError):
                os.write(write_end, b"\0")
            watcher.join()

    try:
        yield
    except Exception:  # DuckDB's InterruptException, or a RuntimeError while fetching
        # DuckDB polls for signals itself and can fail the query before the watcher has
        # read the signal's byte: the byte is in the pipe already, so read it first
        stop_watching()
        if not received:
            raise
        raise _STOPPING[signal.Signals(received[0])]() from None
    finally:
        stop_watching()
        os.close(read_end)
        os.close(write_end)
