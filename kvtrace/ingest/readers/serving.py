"""Read serving traces: KV pool time series and per-request metrics (JSONL).

These files are small next to DSA traces (one line per worker and tick, or per
request), so each line is parsed on its own and turned into a row by
`kvtrace.warehouse.rows.serving`; a line that fails goes to the quarantine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa

from kvtrace.ingest._lines import json_records, json_type, raw_text
from kvtrace.ingest._sources import printable
from kvtrace.ingest.family import Advance, FileRows, IngestOptions
from kvtrace.ingest.probe import Probe
from kvtrace.ingest.sink import FileSink
from kvtrace.warehouse.rows.rejects import BadLine
from kvtrace.warehouse.rows.serving import POOL_ALIASES, FieldError, pool_row, request_row
from kvtrace.warehouse.schema.serving import POOL_SNAPSHOTS, REQUEST_METRICS
from kvtrace.warehouse.schema.tables import TABLES

ServingKind = Literal["pool", "requests"]
_RUN_NAME_SUFFIXES = (
    "_pool_timeseries",
    "-pool-timeseries",
    "_pool_snapshots",
    "_pool",
    "_request_metrics",
    "_metrics",
    "-metrics",
    "_requests",
    "_summary",
)


def detect_serving_kind(record: dict[str, Any]) -> ServingKind | None:
    """``pool`` or ``requests`` from a first record's fields, or None."""
    if any(k in record for k in POOL_ALIASES["worker_id"]) and any(
        k in record for k in ("held_tokens", "available_tokens", "capacity_tokens", "poll_error")
    ):
        return "pool"
    markers = ("execution_mode", "ttft_s", "ttft", "latency_s", "error_type", "decode_worker")
    if any(k in record for k in markers):
        return "requests"
    return None


@dataclass
class ServingFileResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[BadLine] = field(default_factory=list)


def read_serving_file(
    path: Path, kind: ServingKind, progress: Callable[[int], None] | None = None
) -> ServingFileResult:
    """Parse every line of a pool series or request-metrics file."""
    convert = pool_row if kind == "pool" else request_row
    result = ServingFileResult()
    for line_no, text, record in json_records(path, result.rejected, progress):
        try:
            if not isinstance(record, dict):
                raise FieldError(f"expected a JSON object, got {json_type(record)}")
            result.rows.append(convert(record))
        except FieldError as exc:
            result.rejected.append(BadLine(line_no, f"bad value: {exc}", raw_text(text)))
    if kind == "pool":
        _fill_relative_time(result.rows)
    return result


def _fill_relative_time(rows: list[dict[str, Any]]) -> None:
    """Give rows without ``t_s`` the seconds since the file's first wall-clock stamp."""
    stamps = [row["ts"] for row in rows if row.get("ts") is not None]
    start = min(stamps) if stamps else None
    for row in rows:
        if row.get("t_s") is None:
            row["t_s"] = (row["ts"] - start).total_seconds() if row.get("ts") else None


def serving_run_name(probe: Probe) -> str:
    """``exp2_2p6d`` from ``exp2_2p6d_pool_timeseries.jsonl``; else the folder's name."""
    stem = printable(probe.path.name.split(".")[0])
    for suffix in _RUN_NAME_SUFFIXES:
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    return stem if len(stem) > 1 else printable(probe.path.parent.name)


@dataclass(frozen=True)
class ServingFamily:
    """KV pool time series (``pool``) or per-request serving metrics (``requests``)."""

    name: ServingKind
    reads_only_record_keys = False

    @property
    def table(self) -> str:
        return POOL_SNAPSHOTS.name if self.name == "pool" else REQUEST_METRICS.name

    @property
    def reads(self) -> str:
        if self.name == "pool":
            return "pool snapshots (worker_id, held_tokens)"
        return "request metrics (execution_mode, latency_s)"

    @property
    def tables(self) -> tuple[str, ...]:
        return (self.table,)

    def recognise(self, probe: Probe) -> str | None:
        record = probe.first_record
        return (
            self.name if record is not None and detect_serving_kind(record) == self.name else None
        )

    def forced_format(self, probe: Probe) -> str:
        return self.name

    def run_name(self, probe: Probe, fmt: str, options: IngestOptions) -> str:
        return options.run_name or serving_run_name(probe)

    def read(
        self, probe: Probe, fmt: str, sink: FileSink, options: IngestOptions, advance: Advance
    ) -> FileRows:
        result = read_serving_file(probe.path, self.name, advance)
        label = options.experiment or self.run_name(probe, fmt, options)
        for row in result.rows:
            row["experiment"] = label
        stored = sink.write(
            self.table, pa.Table.from_pylist(result.rows, schema=TABLES[self.table].schema)
        )
        return FileRows(
            "serving", rows=stored, rejected=result.rejected, config={"experiment": label}
        )


POOL = ServingFamily("pool")
REQUESTS = ServingFamily("requests")
