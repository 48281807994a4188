"""The CUDA event each event sync and stream wait of an Nsight Systems export waits on,
found as Kineto finds it, so that ``wait_on_stream`` and ``wait_on_correlation`` hold what
a PyTorch profiler trace of the same run would.

A synchronisation row (``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION``) of an event sync
(``cudaEventSynchronize``) or a stream wait (``cudaStreamWaitEvent``) names the event by
``eventId``; the event's records (``CUPTI_ACTIVITY_KIND_CUDA_EVENT``, one per
``cudaEventRecord``: ``streamId`` the stream recorded on, ``correlationId`` the record
call's) say where it was recorded.  An event may be recorded many times: the wait waits on
the latest record of the same event, in the same process and context, made before it,
that is the record with the largest correlation id below the wait's own (libkineto
``CuptiActivityProfiler.cpp`` ``getWaitEventInfo``, pytorch/kineto
114171dfba6867d2a898634670d9a3197dbb9595).  A wait with no such record gets -1 for both,
as Kineto writes it.  An export without the records table (nsys writes it when it traces
CUDA events) leaves both NULL: what the wait waits on is not known.  Correlation ids
follow the calls' order within a process, so the latest record by correlation id is the
one the CUDA runtime waits on; the ``eventSyncId`` later exports add to both tables
names the same record.
"""

from __future__ import annotations

import sqlite3
from array import array
from dataclasses import dataclass

import numpy as np

from kvtrace.ingest.readers._nsys_export import SYNCS, quote

EVENT_RECORDS = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"
EVENT_SYNCS = (1, 2)  # syncType of an event sync and a stream wait (Kineto's isEventSync)
NOT_FOUND = -1  # Kineto's stream and correlation for a wait whose record it did not see
_NO_STREAM = 0xFFFFFFFF  # CUPTI's "not applicable" stream id, which Kineto writes as -1
_KEY = ("globalPid", "contextId", "eventId")  # one event: its process, context and id
_RECORD_COLUMNS = frozenset({*_KEY, "correlationId", "streamId"})
_WAIT_COLUMNS = frozenset({*_KEY, "correlationId", "syncType"})


@dataclass(frozen=True)
class WaitLinks:
    """Per synchronisation row that waits on an event (by row id, ascending): the stream
    the event was recorded on and the correlation id of its ``cudaEventRecord``."""

    rows: np.ndarray
    streams: np.ndarray
    correlations: np.ndarray

    def lookup(self, row_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each row id: whether it is a wait here, and its stream and correlation
        (meaningless where it is not)."""
        if len(self.rows) == 0:
            none = np.zeros(len(row_ids), np.int64)
            return np.zeros(len(row_ids), bool), none, none
        place = np.minimum(np.searchsorted(self.rows, row_ids), len(self.rows) - 1)
        return self.rows[place] == row_ids, self.streams[place], self.correlations[place]


def wait_links(
    connection: sqlite3.Connection, columns: dict[str, frozenset[str]]
) -> WaitLinks | None:
    """The record each wait of the export waits on; None when the export has no event
    records (or lacks the columns that tie a wait to them)."""
    if not (
        columns.get(EVENT_RECORDS, frozenset()) >= _RECORD_COLUMNS
        and columns.get(SYNCS, frozenset()) >= _WAIT_COLUMNS
    ):
        return None
    key = ", ".join(map(quote, _KEY))
    types = ", ".join(map(str, EVENT_SYNCS))
    # records and waits of one event in correlation order; at one correlation a wait
    # comes first, so that only records made before it count
    query = (
        f"SELECT 0 AS is_wait, {key}, correlationId, streamId FROM {quote(EVENT_RECORDS)} "
        "WHERE correlationId IS NOT NULL "
        f"UNION ALL SELECT 1, {key}, correlationId, rowid FROM {quote(SYNCS)} "
        f"WHERE syncType IN ({types}) "
        "ORDER BY 2, 3, 4, 5, 1 DESC"
    )
    rows, streams, correlations = array("q"), array("q"), array("q")
    event: tuple[object, ...] | None = None
    stream = correlation = NOT_FOUND
    for is_wait, process, context, event_id, call, value in connection.execute(query):
        if (process, context, event_id) != event:
            event = (process, context, event_id)
            stream = correlation = NOT_FOUND
        if is_wait:
            rows.append(value)
            streams.append(stream)
            correlations.append(correlation)
        elif type(value) is int and type(call) is int:
            stream = NOT_FOUND if value == _NO_STREAM else value
            correlation = call
    order = np.argsort(np.frombuffer(rows, np.int64), kind="stable")
    return WaitLinks(
        np.frombuffer(rows, np.int64)[order],
        np.frombuffer(streams, np.int64)[order],
        np.frombuffer(correlations, np.int64)[order],
    )


def waits_without_records(
    connection: sqlite3.Connection, columns: dict[str, frozenset[str]]
) -> int:
    """How many event syncs and stream waits an export without event records holds
    (0 for an export that has them)."""
    if EVENT_RECORDS in columns or "syncType" not in columns.get(SYNCS, frozenset()):
        return 0
    types = ", ".join(map(str, EVENT_SYNCS))
    query = f"SELECT count(*) FROM {quote(SYNCS)} WHERE syncType IN ({types})"
    return int(connection.execute(query).fetchone()[0])


__all__ = ["EVENT_RECORDS", "EVENT_SYNCS", "WaitLinks", "wait_links", "waits_without_records"]
