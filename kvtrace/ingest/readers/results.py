"""Read per-request results of serving benchmarks and simulators.

- ``vllm``: the result JSON of ``vllm bench serve`` (formerly ``benchmarks/
  benchmark_serving.py``) with ``--save-result --save-detailed``: per-request
  ``input_lens``, ``output_lens``, ``ttfts``, ``itls``, ``latencies`` (the end-to-end
  latency; ``e2els`` in some forks) and ``start_times`` (seconds), ``errors``; the run's
  ``duration`` is kept in ``runs``.  A request's e2e is its latency; a file of a vLLM
  older than the ``latencies`` list gives TTFT plus the inter-token latencies instead
  (what vLLM's streaming clients measured, up to the wait for a trailing usage chunk).
  Its time per output token is (e2e - TTFT) / (output tokens - 1) for two tokens or
  more, as vLLM's ``calculate_metrics`` has it.  A request failed when its error is not
  empty, when a ``successes`` list (some forks) says so, or when its TTFT is 0: vLLM
  writes an empty error for an HTTP failure without a reason, and a request it counts as
  successful has received a chunk.  ``start_times`` (the client's monotonic clock) become
  arrivals from the first.  The statistics vLLM printed go to ``benchmark_summaries``
  (`kvtrace.ingest.readers._bench_summaries.read_vllm_summary`); a file without
  ``--save-detailed`` holds only those.  It records no cached tokens (vLLM 0.33.0's
  ``RequestFuncOutput`` in ``vllm/benchmarks/lib/endpoint_request_func.py`` keeps none
  of the ``usage.prompt_tokens_details`` the server sends).  Origin ``measured``.
- ``aiperf``: AIPerf's per-request export (``profile_export.jsonl``): ``metadata``
  (``request_start_ns`` becomes the arrival; ``timestamp_ns`` in AIPerf 0.1),
  ``metrics`` (each ``{value, unit}``: ``time_to_first_token`` (``ttft`` in AIPerf 0.1),
  ``inter_token_latency`` as the time per output token, ``inter_chunk_latency`` as the
  inter-token list, ``request_latency``, ``input_sequence_length``,
  ``output_sequence_length``, and ``usage_prompt_cache_read_tokens`` as the cached
  tokens: the server's ``usage.prompt_tokens_details.cached_tokens``, AIPerf 0.13's
  ``aiperf/metrics/types/usage_cache_metrics.py``) and ``error``.  Origin ``measured``.
- ``vidur_requests``: Vidur's ``request_metrics.csv``: ``prefill_e2e_time`` (TTFT),
  ``decode_time_execution_plus_preemption_normalized`` (time per output token),
  ``request_e2e_time``, ``request_scheduling_delay``, ``request_num_restarts``, the
  token counts and ``request_arrived_at`` where present (seconds).  Origin ``simulated``.
- ``vidur_batches``: Vidur's batch metrics: ``batch_size``, ``batch_num_prefill_tokens``,
  ``batch_num_decode_tokens``, ``batch_execution_time``.

A value that is not a number, or a negative time or length, sends its row to the
quarantine with the reason.  The files that carry the tool's own summary (SGLang's
bench_serving lines, AIPerf's and GenAI-Perf's JSON exports) are read by
`kvtrace.ingest.readers._bench_summaries`.  Runs are named after their file, or after their
folder for the fixed names AIPerf and GenAI-Perf give (``profile_export*``); a file of
such a name that is a damaged JSON export, or a CSV export named on the command line, is
one sentence saying so (`kvtrace.ingest.readers._export_names`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import pyarrow as pa

from kvtrace.errors import InputError
from kvtrace.ingest._csv_columns import RowReasons, csv_header, numbers, read_csv_columns
from kvtrace.ingest._lines import json_records, raw_text, read_json_document
from kvtrace.ingest._values import SECONDS_PER_UNIT, finite_number, whole_number
from kvtrace.ingest.family import Advance, FileRows, IngestOptions
from kvtrace.ingest.probe import Probe
from kvtrace.ingest.readers._bench_summaries import (
    has_vllm_summary,
    is_sglang_record,
    is_summary_export,
    read_sglang_lines,
    read_summary_export,
    read_vllm_summary,
    time_per_output_token,
)
from kvtrace.ingest.readers._export_names import unreadable_export
from kvtrace.ingest.sink import FileSink
from kvtrace.warehouse.rows.rejects import BadLine
from kvtrace.warehouse.schema.workload import BATCH_METRICS, BENCHMARK_SUMMARIES, REQUEST_TIMINGS

ResultFormat = Literal["vllm", "aiperf", "vidur_requests", "vidur_batches"]
FIXED_NAMES = "profile_export"  # AIPerf's and GenAI-Perf's files, named the same in every run
UNREADABLE_EXPORT = "unreadable_export"  # a damaged JSON export, or a CSV export

VIDUR_REQUEST_COLUMNS = {
    "input_tokens": "request_num_prefill_tokens",
    "output_tokens": "request_num_decode_tokens",
    "ttft_s": "prefill_e2e_time",
    "tpot_s": "decode_time_execution_plus_preemption_normalized",
    "e2e_s": "request_e2e_time",
    "scheduling_delay_s": "request_scheduling_delay",
    "preemptions": "request_num_restarts",
}
VIDUR_BATCH_COLUMNS = {
    "batch_size": "batch_size",
    "prefill_tokens": "batch_num_prefill_tokens",
    "decode_tokens": "batch_num_decode_tokens",
    "execution_time_s": "batch_execution_time",
}
_INTEGER_COLUMNS = {
    "input_tokens",
    "output_tokens",
    "preemptions",
    "batch_size",
    "prefill_tokens",
    "decode_tokens",
}


def detect_results_csv(header: list[str]) -> ResultFormat | None:
    if {"request_e2e_time", "prefill_e2e_time"} <= set(header):
        return "vidur_requests"
    if {"batch_execution_time", "batch_size"} <= set(header):
        return "vidur_batches"
    return None


def is_aiperf_record(record: dict[str, Any]) -> bool:
    return isinstance(record.get("metadata"), dict) and "metrics" in record


# vLLM's per-request lists, each by its current name and the names it had elsewhere
VLLM_LISTS = {
    "input_lens": ("input_lens",),
    "output_lens": ("output_lens",),
    "ttfts": ("ttfts",),
    "itls": ("itls",),
    "errors": ("errors",),
    "latencies": ("latencies", "e2els"),
    "start_times": ("start_times",),
    "successes": ("successes",),
}
VLLM_SETTINGS = (
    "backend",
    "endpoint_type",
    "label",
    "model_id",
    "tokenizer_id",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "num_prompts",
    "date",
)


def is_vllm_result(document: object) -> bool:
    """A vLLM result JSON: per-request lists, or the run's printed statistics."""
    if not isinstance(document, dict):
        return False
    detailed = "ttfts" in document and "input_lens" in document
    return detailed or ("duration" in document and has_vllm_summary(document))


@dataclass
class ResultFileResult:
    table: str  # the warehouse table the rows go to
    rows: pa.Table  # run_id left NULL
    rejected: list[BadLine] = field(default_factory=list)
    run_config: dict[str, Any] = field(default_factory=dict)
    summaries: list[dict[str, Any]] = field(default_factory=list)  # benchmark_summaries rows


def read_results_csv(path: Path, fmt: ResultFormat) -> ResultFileResult:
    """Vidur's request or batch metrics, checked row by row."""
    if fmt == "vidur_batches":
        return _read_csv(
            path, VIDUR_BATCH_COLUMNS, BATCH_METRICS.schema, "batch_idx", "batch_metrics", {}
        )
    extra = {"arrival_s": "request_arrived_at"} if "request_arrived_at" in csv_header(path) else {}
    return _read_csv(
        path,
        {**VIDUR_REQUEST_COLUMNS, **extra},
        REQUEST_TIMINGS.schema,
        "request_idx",
        "request_timings",
        {"origin": "simulated", "load_level": 0},
    )


def _read_csv(
    path: Path,
    columns: dict[str, str],
    schema: pa.Schema,
    index: str,
    table_name: str,
    constants: dict[str, Any],
) -> ResultFileResult:
    kinds = {name: pa.int64() if name in _INTEGER_COLUMNS else pa.float64() for name in columns}
    read = read_csv_columns(
        path, list(columns.values()), {source: kinds[name] for name, source in columns.items()}
    )
    raw = read.table
    reasons = RowReasons(raw.num_rows)
    values = {}
    for name, source in columns.items():
        kind = kinds[name]
        values[name] = numbers(raw[source], source, reasons, kind)
        reasons.note(values[name] < 0, f"{source} is negative")
    keep = reasons.ok
    rejected = sorted(
        read.rejected
        + [
            BadLine(
                int(read.line_no[row]),
                reasons.text(int(row)),
                read.line_text(int(read.line_no[row])),
            )
            for row in np.flatnonzero(~keep)
        ],
        key=lambda bad: bad.line_no,
    )
    n = int(keep.sum())
    out = {
        index: pa.array(read.line_no[keep] - 2, pa.int64()),
        **{k: pa.repeat(pa.scalar(v), n) for k, v in constants.items()},
        **{name: pa.array(v[keep]) for name, v in values.items()},
    }
    rows = pa.table(
        {f.name: out[f.name].cast(f.type) if f.name in out else pa.nulls(n, f.type) for f in schema}
    )
    return ResultFileResult(table_name, rows, rejected)


def read_vllm_result(path: Path) -> ResultFileResult:
    """The per-request records and the printed summary of a vLLM result JSON."""
    document = read_json_document(path)
    lists = _vllm_lists(document, path)
    rows, starts, rejected = [], [], []
    for i in range(len(lists["ttfts"] or [])):
        try:
            row, start = _vllm_row(i, lists)
        except ValueError as exc:
            shown = {k: v[i] for k, v in lists.items() if v is not None}
            rejected.append(BadLine(i + 1, f"bad value: {exc}", json.dumps(shown)[:2000]))
            continue
        rows.append(row)
        starts.append(start)
    known = [start for start in starts if start is not None]
    for row, start in zip(rows, starts, strict=True):
        row["arrival_s"] = None if start is None else start - min(known)
    config: dict[str, Any] = {k: document[k] for k in VLLM_SETTINGS if k in document}
    if isinstance(document.get("duration"), (int, float)):
        config["duration_s"] = document["duration"]
    try:
        summaries = [read_vllm_summary(document)] if has_vllm_summary(document) else []
    except ValueError as exc:
        raise InputError(f"{path}: the printed summary is not numbers: {exc}") from None
    return ResultFileResult(
        "request_timings",
        pa.Table.from_pylist(rows, schema=REQUEST_TIMINGS.schema),
        rejected,
        config,
        summaries,
    )


def _vllm_lists(document: dict[str, Any], path: Path) -> dict[str, list[Any] | None]:
    """vLLM's per-request lists by their current names, each one value per request; none
    without ``ttfts`` (a file saved without ``--save-detailed`` keeps only ``latencies``
    and ``queue_times`` of them)."""
    lists: dict[str, list[Any] | None] = dict.fromkeys(VLLM_LISTS)
    if "ttfts" not in document:
        return lists
    for key, names in VLLM_LISTS.items():
        lists[key] = next((document[name] for name in names if name in document), None)
    count = len(lists["ttfts"] or [])
    for key, value in lists.items():
        if value is not None and (not isinstance(value, list) or len(value) != count):
            raise InputError(
                f"{path}: {key} must be a list of one value per request ({count}, like ttfts)"
            )
    return lists


def _vllm_row(i: int, lists: dict[str, list[Any] | None]) -> tuple[dict[str, Any], float | None]:
    """Request ``i``'s row and its start time; ValueError for a value it cannot hold."""

    def value(key: str) -> object:
        given = lists[key]
        return None if given is None else given[i]

    def seconds(key: str) -> float | None:
        given = value(key)
        return None if given is None else finite_number(f"{key}[{i}]", given, minimum=0)

    def count(key: str) -> int | None:
        given = value(key)
        return None if given is None else whole_number(f"{key}[{i}]", given)

    itl = value("itls")
    if itl is not None and not isinstance(itl, list):
        raise ValueError(f"itls[{i}] must be a list of non-negative numbers")
    gaps = None if itl is None else [finite_number(f"itls[{i}]", x, minimum=0) for x in itl]
    ttft = seconds("ttfts")
    error = _vllm_error(value("errors"), value("successes"), ttft)
    latency = seconds("latencies")
    e2e = None
    if error is None and ttft is not None:
        e2e = latency if lists["latencies"] is not None else ttft + sum(gaps or [])
    output_tokens = count("output_lens")
    row = {
        "load_level": 0,
        "request_idx": i,
        "origin": "measured",
        "input_tokens": count("input_lens"),
        "output_tokens": output_tokens,
        "ttft_s": None if error else ttft,
        "itl_s": gaps,
        "tpot_s": None if error else time_per_output_token(ttft, e2e, output_tokens),
        "e2e_s": e2e,
        "error": error,
    }
    return row, seconds("start_times")


def _vllm_error(error: object, success: object, ttft: float | None) -> str | None:
    """Why a request of a vLLM result failed, None when it succeeded."""
    if success is not None and not isinstance(success, bool):
        raise ValueError(f"successes must hold true or false, got {success!r}"[:200])
    text = None if error is None or error == "" else str(error)
    if success is False or (success is None and text is None and ttft == 0):
        return text or "failed without an error message"
    return None if success else text


def read_aiperf_records(path: Path) -> ResultFileResult:
    """AIPerf's per-request records, one JSON object a line."""
    rows: list[dict[str, Any]] = []
    rejected: list[BadLine] = []
    starts: list[int | None] = []
    for line_no, text, record in json_records(path, rejected):
        try:
            row, start = _aiperf_row(record, len(rows))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            rejected.append(BadLine(line_no, f"bad record: {exc}"[:300], raw_text(text)))
            continue
        rows.append(row)
        starts.append(start)
    rejected.sort(key=lambda bad: bad.line_no)
    known = [s for s in starts if s is not None]
    for row, start in zip(rows, starts, strict=True):
        row["arrival_s"] = (start - min(known)) / 1e9 if start is not None else None
    return ResultFileResult(
        "request_timings", pa.Table.from_pylist(rows, schema=REQUEST_TIMINGS.schema), rejected
    )


def _aiperf_row(record: object, index: int) -> tuple[dict[str, Any], int | None]:
    if not isinstance(record, dict) or not is_aiperf_record(record):
        raise ValueError("expected an object with metadata and metrics")
    metrics = record.get("metrics") or {}

    def value(*names: str) -> float | list[float] | None:
        for name in names:
            if isinstance(metrics.get(name), dict):
                return _in_seconds(metrics[name], name)
        return None

    error = record.get("error")
    message = (
        None
        if not error
        else (
            f"{error.get('type', 'error')}: {error.get('message', '')}".strip(": ")
            if isinstance(error, dict)
            else str(error)
        )
    )
    itl = value("inter_chunk_latency")
    metadata = record["metadata"]
    start = metadata.get("request_start_ns", metadata.get("timestamp_ns"))
    start = None if start is None else whole_number("request_start_ns", start)
    return {
        "load_level": 0,
        "request_idx": whole_number("session_num", metadata.get("session_num", index)),
        "origin": "measured",
        "input_tokens": _count(metrics, "input_sequence_length", "error_isl"),
        "output_tokens": _count(metrics, "output_sequence_length", "output_token_count"),
        "ttft_s": value("time_to_first_token", "ttft"),
        "itl_s": itl if isinstance(itl, list) else None,
        "tpot_s": value("inter_token_latency"),
        "e2e_s": value("request_latency"),
        "error": message,
        "cached_tokens": _count(metrics, "usage_prompt_cache_read_tokens"),
    }, start


def _in_seconds(metric: dict[str, Any], name: str) -> float | list[float]:
    unit = str(metric.get("unit", "s"))
    if unit not in SECONDS_PER_UNIT:
        raise ValueError(f"{name} is in {unit!r}, not a unit of time")
    raw = metric["value"]
    if isinstance(raw, list):
        return [finite_number(name, v, minimum=0) * SECONDS_PER_UNIT[unit] for v in raw]
    return finite_number(name, raw, minimum=0) * SECONDS_PER_UNIT[unit]


def _count(metrics: dict[str, Any], *names: str) -> int | None:
    for name in names:
        if isinstance(metrics.get(name), dict):
            return whole_number(name, metrics[name]["value"])
    return None


class BenchmarkFamily:
    """Per-request results and summaries of serving benchmarks (vLLM's result JSON,
    SGLang's bench_serving lines, AIPerf's records and summary, GenAI-Perf's export) and
    of simulators (Vidur's request and batch metrics)."""

    name = "benchmark"
    reads = "benchmark results (vLLM, SGLang bench_serving, AIPerf, GenAI-Perf, Vidur)"
    tables = (BENCHMARK_SUMMARIES.name, REQUEST_TIMINGS.name, BATCH_METRICS.name)
    reads_only_record_keys = False

    def recognise(self, probe: Probe) -> str | None:
        if unreadable_export(probe.path, probe.source.named) is not None:
            return UNREADABLE_EXPORT  # its reader says what is wrong
        if not probe.is_json_document:
            return detect_results_csv(probe.csv_header)
        head = probe.head
        if b'"median_e2e_latency_ms"' in head:
            record = probe.first_record
            if record is not None and is_sglang_record(record):
                return "sglang"
        if b'"ttfts"' in head or (b'"input_lens"' in head and b'"output_lens"' in head):
            return "vllm"
        if b'"num_prompts"' in head and b'"duration"' in head:
            document = _document_or_none(probe.path)
            if document is not None and is_vllm_result(document):
                return "vllm"
        if b'"request_throughput"' in head and probe.path.name.endswith(".json"):
            document = _document_or_none(probe.path)
            if document is not None and (fmt := is_summary_export(document)) is not None:
                return fmt
        record = probe.first_record
        return "aiperf" if record is not None and is_aiperf_record(record) else None

    def forced_format(self, probe: Probe) -> str:
        return self.recognise(probe) or "aiperf"

    def run_name(self, probe: Probe, fmt: str, options: IngestOptions) -> str:
        if options.run_name:
            return options.run_name
        path = probe.path
        if path.name.startswith(FIXED_NAMES) and path.parent.name:
            return path.parent.name
        return path.name.split(".")[0]

    def read(
        self, probe: Probe, fmt: str, sink: FileSink, options: IngestOptions, advance: Advance
    ) -> FileRows:
        if fmt == UNREADABLE_EXPORT:
            error = unreadable_export(probe.path, probe.source.named)
            raise error or InputError(f"{probe.path} changed while kvtrace read it")
        labelled = {"experiment": options.experiment} if options.experiment else {}
        if fmt == "sglang":
            summaries, requests, rejected = read_sglang_lines(probe.path)
            stored = sink.write_rows("request_timings", requests)
            stored += sink.write_rows("benchmark_summaries", summaries)
            return FileRows("benchmark", rows=stored, rejected=rejected, config=labelled)
        if fmt in ("aiperf_summary", "genai_perf"):
            summary, settings = read_summary_export(probe.path, fmt)
            stored = sink.write_rows("benchmark_summaries", [summary])
            return FileRows("benchmark", rows=stored, config=settings | labelled)
        result = (
            read_vllm_result(probe.path)
            if fmt == "vllm"
            else read_aiperf_records(probe.path)
            if fmt == "aiperf"
            else read_results_csv(probe.path, cast(ResultFormat, fmt))
        )
        kind = "simulation" if fmt.startswith("vidur") else "benchmark"
        stored = sink.write(result.table, result.rows)
        if result.summaries:
            stored += sink.write_rows("benchmark_summaries", result.summaries)
        return FileRows(
            kind,
            rows=stored,
            rejected=result.rejected,
            config=result.run_config | labelled,
        )


def _document_or_none(path: Path) -> dict[str, Any] | None:
    try:
        return read_json_document(path)
    except InputError:
        return None


BENCHMARK = BenchmarkFamily()
