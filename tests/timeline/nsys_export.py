"""Build small Nsight Systems SQLite exports for the tests, with the schema nsys documents.

The tables, their column names and types, and the enumeration rows are those of NVIDIA's
"SQLite Schema Reference" (Nsight Systems User Guide; export schema 3.16.1, Nsight
Systems 2024.6.2, https://docs.nvidia.com/nsight-systems/UserGuide/index.html), limited
to the tables kvtrace reads and the ones that say what the export is.  Times are
nanoseconds since the capture session's start; threads and processes are serialized as
the reference's "Serialized process and thread identifiers" recipe decodes them.

``CUPTI_ACTIVITY_KIND_CUDA_EVENT`` (one row per cudaEventRecord: the stream, the call's
correlation id and the event's id, no time) has the reference's columns, with
``greenContextId`` beside ``contextId`` as in the synchronisation table of this schema;
earlier references list neither table with ``greenContextId``, and later ones add a
``timestamp`` and an ``eventSyncId`` to it, none of which kvtrace reads.
"""

from __future__ import annotations

import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
    shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER,
    cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL,
    gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL,
    blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL,
    dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL,
    localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL,
    sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL,
    copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER,
    srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER,
    migrationCause INTEGER, graphNodeId INTEGER, virtualAddress INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL,
    bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
    globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
    returnValue INTEGER NOT NULL, callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, syncType INTEGER NOT NULL,
    eventId INTEGER NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_CUDA_EVENT (
    deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER,
    streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    eventId INTEGER NOT NULL);
CREATE TABLE NVTX_EVENTS (
    start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
    category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
    textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER,
    doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue REAL,
    jsonTextId INTEGER, jsonText TEXT, binaryData TEXT);
CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE ENUM_CUPTI_SYNC_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
"""
COPY_KINDS = [
    (0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown"),
    (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
    (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"),
    (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"),
    (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer"),
    (11, "CUDA_MEMCPY_KIND_UVM_HTOD", "Unified Host-to-Device"),
]
MEMORY_KINDS = [
    (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"),
    (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
    (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"),
    (4, "CUDA_MEMOPR_MEMORY_KIND_MANAGED", "Managed"),
    (7, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown"),
]
SYNC_TYPES = [
    (1, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE", "Event sync"),
    (2, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT", "Stream wait sync"),
    (3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "Stream sync"),
    (4, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE", "Context sync"),
]
EVENT_TYPES = [
    (34, "NvtxMark", "NvtxMark"),
    (59, "NvtxPushPopRange", "NvtxPushPopRange"),
    (60, "NvtxStartEndRange", "NvtxStartEndRange"),
]
COPY = {"HtoD": 1, "DtoH": 2, "DtoD": 8, "PtoP": 10, "UVM HtoD": 11}
MEMORY = {"Pageable": 0, "Pinned": 1, "Device": 2, "Managed": 4}
PUSH_POP, START_END, MARK = 59, 60, 34
EVENT_SYNC, STREAM_WAIT, CONTEXT_SYNC = 1, 2, 4  # SYNC_TYPES
GEMM = "void gemm_kernel<float>(float*, float const*, int)"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NO_STREAM = 0xFFFFFFFF  # CUPTI's "not applicable" stream id
# bits above the process id (48 and up) hold the machine's id, which the decode masks off
_MACHINE = 1 << 48


def global_tid(pid: int, tid: int) -> int:
    """A serialized thread id: the process id in bits 24-47, the thread id in bits 0-23."""
    return _MACHINE | pid << 24 | tid


def global_pid(pid: int) -> int:
    """A serialized process id."""
    return _MACHINE | pid << 24


@dataclass
class NsysExport:
    """The rows of one export, added event by event, written with `write`."""

    pid: int = 4242  # the traced process, and its main thread's id
    # one second after a base time of Kineto's clock (215 periods of 7,889,238 s)
    session_start_utc_ns: int = 215 * 7_889_238 * 10**9 + 10**9
    strings: dict[str, int] = field(default_factory=dict)
    rows: dict[str, list[tuple[object, ...]]] = field(default_factory=dict)

    def string(self, text: str) -> int:
        """The StringIds id of ``text``."""
        return self.strings.setdefault(text, len(self.strings) + 1)

    def _add(self, table: str, *values: object) -> None:
        self.rows.setdefault(table, []).append(values)

    def runtime(
        self, name: str, start: int, end: int, correlation: int, pid: int | None = None
    ) -> None:
        """A CUDA runtime or driver API call on the process's main thread."""
        pid = pid or self.pid
        self._add(
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            start, end, 0, global_tid(pid, pid), correlation, self.string(name), 0, None,
        )  # fmt: skip

    def kernel(
        self, name: str, start: object, end: object, stream: int, correlation: int,
        device: int = 0, pid: int | None = None,
    ) -> None:  # fmt: skip
        """A kernel (its demangled name; the short name is what precedes ``<`` or ``(``)."""
        short = name.split("(")[0].split("<")[0].split()[-1]
        self._add(
            "CUPTI_ACTIVITY_KIND_KERNEL",
            start, end, device, 1, None, stream, correlation, global_pid(pid or self.pid),
            self.string(name), self.string(short), None, 0, 0, 32, 1, 1, 1, 128, 1, 1, 0, 0,
            0, 0, correlation, 0, None, None,
        )  # fmt: skip

    def memcpy(
        self, kind: str, source: str, target: str, start: int, end: int, stream: int,
        correlation: int, count: int, device: int = 0,
    ) -> None:  # fmt: skip
        """A copy of ``count`` bytes."""
        self._add(
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            start, end, device, 1, None, stream, correlation, global_pid(self.pid), count,
            COPY[kind], None, MEMORY[source], MEMORY[target], device, 1, device, 1, None,
            None, None,
        )  # fmt: skip

    def memset(
        self, memory: str, start: int, end: int, stream: int, correlation: int, count: int
    ) -> None:
        """A memset of ``count`` bytes."""
        self._add(
            "CUPTI_ACTIVITY_KIND_MEMSET",
            start, end, 0, 1, None, stream, correlation, global_pid(self.pid), 0, count,
            None, MEMORY[memory],
        )  # fmt: skip

    def sync(
        self, sync_type: int, start: int, end: int, stream: int, correlation: int,
        event: int = 1, context: int = 1,
    ) -> None:  # fmt: skip
        """A synchronisation (`SYNC_TYPES`); an event sync or stream wait names the CUDA
        event it waits on."""
        self._add(
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
            start, end, 0, context, None, stream, correlation, global_pid(self.pid),
            sync_type, event,
        )  # fmt: skip

    def event_record(
        self, event: int, stream: int, correlation: int, context: int = 1,
        pid: int | None = None,
    ) -> None:  # fmt: skip
        """A record of CUDA event ``event`` on ``stream`` by the cudaEventRecord call of
        ``correlation`` (a record has no time of its own)."""
        self._add(
            "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
            0, context, None, stream, correlation, global_pid(pid or self.pid), event,
        )  # fmt: skip

    def nvtx(
        self, text: str, start: int, end: int | None, event_type: int = PUSH_POP,
        registered: bool = False,
    ) -> None:  # fmt: skip
        """An NVTX range (or mark) on the main thread; a registered string goes through
        StringIds (``textId``), another is the row's ``text``."""
        text_id = self.string(text) if registered else None
        self._add(
            "NVTX_EVENTS",
            start, end, event_type, None, None, None, None if registered else text,
            global_tid(self.pid, self.pid), None, text_id, None, None, None, None, None,
            None, None, None, None, None,
        )  # fmt: skip

    def write(self, path: Path, without: tuple[str, ...] = ()) -> Path:
        """The export as an SQLite database at ``path`` (replacing a file there); the
        tables named in ``without`` left out, with their rows, as a version of nsys that
        did not write them would."""
        path.unlink(missing_ok=True)
        with sqlite3.connect(path) as db:
            db.executescript(SCHEMA)
            for table in without:
                db.execute(f"DROP TABLE {table}")
            db.executemany(
                "INSERT INTO StringIds VALUES (?, ?)",
                [(id_, text) for text, id_ in self.strings.items()],
            )
            db.execute(
                "INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, ?, ?)",
                (self.session_start_utc_ns, "2023-10-01T18:49:31Z", "2023-10-01T18:49:31"),
            )
            db.executemany(
                "INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
                [("EXPORT_PRODUCT_VERSION", "2024.6.2.225"), ("EXPORT_SCHEMA_VERSION", "3.16.1")],
            )
            for table, enum in (
                ("ENUM_CUDA_MEMCPY_OPER", COPY_KINDS),
                ("ENUM_CUDA_MEM_KIND", MEMORY_KINDS),
                ("ENUM_CUPTI_SYNC_TYPE", SYNC_TYPES),
                ("ENUM_NSYS_EVENT_TYPE", EVENT_TYPES),
            ):
                db.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", enum)
            for table, rows in self.rows.items():
                if table in without:
                    continue
                marks = ", ".join("?" * len(rows[0]))
                db.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        db.close()
        return path


def example() -> NsysExport:
    """The export the tests and the timelines guide use: one process (4242) on device 0,
    times in ns.  In start order (ties: ranges, calls, kernels, copies, memsets, syncs),
    the rows that become events 0 to 16; then three rows that become none."""
    x = NsysExport()
    x.nvtx("ProfilerStep#1", 1_000, 101_000)  # 0: the iteration, [1, 101) us
    x.nvtx("decode", 2_000, 90_000, event_type=START_END, registered=True)  # 1
    x.runtime("cuModuleGetFunction", 3_000, 3_500, 8)  # 2: a driver call
    x.runtime("cudaLaunchKernel_v7000", 5_000, 8_000, 1)  # 3
    x.runtime("cudaMemcpyAsync_v3020", 9_000, 12_500, 2)  # 4
    x.kernel(GEMM, 10_000, 40_000, stream=7, correlation=1)  # 5: [10, 40) us
    x.memcpy("HtoD", "Pinned", "Device", 30_000, 60_000, 20, 2, 3_000_000)  # 6: [30, 60)
    x.runtime("cudaLaunchKernel_v7000", 45_000, 47_250, 3)  # 7
    x.runtime("cudaMemsetAsync_v3020", 48_000, 49_000, 4)  # 8
    x.kernel(GEMM, 50_000, 70_000, stream=7, correlation=3)  # 9: [50, 70)
    x.runtime("cudaLaunchKernel_v7000", 60_000, 61_000, 5)  # 10
    x.kernel(NCCL, 62_000, 80_000, stream=30, correlation=5)  # 11: [62, 80)
    x.memset("Device", 71_500, 72_500, 7, 4, 4096)  # 12: [71.5, 72.5)
    x.runtime("cudaMemcpyAsync_v3020", 75_000, 76_000, 6)  # 13
    x.memcpy("DtoH", "Device", "Pageable", 80_000, 90_500, 20, 6, 1000)  # 14: [80, 90.5)
    x.runtime("cudaDeviceSynchronize_v3020", 91_000, 99_000, 7)  # 15
    x.sync(CONTEXT_SYNC, 91_200, 98_800, NO_STREAM, 7)  # 16
    x.nvtx("tick", 3_000, None, event_type=MARK)  # an instant: left out
    x.nvtx("never closed", 95_000, None)  # a range that never ended: left out
    x.kernel("broken", 100_000, 99_000, stream=7, correlation=9)  # ends first: quarantined
    return x


def copy_wait_example() -> NsysExport:
    """An export where a kernel waits on a copy through a CUDA event (as the worked
    example of ``timeline_copy_wait_idle``): events 0 to 16 in start order, times in ns.

    Event 5 is recorded four times in process 4242's context 1 (on stream 7 by call 2,
    on stream 20 by call 4, on stream 7 again by call 8) and once in its context 2 (call
    5), and once by another process; the stream wait of call 6 waits on the latest
    record of its context before it (call 4, stream 20), the event sync of call 9 on
    call 8's (stream 7); event 9 is never recorded."""
    x = NsysExport()
    x.nvtx("ProfilerStep#1", 1_000, 199_000)  # 0
    x.runtime("cudaLaunchKernel_v7000", 2_000, 4_000, 1)  # 1
    x.runtime("cudaEventRecord_v3020", 5_000, 6_000, 2)  # 2
    x.event_record(5, stream=7, correlation=2)
    x.kernel(GEMM, 10_000, 100_000, stream=7, correlation=1)  # 3: [10, 100) us
    x.runtime("cudaMemcpyAsync_v3020", 60_000, 62_000, 3)  # 4
    x.runtime("cudaEventRecord_v3020", 70_000, 71_000, 4)  # 5
    x.event_record(5, stream=20, correlation=4)
    x.runtime("cudaEventRecord_v3020", 72_000, 73_000, 5)  # 6
    x.event_record(5, stream=40, correlation=5, context=2)
    x.event_record(5, stream=50, correlation=5, pid=999)
    x.runtime("cudaStreamWaitEvent_v3020", 80_000, 81_000, 6)  # 7
    x.sync(STREAM_WAIT, 80_200, 80_700, stream=7, correlation=6, event=5)  # 8
    x.runtime("cudaLaunchKernel_v7000", 85_000, 87_000, 7)  # 9
    x.runtime("cudaEventRecord_v3020", 88_000, 89_000, 8)  # 10
    x.event_record(5, stream=7, correlation=8)
    x.memcpy("HtoD", "Pinned", "Device", 90_000, 150_000, 20, 3, 6_000_000)  # 11
    x.kernel(GEMM, 155_000, 185_000, stream=7, correlation=7)  # 12: [155, 185) us
    x.runtime("cudaEventSynchronize_v3020", 186_000, 190_000, 9)  # 13
    x.sync(EVENT_SYNC, 186_500, 189_500, NO_STREAM, correlation=9, event=5)  # 14
    x.runtime("cudaStreamWaitEvent_v3020", 191_000, 192_000, 10)  # 15
    x.sync(STREAM_WAIT, 191_200, 191_500, stream=20, correlation=10, event=9)  # 16
    return x


if __name__ == "__main__":  # python -m tests.timeline.nsys_export OUT.sqlite
    example().write(Path(sys.argv[1]))
