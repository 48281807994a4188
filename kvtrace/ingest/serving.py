"""Read serving traces: KV pool time series and per-request metrics (JSONL).

These files are small next to DSA traces (one line per worker and tick, or per
request), so each line is parsed on its own and turned into a row by
`kvtrace.warehouse.serving_rows`; a line that fails goes to the quarantine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from kvtrace.ingest.lines import json_records, raw_text
from kvtrace.warehouse.rejects import BadLine
from kvtrace.warehouse.serving_rows import POOL_ALIASES, FieldError, pool_row, request_row

ServingKind = Literal["pool", "requests"]


def detect_serving_kind(record: dict) -> ServingKind | None:
    """``pool`` or ``requests`` from a first record's fields, or None."""
    if any(k in record for k in POOL_ALIASES["worker_id"]) and any(
            k in record for k in ("held_tokens", "available_tokens", "capacity_tokens",
                                  "poll_error")):
        return "pool"
    markers = ("execution_mode", "ttft_s", "ttft", "latency_s", "error_type", "decode_worker")
    if any(k in record for k in markers):
        return "requests"
    return None


@dataclass
class ServingFileResult:
    rows: list[dict] = field(default_factory=list)
    rejected: list[BadLine] = field(default_factory=list)


def read_serving_file(path, kind: ServingKind,
                      progress: Callable[[int], None] | None = None) -> ServingFileResult:
    """Parse every line of a pool series or request-metrics file."""
    convert = pool_row if kind == "pool" else request_row
    result = ServingFileResult()
    for line_no, text, record in json_records(path, result.rejected, progress):
        try:
            if not isinstance(record, dict):
                raise FieldError(f"expected a JSON object, got {type(record).__name__}")
            result.rows.append(convert(record))
        except FieldError as exc:
            result.rejected.append(BadLine(line_no, f"bad value: {exc}", raw_text(text)))
    if kind == "pool":
        _fill_relative_time(result.rows)
    return result


def _fill_relative_time(rows: list[dict]) -> None:
    """Give rows without ``t_s`` the seconds since the file's first wall-clock stamp."""
    stamps = [row["ts"] for row in rows if row.get("ts") is not None]
    start = min(stamps) if stamps else None
    for row in rows:
        if row.get("t_s") is None:
            row["t_s"] = (row["ts"] - start).total_seconds() if row.get("ts") else None
