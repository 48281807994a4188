"""Rows of an Nsight Systems export's event query (`_nsys_export.COLUMNS`) as
``timeline_events`` columns, built column by column (Arrow and numpy for the numbers, one
pass with a cache for the names), as `kvtrace.ingest.readers.nsys` documents them."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.ingest.readers import _nsys_export as export
from kvtrace.ingest.readers._nsys_waits import EVENT_SYNCS, WaitLinks
from kvtrace.warehouse.schema.timeline import TIMELINE_EVENTS

NVTX, RUNTIME, KERNEL, COPY, MEMSET, SYNC = range(len(export.SOURCES))
CATEGORIES = ("user_annotation", "cuda_runtime", "kernel", "gpu_memcpy", "gpu_memset", "cuda_sync")
SYNC_NAMES = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
STREAMLESS_SYNCS = (1, 4)  # CUPTI gives no stream for event and context syncs
NO_STREAM = (-1, 0xFFFFFFFF)  # CUPTI's "not applicable" stream id, signed or not
_API_VERSION = re.compile(r"_v\d{4,}$")  # CUDA's version suffix; a driver API's _v2 stays
_COPY_DIRECTION = re.compile(r"([A-Z])TO([A-Z])")

Description = tuple[str, str, str | None]  # name, category, copy kind


def api_name(name: str) -> str:
    """A CUDA API function's name as Kineto writes it: without a ``_vNNNN`` suffix."""
    return _API_VERSION.sub("", name)


def copy_kind(symbol: str | None) -> str | None:
    """Kineto's name of a copy kind from nsys's symbol: ``CUDA_MEMCPY_KIND_HTOD`` is
    ``HtoD``, ``CUDA_MEMCPY_KIND_UVM_DTOH`` ``DtoH``; None for an unknown kind."""
    body = (symbol or "").removeprefix("CUDA_MEMCPY_KIND_").removeprefix("UVM_")
    match = _COPY_DIRECTION.fullmatch(body)
    return f"{match[1]}to{match[2]}" if match else None


class ColumnBuilder:
    """Turns batches of one export's rows into `TIMELINE_EVENTS` tables."""

    def __init__(
        self,
        enums: export.Enumerations,
        strings: export.Strings,
        offset_ns: int,
        rank: int | None,
        ranks: dict[int, int],
        waits: WaitLinks | None,
    ) -> None:
        self.enums = enums
        self.strings = strings
        self.offset_ns = offset_ns  # the session's start on the clock ts_us is on
        self.rank = rank  # every row's, where ``ranks`` is empty
        self.ranks = ranks  # process id -> rank, where several processes ran GPU work
        self.waits = waits  # what each wait waits on; None: the export does not say
        self._described: dict[tuple[Any, ...], Description] = {}

    def table(self, rows: list[tuple[Any, ...]], indices: list[int]) -> pa.Table:
        """The rows (whose start and end are integers, end >= start) as one table;
        ``indices`` are their places among the export's events."""
        (source, row, start, end, gid, device, stream, correlation, name, kind, src, dst,
         count, subtype) = zip(*rows, strict=True)  # fmt: skip
        size = len(rows)
        sources = np.fromiter(source, np.int8, size)
        starts = np.fromiter(start, np.int64, size)
        lengths = np.fromiter(end, np.int64, size) - starts
        on_gpu = pa.array(sources >= KERNEL)
        global_ids = _integers(gid)
        pids = pc.bit_wise_and(pc.shift_right(global_ids, 24), 0xFFFFFF)
        devices = _integers(device)
        subtypes = _integers(subtype)
        streams = _streams(_integers(stream), subtypes, sources)
        wait_on_stream, wait_on_correlation = self._waited_on(sources, row, subtypes)
        described = map(self._describe, source, name, kind, src, dst, subtype)
        names, categories, kinds = zip(*described, strict=True)
        counts = _integers(count)
        lengths_ns = pa.array(lengths, pa.float64())
        bandwidth = pc.if_else(
            pc.greater(lengths_ns, 0), pc.divide(pc.cast(counts, pa.float64()), lengths_ns), None
        )
        columns = {
            "run_id": pa.nulls(size, pa.string()),
            "rank": self._ranks_of(pids, size),
            "event_idx": pa.array(indices, pa.int64()),
            "pid": pc.if_else(on_gpu, _text(devices), _text(pids)),
            "tid": pc.if_else(on_gpu, _text(streams), _text(pc.bit_wise_and(global_ids, 0xFFFFFF))),
            "stream": streams,
            "device": devices,
            "category": pa.array(categories, pa.string()),
            "name": pa.array(names, pa.string()),
            # (offset + start) is exact in float64 below 2**53 ns, and / 1000 rounds once
            "ts_us": pa.array((starts + self.offset_ns) / 1000, pa.float64()),
            "dur_us": pa.array(lengths / 1000, pa.float64()),
            "correlation": _integers(correlation),
            "external_id": pa.nulls(size, pa.int64()),
            "copy_kind": pa.array(kinds, pa.string()),
            "bytes": counts,
            "wait_on_stream": wait_on_stream,
            "wait_on_correlation": wait_on_correlation,
            "memory_bw_gbps": bandwidth,
        }
        return pa.table(columns, schema=TIMELINE_EVENTS.schema)

    def _waited_on(
        self, sources: np.ndarray, rows: tuple[Any, ...], subtypes: pa.Array
    ) -> tuple[pa.Array, pa.Array]:
        """Each event sync's and stream wait's ``wait_on_stream`` and
        ``wait_on_correlation`` (the stream and record call of the event it waits on);
        null for every other row, and for all where the export has no event records."""
        size = len(sources)
        kinds = pc.fill_null(subtypes, 0).to_numpy(zero_copy_only=False)
        waiting = (sources == SYNC) & np.isin(kinds, EVENT_SYNCS)
        if self.waits is None or not waiting.any():
            return pa.nulls(size, pa.int64()), pa.nulls(size, pa.int64())
        found, streams, correlations = self.waits.lookup(np.fromiter(rows, np.int64, size))
        unknown = ~(found & waiting)
        return (
            pa.array(streams, pa.int64(), mask=unknown),
            pa.array(correlations, pa.int64(), mask=unknown),
        )

    def _ranks_of(self, pids: pa.Array, size: int) -> pa.Array:
        if not self.ranks:
            return pa.repeat(pa.scalar(self.rank, pa.int32()), size)
        return pa.array([self.ranks.get(pid) for pid in pids.to_pylist()], pa.int32())

    def _describe(
        self, source: int, name: Any, kind: Any, src: Any, dst: Any, subtype: Any
    ) -> Description:
        """A row's name, category and copy kind (remembered for all but NVTX ranges with
        a text of their own, which may all differ)."""
        if source == NVTX and type(name) is not int:
            return (name if isinstance(name, str) else "", CATEGORIES[NVTX], None)
        key = (source, name, kind, src, dst, subtype)
        if (known := self._described.get(key)) is None:
            known = self._described[key] = self._new_description(*key)
        return known

    def _new_description(
        self, source: int, name: Any, kind: Any, src: Any, dst: Any, subtype: Any
    ) -> Description:
        text = self.strings(name) if type(name) is int else ""
        if source == NVTX:
            return text, CATEGORIES[NVTX], None
        if source == RUNTIME:
            text = api_name(text)
            return text, "cuda_runtime" if text.startswith("cuda") else "cuda_driver", None
        if source == KERNEL:
            return text, CATEGORIES[KERNEL], None
        if source == SYNC:
            return SYNC_NAMES.get(subtype, "Unknown Sync"), CATEGORIES[SYNC], None
        if source == MEMSET:
            return f"Memset ({self._memory(subtype)})", CATEGORIES[MEMSET], None
        direction = copy_kind(self.enums.copy_kinds.get(kind)) if type(kind) is int else None
        copy = f"Memcpy {direction or '<unknown>'} ({self._memory(src)} -> {self._memory(dst)})"
        return copy, CATEGORIES[COPY], direction

    def _memory(self, kind: Any) -> str:
        """A memory kind's label (Pageable, Pinned, Device, ...)."""
        return self.enums.memory_kinds.get(kind, "Unknown") if type(kind) is int else "Unknown"


def _integers(values: tuple[Any, ...]) -> pa.Array:
    """SQLite values as int64: an integer as it is, anything else (NULL, text, a real)
    as null."""
    try:
        return pa.array(values, pa.int64())  # fails on text or a real: then one by one
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([v if type(v) is int else None for v in values], pa.int64())


def _streams(streams: pa.Array, subtypes: pa.Array, sources: np.ndarray) -> pa.Array:
    """GPU events' streams as Kineto writes them: -1 where none applies."""
    kinds = pc.fill_null(subtypes, 0).to_numpy(zero_copy_only=False)
    streamless = pa.array((sources == SYNC) & np.isin(kinds, STREAMLESS_SYNCS))
    no_stream = pc.or_(pc.fill_null(pc.is_in(streams, pa.array(NO_STREAM)), False), streamless)
    return pc.if_else(no_stream, -1, streams)


def _text(values: pa.Array) -> pa.Array:
    return pc.cast(values, pa.string())


__all__ = ["ColumnBuilder", "api_name", "copy_kind"]
