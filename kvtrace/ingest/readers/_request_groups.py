"""Store an arrival trace's requests in row groups, arrival times counted from the trace's
earliest arrival.

A reader hands over checked requests in file order, each keyed by its data row, with its
arrival time as the trace states it (seconds).  `RequestGroups` stores them a row group
at a time, counted from the earliest arrival seen when the first group was stored.  A
trace in arrival order starts with its earliest arrival; in one out of order a request
after the first group may arrive earlier still, and `origin_missed` then says that the
groups stored count from a later moment: the reader discards them and reads the trace
again, the earliest arrival given as the ``origin``.
"""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.ingest.sink import ThreadedFile


class RequestGroups:
    """The ``workload_requests`` file of one trace, filled a row group at a time."""

    def __init__(self, file: ThreadedFile, group_rows: int, origin: float | None = None) -> None:
        self.file, self.group_rows = file, group_rows
        self.origin = origin  # the arrival stored as time 0, once a group is stored
        self._pending: list[pa.Table] = []
        self._rows = 0

    def add(self, requests: pa.Table, earliest: float) -> None:
        """Add requests whose ``arrival_s`` is as the trace states it; ``earliest`` is the
        earliest arrival of the trace so far."""
        self._pending.append(requests)
        self._rows += requests.num_rows
        if self._rows >= self.group_rows:
            self._store(earliest)

    def origin_missed(self, earliest: float) -> bool:
        """Whether groups were stored counted from a later arrival than ``earliest``."""
        return self.origin is not None and earliest < self.origin

    def close(self, earliest: float) -> int:
        """Store what is pending and finish the file; returns the requests stored."""
        if self._pending:
            self._store(earliest)
        return self.file.close()

    def discard(self) -> None:
        """Drop the file and everything stored in it."""
        self._pending = []
        self.file.discard()

    def _store(self, earliest: float) -> None:
        if self.origin is None:
            self.origin = earliest if math.isfinite(earliest) else 0.0  # (no arrival kept)
        group = pa.concat_tables(self._pending)
        index = group.schema.get_field_index("arrival_s")
        counted = pc.subtract(group["arrival_s"], pa.scalar(self.origin, pa.float64()))
        self.file.append(group.set_column(index, "arrival_s", counted))
        self._pending, self._rows = [], 0
