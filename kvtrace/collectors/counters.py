"""Write named counters on a PyTorch profiler's clock, for ``kvtrace ingest``.

An offloader counts what it does (prefetch hits and misses, copies queued, pool bytes,
bytes written to disk) and calls `CounterWriter.add` with the value; each call writes one
JSONL line ``{"ts_us", "name", "value", "labels", "rank"}`` that the ``counters``
family reads into ``timeline_counters``, on the same clock as the trace's events::

    from kvtrace.collectors.counters import CounterWriter

    with CounterWriter("run/counters.jsonl", rank=0) as counters:
        counters.add("kv_prefetch_hits", hits, labels={"layer": 3})

The clock: Kineto writes each event's ``ts`` as its Unix time in nanoseconds less the
trace's ``baseTimeNanoseconds``, in microseconds; that base is the Unix time floored to
a multiple of 7,889,238 s (three months), taken once per process.  `kineto_base_time_ns`
works it out the same way, so a counters file and a trace of one process agree without
either reading the other; give ``base_time_ns`` (the trace's own, or 0 for a trace of a
Kineto version that writes absolute Unix microseconds and no base) to be sure.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

from kvtrace.errors import InputError

KINETO_BASE_PERIOD_NS = 7_889_238 * 10**9  # Kineto's base time: whole three-month periods

LabelValue = str | int | float | bool


def kineto_base_time_ns(unix_ns: int | None = None) -> int:
    """The ``baseTimeNanoseconds`` a PyTorch profiler started at ``unix_ns`` (now, by
    default) writes: that Unix time floored to a multiple of three months."""
    now = time.time_ns() if unix_ns is None else unix_ns
    return now - now % KINETO_BASE_PERIOD_NS


def _is_finite(value: object) -> bool:
    """Whether ``value`` is a number a float64 holds (not a boolean, NaN or infinity)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer beyond a float64
        return False


class CounterWriter:
    """Appends counter values to a JSONL file, one line per value, safe to call from
    several threads (an offloader's prefetch and writer threads)."""

    def __init__(
        self,
        path: str | Path,
        *,
        rank: int | None = None,
        base_time_ns: int | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.path = Path(path)
        self.rank = rank
        self._clock_ns = clock_ns
        if base_time_ns is None:
            base_time_ns = kineto_base_time_ns(clock_ns())
        self.base_time_ns = base_time_ns
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)  # the trace's, maybe not yet
            self._file: IO[str] | None = self.path.open("a", encoding="utf-8", buffering=1)
        except OSError as exc:
            raise InputError(f"cannot write counters to {self.path}: {exc.strerror}") from None

    def now_us(self) -> float:
        """The time now on the profiler's clock, in microseconds."""
        return (self._clock_ns() - self.base_time_ns) / 1000

    def add(
        self,
        name: str,
        value: float,
        labels: Mapping[str, LabelValue] | None = None,
        *,
        ts_us: float | None = None,
    ) -> None:
        """Write one value of counter ``name`` (at ``ts_us``, else now)."""
        if not name or not isinstance(name, str):
            raise InputError(f"a counter needs a name, got {name!r}")
        if not _is_finite(value):
            raise InputError(f"counter {name!r} needs a finite number, got {value!r}")
        if ts_us is not None and not _is_finite(ts_us):
            raise InputError(f"counter {name!r} needs a finite number of us, got {ts_us!r}")
        kept = dict(labels or {})
        if any(not isinstance(v, (str, int, float, bool)) for v in kept.values()):
            raise InputError(f"counter {name!r} needs labels of text, numbers or booleans")
        record = {
            "ts_us": self.now_us() if ts_us is None else ts_us,
            "name": name,
            "value": value,
            "labels": kept,
            "rank": self.rank,
        }
        line = json.dumps(record, sort_keys=True) + "\n"
        with self._lock:
            if self._file is None:
                raise InputError(f"the counters file {self.path} is closed")
            self._file.write(line)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> CounterWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


__all__ = ["KINETO_BASE_PERIOD_NS", "CounterWriter", "kineto_base_time_ns"]
