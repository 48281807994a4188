"""Read arrival traces into ``workload_requests`` rows, checked column by column.

Formats, told apart by their header (CSV) or first record (JSONL):

- ``azure``: Azure LLM inference traces, ``TIMESTAMP,ContextTokens,GeneratedTokens`` with
  wall-clock time stamps;
- ``burstgpt``: ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``
  (seconds; some releases add ``Session ID``, kept as the session, and ``Elapsed time``);
- ``splitwise``: Splitwise / Vidur processed traces,
  ``arrived_at,num_prefill_tokens,num_decode_tokens`` (seconds);
- ``mooncake``: Mooncake's JSONL, ``timestamp`` (milliseconds), ``input_length``,
  ``output_length`` and ``hash_ids``, one hash per 512-token block of the prompt (and a
  ``session_id`` or ``conversation_id`` when the trace records one);
- ``bailian``: Alibaba Bailian (Qwen) traces, JSONL with ``chat_id`` and
  ``parent_chat_id`` (seconds, 16-token blocks, sessions from the parent chains:
  `kvtrace.ingest.readers.workload_bailian`);
- ``dynamo-agentic`` and ``weka``: Dynamo's agentic traces, an Agentic Mooncake header
  line or Weka trace objects, each file with its block size and local block hashes
  (`kvtrace.ingest.readers.workload_agentic`);
- ``mooncake-delta``: Dynamo's session deltas in Mooncake's shape, read so only when
  asked, as the content looks like Mooncake (`kvtrace.ingest.readers.workload_delta`);
- ``mapped``: any other CSV, its columns named by a `ColumnMapping` (``--columns``).

A row with an unparsable field or a negative length goes to the quarantine with the
reason; the rest is kept.  A request keeps its data row (from 0) as its key and
``request_idx`` whatever its arrival, so the same trace adds nothing again and a grown
one only its new requests; arrival order is ``arrival_s``, then ``request_idx`` (a
stable sort of the file by arrival).  Arrival times become seconds since the trace's
earliest kept arrival (`kvtrace.ingest.readers._request_groups`), and the requests that arrive
earlier than one before them in the file are counted and reported.  The work is
vectorised over Arrow columns, so a million-row trace takes seconds.  A Mooncake JSONL
is read and checked a chunk at a time (`ArrivalChecks` carries the count and the
earliest arrival across chunks), so its memory does not grow with its length; a CSV is
read whole.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.errors import InputError
from kvtrace.ingest._csv_columns import RowReasons, csv_header, numbers, read_csv_columns
from kvtrace.ingest._lines import IntRecords, parse_chunk, read_chunks
from kvtrace.ingest.family import Advance, ColumnMapping, FileRows, IngestOptions
from kvtrace.ingest.probe import Probe
from kvtrace.ingest.readers._request_groups import RequestGroups
from kvtrace.ingest.readers.workload_agentic import (
    is_agentic_header,
    is_weka_trace,
    looks_like_weka_document,
    read_agentic_mooncake,
    read_weka,
)
from kvtrace.ingest.readers.workload_bailian import (
    BAILIAN_BLOCK_TOKENS,
    is_bailian_record,
    read_bailian,
)
from kvtrace.ingest.readers.workload_delta import DELTA_BLOCK_TOKENS, read_mooncake_delta
from kvtrace.ingest.sink import FileSink
from kvtrace.prefetch import prefetched
from kvtrace.warehouse.rows.rejects import BadLine
from kvtrace.warehouse.schema.workload import WORKLOAD_REQUESTS

WorkloadFormat = Literal[
    "azure",
    "burstgpt",
    "splitwise",
    "mooncake",
    "mooncake-delta",
    "bailian",
    "dynamo-agentic",
    "weka",
]
# a trace format its content cannot tell from another, read so only when asked
ASKED_FORMATS = {"mooncake-delta": "mooncake"}  # format -> the format its content shows

MOONCAKE_BLOCK_TOKENS = 512
# tokens per hashed block where the format fixes it (Dynamo's agentic files state theirs)
BLOCK_TOKENS = {
    "mooncake": MOONCAKE_BLOCK_TOKENS,
    "mooncake-delta": DELTA_BLOCK_TOKENS,
    "bailian": BAILIAN_BLOCK_TOKENS,
}
# the JSONL formats whose requests link into sessions, and their readers
LINKED_READERS = {
    "bailian": read_bailian,
    "mooncake-delta": read_mooncake_delta,
    "dynamo-agentic": read_agentic_mooncake,
    "weka": read_weka,
}
ROW_GROUP_ROWS = 1 << 17  # requests a row group holds (about 25 MB of a Mooncake trace)
BURSTGPT_SESSION = "Session ID"  # in some BurstGPT releases
_TEXT_COLUMNS = ("model", "log_type", "session_id")
# the columns of a trace that records sessions of linked requests; NULL for the others
SESSION_LINK_COLUMNS = ("turn", "request_type", "parent_id", "request_key")

# format -> canonical column -> the source's column
CSV_COLUMNS: dict[WorkloadFormat, dict[str, str]] = {
    "azure": {
        "arrival": "TIMESTAMP",
        "input_tokens": "ContextTokens",
        "output_tokens": "GeneratedTokens",
    },
    "burstgpt": {
        "arrival": "Timestamp",
        "input_tokens": "Request tokens",
        "output_tokens": "Response tokens",
        "model": "Model",
        "log_type": "Log Type",
    },
    "splitwise": {
        "arrival": "arrived_at",
        "input_tokens": "num_prefill_tokens",
        "output_tokens": "num_decode_tokens",
    },
}
_MOONCAKE_SCHEMA = pa.schema(
    [
        ("timestamp", pa.float64()),
        ("input_length", pa.int64()),
        ("output_length", pa.int64()),
        ("hash_ids", pa.list_(pa.int64())),
        ("session_id", pa.string()),
        ("conversation_id", pa.string()),
    ]
)
# Mooncake's records hold integers and one integer array alone: a chunk of such lines is
# read by a compiled pass (four times Arrow's speed), in a trace large enough to pay for
# loading the compiler's runtime (0.4 s, about what Arrow takes for 50 MB)
_MOONCAKE_RECORDS = IntRecords(("timestamp", "input_length", "output_length"), ("hash_ids",))
COMPILED_PARSE_BYTES = 64 << 20
_WALL_CLOCK = r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?$"


def detect_csv_format(header: list[str]) -> WorkloadFormat | None:
    """The arrival-trace format whose columns the CSV header holds, or None."""
    for fmt, columns in CSV_COLUMNS.items():
        if set(columns.values()) <= set(header):
            return fmt
    return None


def detect_json_format(probe: Probe) -> WorkloadFormat | None:
    """The JSON arrival-trace format of a file by its first record, or None."""
    if looks_like_weka_document(probe.head):
        return "weka"
    record = probe.first_record
    if record is None:
        return None
    if is_bailian_record(record):
        return "bailian"
    if is_agentic_header(record):
        return "dynamo-agentic"
    if is_weka_trace(record):
        return "weka"
    return "mooncake" if is_mooncake_record(record) else None


def is_mooncake_record(record: dict[str, Any]) -> bool:
    return "hash_ids" in record or {"timestamp", "input_length", "output_length"} <= set(record)


@dataclass
class WorkloadFileResult:
    table: pa.Table  # workload_requests rows, run_id left NULL, arrival_s as stated
    rejected: list[BadLine] = field(default_factory=list)
    fmt: str = ""


def workload_batches(
    path: Path,
    fmt: WorkloadFormat | Literal["mapped"],
    checks: ArrivalChecks,
    mapping: ColumnMapping | None = None,
    progress: Callable[[int], None] | None = None,
) -> Iterator[WorkloadFileResult]:
    """Every request of an arrival trace, checked by ``checks`` (see the module's rules),
    in file order, arrival times as the trace states them (seconds): a Mooncake JSONL a
    chunk at a time, read one chunk ahead, so memory stays flat however long the trace; a
    CSV in one piece.  ``mapping`` names the columns of a CSV layout kvtrace does not know
    (format ``mapped``); ``progress`` gets the bytes read so far."""
    if fmt == "mooncake":
        yield from _read_mooncake(path, checks, progress)
    elif fmt in LINKED_READERS:
        yield from LINKED_READERS[fmt](path, checks, progress)
    else:
        yield _read_csv(path, fmt, checks, mapping)


# -- CSV ---------------------------------------------------------------------------------------


def _read_csv(
    path: Path,
    fmt: WorkloadFormat | Literal["mapped"],
    checks: ArrivalChecks,
    mapping: ColumnMapping | None = None,
) -> WorkloadFileResult:
    columns = mapping.columns if mapping else CSV_COLUMNS[fmt]  # type: ignore[index]
    header = csv_header(path)
    if mapping is None and fmt == "burstgpt" and BURSTGPT_SESSION in header:
        columns = {**columns, "session_id": BURSTGPT_SESSION}
    missing = [name for name in columns.values() if name not in header]
    if missing:
        raise InputError(
            f"{path} has no column {', '.join(missing)} (its header: {', '.join(header[:8])})"
        )
    unit = mapping.arrival_unit if mapping else ("datetime" if fmt == "azure" else "s")
    types = {
        columns["arrival"]: pa.timestamp("ns") if unit == "datetime" else pa.float64(),
        columns["input_tokens"]: pa.int64(),
        columns["output_tokens"]: pa.int64(),
    }
    read = read_csv_columns(path, list(columns.values()), types)
    raw = read.table.rename_columns([_canonical_name(columns, n) for n in read.table.column_names])
    line_no = read.line_no
    reasons = RowReasons(raw.num_rows)
    if unit == "datetime":
        arrival = _wall_clock_seconds(raw["arrival"], reasons, columns["arrival"])
    else:
        arrival = numbers(raw["arrival"], "arrival time", reasons, pa.float64()) / _UNITS[unit]
    lengths = {
        name: numbers(raw[name], name, reasons, pa.int64())
        for name in ("input_tokens", "output_tokens")
    }
    text = {
        name: raw[name] if name in raw.column_names else pa.nulls(raw.num_rows, pa.string())
        for name in _TEXT_COLUMNS
    }
    result = checks.rows(
        line_no,
        line_no - 2,
        reasons,
        arrival,
        lengths,
        pa.nulls(raw.num_rows, pa.list_(pa.int64())),
        text,
        read.line_text,
    )
    result.rejected = sorted(read.rejected + result.rejected, key=lambda bad: bad.line_no)
    return result


_UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6}


def parse_column_mapping(text: str) -> ColumnMapping:
    """``arrival=ts,input_tokens=prompt_len,output_tokens=gen_len[,arrival_unit=ms]``."""
    pairs = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not value.strip():
            raise InputError(f"--columns takes field=column pairs, got {item!r}")
        pairs[key.strip()] = value.strip()
    unit = pairs.pop("arrival_unit", "s")
    if unit not in (*_UNITS, "datetime"):
        raise InputError(f"arrival_unit must be s, ms, us or datetime, got {unit!r}")
    known = {"arrival", "input_tokens", "output_tokens", *_TEXT_COLUMNS}
    if unknown := set(pairs) - known:
        raise InputError(
            f"--columns names unknown fields {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(known))}, arrival_unit"
        )
    if missing := {"arrival", "input_tokens", "output_tokens"} - set(pairs):
        raise InputError(f"--columns must name {', '.join(sorted(missing))}")
    return ColumnMapping(pairs, unit)


def _canonical_name(columns: dict[str, str], source_name: str) -> str:
    return next(canonical for canonical, name in columns.items() if name == source_name)


def _wall_clock_seconds(
    column: pa.ChunkedArray, reasons: RowReasons, name: str = "TIMESTAMP"
) -> np.ndarray:
    """Wall-clock time stamps as seconds since the epoch (NaN where unparsable)."""
    try:
        stamps = pc.cast(column, pa.timestamp("ns"))
        seconds = (
            np.asarray(pc.cast(stamps, pa.int64()).to_numpy(zero_copy_only=False), dtype=np.float64)
            / 1e9
        )
        reasons.note(np.isnan(seconds), f"{name} is not a time stamp")
        return seconds
    except pa.ArrowInvalid:
        pass
    trimmed = pc.utf8_trim_whitespace(column)
    ok = np.asarray(pc.fill_null(pc.match_substring_regex(trimmed, _WALL_CLOCK), False))
    reasons.note(~ok, f"{name} is not a time stamp")
    seconds = np.full(len(ok), np.nan)
    if ok.any():
        stamps = pc.cast(pc.filter(trimmed, pa.array(ok)), pa.timestamp("ns"))
        seconds[ok] = pc.cast(stamps, pa.int64()).to_numpy() / 1e9
    return seconds


# -- Mooncake JSONL ----------------------------------------------------------------------------


def _read_mooncake(
    path: Path, checks: ArrivalChecks, progress: Callable[[int], None] | None
) -> Iterator[WorkloadFileResult]:
    """The checked rows of each chunk, the next chunk read and parsed meanwhile."""
    compiled = _MOONCAKE_RECORDS if path.stat().st_size >= COMPILED_PARSE_BYTES else None
    parsed_chunks = (
        (chunk, parse_chunk(chunk, _MOONCAKE_SCHEMA, int_records=compiled))
        for chunk in read_chunks(path)
    )
    for chunk, parsed in prefetched(parsed_chunks, depth=1, name="kvtrace-parse"):
        table, line_no = parsed.table, parsed.line_numbers
        reasons = RowReasons(table.num_rows)
        arrival = _present(table["timestamp"], "timestamp", reasons) / 1000.0
        lengths = {
            "input_tokens": _present(table["input_length"], "input_length", reasons),
            "output_tokens": _present(table["output_length"], "output_length", reasons),
        }
        sessions = {"session_id": pc.coalesce(table["session_id"], table["conversation_id"])}
        result = checks.rows(
            line_no,
            line_no - 1,
            reasons,
            arrival,
            lengths,
            table["hash_ids"],
            sessions,
            chunk.line_text,
        )
        note = chunk.truncation_note()
        result.rejected = sorted(
            parsed.bad + result.rejected + ([note] if note else []), key=lambda bad: bad.line_no
        )
        yield result
        if progress:
            progress(chunk.source_offset)


def _present(column: pa.ChunkedArray, name: str, reasons: RowReasons) -> np.ndarray:
    values = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)
    reasons.note(np.isnan(values), f"missing field {name}")
    return values


# -- checks shared by every format ---------------------------------------------------------


class ArrivalChecks:
    """The range rules, applied to a trace's rows batch by batch in file order: a negative
    length sends the row to the quarantine.  Across batches it counts the kept requests
    that arrive earlier than one before them (`out_of_order`) and finds the earliest
    kept arrival (`earliest`)."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.block_tokens = BLOCK_TOKENS.get(fmt)
        self.out_of_order = 0
        self.earliest = math.inf
        self._latest = -math.inf  # the latest arrival so far of a row otherwise valid

    def rows(
        self,
        line_no: np.ndarray,
        request_idx: np.ndarray,
        reasons: RowReasons,
        arrival: np.ndarray,
        lengths: dict[str, np.ndarray],
        hashes: pa.Array | pa.ChunkedArray,
        text: dict[str, pa.ChunkedArray],
        line_text: Callable[[int], str],
        links: dict[str, pa.Array] | None = None,
        block_tokens: np.ndarray | None = None,
    ) -> WorkloadFileResult:
        """Apply the rules to one batch, quarantine what breaks them, build its rows.
        ``links`` holds the `SESSION_LINK_COLUMNS` of a trace that records them, and
        ``block_tokens`` each request's block size where it varies within the file."""
        for name, values in lengths.items():
            reasons.note(values < 0, f"{name} is negative")
        keep = reasons.ok
        rejected = [
            BadLine(int(line_no[row]), reasons.text(int(row)), line_text(int(line_no[row])))
            for row in np.flatnonzero(~keep)
        ]
        if rejected:
            arrival, request_idx = arrival[keep], request_idx[keep]
            lengths = {name: values[keep] for name, values in lengths.items()}
            hashes = pc.filter(hashes, pa.array(keep))
            text = {name: pc.filter(values, pa.array(keep)) for name, values in text.items()}
            if links is not None:
                links = {name: pc.filter(values, pa.array(keep)) for name, values in links.items()}
            if block_tokens is not None:
                block_tokens = block_tokens[keep]
        self._count_order(arrival)
        rows = len(arrival)
        columns = {
            "run_id": pa.nulls(rows, pa.string()),
            "request_idx": pa.array(request_idx, pa.int64()),
            "arrival_s": pa.array(arrival, pa.float64()),
            "input_tokens": pa.array(lengths["input_tokens"].astype(np.int64)),
            "output_tokens": pa.array(lengths["output_tokens"].astype(np.int64)),
            "hash_ids": hashes,
            "hash_block_tokens": (
                pa.array(block_tokens, pa.int32())
                if block_tokens is not None
                else pa.repeat(pa.scalar(self.block_tokens, pa.int32()), rows)
            ),
            **{name: text.get(name, pa.nulls(rows, pa.string())) for name in _TEXT_COLUMNS},
            **{
                name: links[name]
                if links is not None and name in links
                else pa.nulls(rows, WORKLOAD_REQUESTS.schema.field(name).type)
                for name in SESSION_LINK_COLUMNS
            },
        }
        table = pa.table({name: columns[name] for name in WORKLOAD_REQUESTS.schema.names})
        return WorkloadFileResult(table.cast(WORKLOAD_REQUESTS.schema), rejected, self.fmt)

    def _count_order(self, arrival: np.ndarray) -> None:
        """Count the arrivals earlier than one before them, in this batch or earlier."""
        if not len(arrival):
            return
        before = np.maximum.accumulate(np.concatenate([[self._latest], arrival[:-1]]))
        self.out_of_order += int(np.count_nonzero(arrival < before))
        self._latest = max(self._latest, float(arrival.max()))
        self.earliest = min(self.earliest, float(arrival.min()))


def asked_format(fmt: str, asked: str | None) -> str:
    """The format to read a file as: ``asked`` where the content shows the format it
    looks like (`ASKED_FORMATS`), else what the content shows."""
    return asked if asked is not None and ASKED_FORMATS.get(asked) == fmt else fmt


class WorkloadFamily:
    """Arrival traces: Azure, BurstGPT and Splitwise/Vidur CSVs, Mooncake JSONL, and CSVs
    of another layout named by ``--columns``."""

    name = "workload"
    reads = (
        "arrival traces (Mooncake, Bailian, Dynamo agentic JSONL; Azure, BurstGPT, Splitwise CSV)"
    )
    tables = (WORKLOAD_REQUESTS.name,)
    reads_only_record_keys = False

    def recognise(self, probe: Probe) -> str | None:
        if probe.is_json_document:
            return detect_json_format(probe)
        return detect_csv_format(probe.csv_header)

    def forced_format(self, probe: Probe) -> str:
        found = self.recognise(probe)
        if found is None:
            raise InputError(
                f"{probe.path} is not an arrival trace kvtrace knows (Azure, "
                "BurstGPT, Splitwise/Vidur CSV, Mooncake, Bailian, Dynamo agentic or "
                "Weka JSON); --columns names the columns of another CSV layout"
            )
        return found

    def run_name(self, probe: Probe, fmt: str, options: IngestOptions) -> str:
        return options.run_name or probe.path.name.split(".")[0]

    def read(
        self, probe: Probe, fmt: str, sink: FileSink, options: IngestOptions, advance: Advance
    ) -> FileRows:
        fmt = asked_format(fmt, options.trace_format)
        trace = _store(probe.path, fmt, sink, options.columns, advance)
        if trace.origin_missed:  # the earliest arrival came after a row group was stored
            # a sink of its own: the first knows the keys the discarded file gave (its
            # counts of records left out hold for both reads)
            again = FileSink(sink.warehouse, sink.commit)
            trace = _store(probe.path, fmt, again, options.columns, advance, trace.earliest)
        columns = options.columns
        config: dict[str, Any] = (
            {"columns": columns.columns, "arrival_unit": columns.arrival_unit}
            if columns is not None and fmt == "mapped"
            else {}
        )
        if fmt in ASKED_FORMATS:  # read so because asked: the run says so
            config["trace_format"] = fmt
        notes = []
        if count := trace.out_of_order:
            config["requests_out_of_arrival_order"] = count
            notes.append(
                f"{count:,} request{'s were' if count > 1 else ' was'} out of arrival order; "
                "kept, in arrival order by arrival_s then request_idx"
            )
        return FileRows(
            "workload", rows=trace.rows, rejected=trace.rejected, config=config, notes=notes
        )


@dataclass
class _StoredTrace:
    rows: int  # requests stored
    rejected: list[BadLine]
    out_of_order: int  # requests that arrive earlier than one before them
    earliest: float  # the earliest kept arrival
    origin_missed: bool  # the file is discarded: read it again from ``earliest``


def _store(
    path: Path,
    fmt: str,
    sink: FileSink,
    mapping: ColumnMapping | None,
    advance: Advance,
    origin: float | None = None,
) -> _StoredTrace:
    """Read the trace into ``sink``'s ``workload_requests`` file in row groups, arrival
    times counted from ``origin``, else from the earliest arrival before the first group;
    a file whose groups turn out to count from a later arrival is discarded."""
    checks = ArrivalChecks(fmt)
    groups = RequestGroups(sink.open_file_in_thread("workload_requests"), ROW_GROUP_ROWS, origin)
    rejected: list[BadLine] = []
    for batch in workload_batches(path, fmt, checks, mapping, advance):  # type: ignore[arg-type]
        rejected += batch.rejected
        groups.add(batch.table, checks.earliest)
    missed = groups.origin_missed(checks.earliest)
    if missed:
        groups.discard()
    rows = 0 if missed else groups.close(checks.earliest)
    return _StoredTrace(rows, rejected, checks.out_of_order, checks.earliest, missed)


WORKLOAD = WorkloadFamily()
