"""Read PyTorch profiler (Kineto) traces: Chrome trace JSON with ``traceEvents``.

Complete events (``"ph": "X"``) become ``timeline_events`` rows: pid and tid as text
(Kineto writes numbers or names), the CUDA stream, device, correlation and external id
from ``args``; for ``gpu_memcpy`` events the copy kind from the name (``Memcpy DtoH
(Device -> Pageable)`` is ``DtoH``) and ``args.bytes``.  Every event gets the iteration
(``ProfilerStep#N``) whose time span holds its start.  Metadata events and other phases
are left out; an event without a numeric ``ts`` and ``dur`` goes to the quarantine.  The
trace's ``distributedInfo`` gives the rank and goes to ``runs`` with the schema version.

The whole file is parsed at once (Python's ``json``), so memory grows with the trace.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from kvtrace.errors import InputError
from kvtrace.warehouse.rejects import BadLine
from kvtrace.warehouse.schema.timeline import TIMELINE_EVENTS

_COPY_KIND = re.compile(r"Memcpy (\w+)")
_STEP = re.compile(r"ProfilerStep#(\d+)$")


def looks_like_kineto(path: Path) -> bool:
    """Whether a .json or .json.gz file starts like a Chrome trace."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            head = handle.read(1 << 16)
    except (OSError, EOFError):
        return False
    return b'"traceEvents"' in head or b'"schemaVersion"' in head


@dataclass
class KinetoFileResult:
    table: pa.Table  # run_id left NULL
    rejected: list[BadLine] = field(default_factory=list)
    run_config: dict = field(default_factory=dict)
    rank: int | None = None


def read_kineto(path: Path) -> KinetoFileResult:
    """The complete events of a Kineto trace, each with its iteration."""
    document = _load(path)
    events = document.get("traceEvents")
    if not isinstance(events, list):
        raise InputError(f"{path} has no traceEvents list; it is not a Chrome trace")
    info: dict = (document["distributedInfo"]
                  if isinstance(document.get("distributedInfo"), dict) else {})
    rank = info.get("rank") if isinstance(info.get("rank"), int) else None
    rows, rejected = [], []
    for index, event in enumerate(events):
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        ts, dur = _float(event.get("ts")), _float(event.get("dur"))
        if ts is None or dur is None or dur < 0:
            rejected.append(BadLine(index + 1, "an X event needs numeric ts and dur >= 0",
                                    json.dumps(event)[:2000]))
            continue
        rows.append(_row(index, event, rank))
    _assign_iterations(rows)
    config = {"schema_version": document.get("schemaVersion"), "distributed_info": info,
              **({"device_properties": document["deviceProperties"]}
                 if "deviceProperties" in document else {})}
    table = pa.Table.from_pylist(rows, schema=TIMELINE_EVENTS.schema)
    return KinetoFileResult(table, rejected, config, rank)


def _load(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            document = json.load(handle)
    except (OSError, EOFError, ValueError) as exc:
        raise InputError(f"{path} is not a readable Chrome trace: {exc}") from None
    if not isinstance(document, dict):
        raise InputError(f"{path} holds no JSON object; a Chrome trace is one")
    return document


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _int(value: object) -> int | None:
    number = _float(value)
    return None if number is None else int(number)


def _row(index: int, event: dict, rank: int | None) -> dict:
    args: dict = event["args"] if isinstance(event.get("args"), dict) else {}
    category = str(event.get("cat", ""))
    name = str(event.get("name", ""))
    kind = _COPY_KIND.match(name) if category == "gpu_memcpy" else None
    return {
        "rank": rank, "event_idx": index, "pid": str(event.get("pid")),
        "tid": str(event.get("tid")), "stream": _int(args.get("stream")),
        "device": _int(args.get("device")), "category": category, "name": name,
        "ts_us": float(event["ts"]), "dur_us": float(event["dur"]),
        "correlation": _int(args.get("correlation")),
        "external_id": _int(args.get("External id")),
        "copy_kind": kind.group(1) if kind else None,
        "bytes": _int(args.get("bytes")),
    }


def _assign_iterations(rows: list[dict]) -> None:
    """Give each row the ProfilerStep#N whose span holds its start (None outside)."""
    steps = sorted((row["ts_us"], row["ts_us"] + row["dur_us"], int(match.group(1)))
                   for row in rows if (match := _STEP.match(row["name"])))
    if not steps:
        return
    starts = np.array([s[0] for s in steps])
    for row in rows:
        i = int(np.searchsorted(starts, row["ts_us"], side="right")) - 1
        if i >= 0 and row["ts_us"] < steps[i][1]:
            row["iteration"] = steps[i][2]
