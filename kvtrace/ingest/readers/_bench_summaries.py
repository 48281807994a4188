"""Read serving-benchmark files that carry the tool's own summary.

- ``sglang``: SGLang's ``bench_serving`` output, one JSON line appended per load level
  (request rate or concurrency): the summary the tool printed (``completed``,
  ``duration``, ``mean_ttft_ms``, ``p99_e2e_latency_ms``, ...) and, with
  ``--output-details``, the per-request lists ``input_lens``, ``output_lens``, ``ttfts``
  and ``itls`` (seconds) and ``errors``.  The file is one run; its line (from 0) is the
  load level.  There is no per-request end-to-end latency: a request's is its TTFT plus
  its chunk gaps, and its time per output token that decode time over its output tokens
  after the first.
- ``vllm``: the summary ``vllm bench serve`` (formerly ``benchmarks/benchmark_serving.py``)
  writes at the top level of its result JSON (``duration``, ``completed``, ``failed``,
  ``mean_ttft_ms``, ``p99_e2el_ms``, ...), read by `read_vllm_summary` beside the
  per-request lists `kvtrace.ingest.readers.results` reads.
- ``aiperf_summary``: AIPerf's ``profile_export_aiperf.json``, and ``genai_perf``:
  GenAI-Perf's ``profile_export_genai_perf.json``: one object of metrics, each
  ``{unit, avg, p50, p90, p99, std, ...}`` (AIPerf 0.1 nests them under ``records`` and
  names time to first token ``ttft``).  Their "inter token latency" is the time per
  output token after the first, so it fills the TPOT columns; AIPerf's "inter chunk
  latency" fills the ITL ones.

Cached prompt tokens, where the tool records them:

- SGLang's ``--cache-report`` adds a ``cache_report`` object to the line
  (``total_prompt_tokens``, ``total_cached_tokens``, ``cache_hit_rate_pct``,
  ``device_cached_tokens``, ``host_cached_tokens``, ``storage_cached_tokens``,
  ``storage_backend``) and, with ``--output-details``, the per-request lists
  ``cached_tokens`` and ``cached_tokens_details`` (the server's ``meta_info`` split by
  tier: ``{"device", "host"}``, ``"storage"`` and ``"storage_backend"`` only when the
  server has an L3 storage backend; null when nothing was cached).  Field names from
  sglang 0.5.23 (PyPI), ``sglang/benchmark/serving.py`` (``RequestFuncOutput``, the
  ``cache_report`` and ``result_details`` it writes) and
  ``sglang/srt/managers/scheduler_components/output_streamer.py``
  (``get_cached_tokens_details``).  A tier the server did not name is NULL; a request
  with nothing cached has 0 on the device and host tiers.
- AIPerf (0.13.0 on PyPI, ``aiperf/metrics/types/usage_cache_metrics.py`` and
  ``usage_total_metrics.py``): the export's ``total_usage_prompt_cache_read_tokens``
  and ``overall_usage_prompt_cache_read_pct`` (cache reads over the prompt tokens the
  server reported), from the servers' ``usage.prompt_tokens_details.cached_tokens``; no
  split by tier.
- vLLM's ``vllm bench serve`` (0.33.0, ``vllm/benchmarks/serve.py``) and GenAI-Perf
  (perf_analyzer at commit 263c5f6e, ``genai-perf/genai_perf``) record no cached
  tokens: their cache columns stay NULL.

Summary rows go to ``benchmark_summaries`` in the column names of
``serving_benchmark_table``; per-request rows to ``request_timings``.  A line whose
summary is not numbers goes to the quarantine whole; a line whose details are not
well-formed keeps its summary and quarantines the details, saying why.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from kvtrace.errors import InputError
from kvtrace.ingest._lines import json_records, raw_text, read_json_document
from kvtrace.ingest._values import (
    MILLISECONDS_PER_UNIT,
    SECONDS_PER_UNIT,
    finite_number,
    is_number,
    whole_number,
)
from kvtrace.warehouse.rows.rejects import BadLine
from kvtrace.warehouse.schema.workload import CACHE_TIERS

STATISTICS = {"mean": "avg", "median": "p50", "std": "std", "p90": "p90", "p99": "p99"}
SGLANG_METRICS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e_latency"}
VLLM_METRICS = ("ttft", "tpot", "itl", "e2el")  # vLLM's key names are the table's
SGLANG_DETAILS = ("input_lens", "output_lens", "ttfts", "itls", "errors")
SGLANG_CACHE_DETAILS = ("cached_tokens", "cached_tokens_details")  # with --cache-report
# The metrics of AIPerf's and GenAI-Perf's JSON exports, by kvtrace's names: each
# export's current name first, then the names earlier versions gave it
EXPORT_METRICS = {
    "ttft": ("time_to_first_token", "ttft"),
    "tpot": ("inter_token_latency",),
    "itl": ("inter_chunk_latency",),
    "e2el": ("request_latency",),
}


def is_sglang_record(record: dict[str, Any]) -> bool:
    return "median_e2e_latency_ms" in record and "completed" in record


def has_vllm_summary(document: dict[str, Any]) -> bool:
    """Whether a vLLM result JSON holds the statistics the benchmark printed."""
    return any(
        f"{statistic}_{metric}_ms" in document
        for metric in VLLM_METRICS
        for statistic in STATISTICS
    )


def read_vllm_summary(document: dict[str, Any]) -> dict[str, Any]:
    """The summary row of a vLLM result JSON: what ``vllm bench serve`` printed.

    vLLM writes an infinite request rate as the string ``"inf"``; a percentile it was not
    asked for (``--metric-percentiles``) is absent and stays NULL."""
    rate = document.get("request_rate")
    summary: dict[str, Any] = {
        "load_level": 0,
        "tool": "vllm",
        "request_rate": math.inf
        if rate in ("inf", math.inf)
        else _printed(document, "request_rate"),
        "max_concurrency": _printed_count(document, "max_concurrency"),
        "completed": _printed_count(document, "completed"),
        "failed": _printed_count(document, "failed"),
        "duration_s": _printed(document, "duration"),
        "total_input_tokens": _printed_count(document, "total_input_tokens"),
        "total_output_tokens": _printed_count(document, "total_output_tokens"),
        "request_throughput": _printed(document, "request_throughput"),
        "output_throughput": _printed(document, "output_throughput"),
        "total_token_throughput": _printed(document, "total_token_throughput"),
    }
    for metric in VLLM_METRICS:
        for statistic in STATISTICS:
            key = f"{statistic}_{metric}_ms"
            summary[key] = _printed(document, key)
    return summary


def _printed(record: dict[str, Any], key: str) -> float | None:
    """A non-negative number a tool printed under ``key``, None where it printed none."""
    value = record.get(key)
    return None if value is None else finite_number(key, value, minimum=0)


def _printed_count(record: dict[str, Any], key: str) -> int | None:
    """A count a tool printed under ``key``, None where it printed none."""
    value = record.get(key)
    return None if value is None else whole_number(key, value)


def export_metrics(document: dict[str, Any]) -> dict[str, Any]:
    """The metrics of an AIPerf or GenAI-Perf JSON export, by their names."""
    records = document.get("records")
    return records if isinstance(records, dict) else document


def is_summary_export(document: dict[str, Any]) -> str | None:
    """``aiperf_summary`` or ``genai_perf`` for a JSON export of either tool, else None."""
    metrics = export_metrics(document)
    throughput = metrics.get("request_throughput")
    if not isinstance(throughput, dict) or "avg" not in throughput:
        return None
    if not any(
        isinstance(metrics.get(name), dict) for name in (*EXPORT_METRICS["ttft"], "request_latency")
    ):
        return None
    return "aiperf_summary" if "benchmark_duration" in metrics else "genai_perf"


def read_sglang_lines(
    path: Path,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[BadLine]]:
    """The summary rows and per-request rows of an SGLang bench_serving JSONL file."""
    summaries: list[dict[str, Any]] = []
    requests: list[dict[str, Any]] = []
    rejected: list[BadLine] = []
    for line_no, text, record in json_records(path, rejected):
        level = line_no - 1
        try:
            if not isinstance(record, dict) or not is_sglang_record(record):
                raise ValueError("not a bench_serving result line")
            summaries.append(_sglang_summary(record, level))
        except ValueError as exc:
            rejected.append(BadLine(line_no, f"bad result line: {exc}"[:300], raw_text(text)))
            continue
        if not any(key in record for key in SGLANG_DETAILS):
            continue
        try:
            rows = _sglang_requests(record, level)
        except ValueError as exc:
            reason = f"per-request details left out, the summary kept: {exc}"[:300]
            rejected.append(BadLine(line_no, reason, raw_text(text)))
            continue
        summaries[-1]["failed"] = sum(row["error"] is not None for row in rows)
        requests.extend(rows)
    rejected.sort(key=lambda bad: bad.line_no)
    return summaries, requests, rejected


def _sglang_summary(record: dict[str, Any], level: int) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "load_level": level,
        "tool": "sglang",
        "request_rate": _sglang_rate(record),
        "max_concurrency": _printed_count(record, "max_concurrency"),
        "completed": _printed_count(record, "completed"),
        "duration_s": _printed(record, "duration"),
        "total_input_tokens": _printed_count(record, "total_input_tokens"),
        "total_output_tokens": _printed_count(record, "total_output_tokens"),
        "request_throughput": _printed(record, "request_throughput"),
        "input_throughput": _printed(record, "input_throughput"),
        "output_throughput": _printed(record, "output_throughput"),
        "total_token_throughput": _printed(record, "total_throughput"),
    }
    for metric, name in SGLANG_METRICS.items():
        for statistic in STATISTICS:
            summary[f"{statistic}_{metric}_ms"] = _printed(record, f"{statistic}_{name}_ms")
    return summary | _sglang_cache_report(record.get("cache_report"))


def _sglang_rate(record: dict[str, Any]) -> float | None:
    """The request rate of a line: inf for all at once, None for ``"trace"`` (the
    requests replayed at their trace's timestamps, no one rate)."""
    rate = record.get("request_rate")
    if rate == math.inf:
        return math.inf
    return None if rate == "trace" else _printed(record, "request_rate")


def _sglang_cache_report(report: object) -> dict[str, Any]:
    """The cache columns of a line written with ``--cache-report``: the cached tokens
    SGLang counted over its successful requests, in all and per tier, and each over
    their prompt tokens (``total_prompt_tokens``)."""
    if report is None:
        return {}
    if not isinstance(report, dict):
        raise ValueError("cache_report must be an object")
    prompt = _printed_count(report, "total_prompt_tokens")
    cached = _printed_count(report, "total_cached_tokens")
    columns: dict[str, Any] = {
        "total_cached_tokens": cached,
        "prefix_hit_rate": _share(cached, prompt),
    }
    for tier in CACHE_TIERS:
        tokens = _printed_count(report, f"{tier}_cached_tokens")
        columns[f"{tier}_cached_tokens"] = tokens
        columns[f"{tier}_hit_rate"] = _share(tokens, prompt)
    return columns


def _share(part: int | None, whole: int | None) -> float | None:
    """``part / whole``, None when either is unknown or there is no whole."""
    return None if part is None or not whole else part / whole


def _sglang_requests(record: dict[str, Any], level: int) -> list[dict[str, Any]]:
    ttfts = record.get("ttfts")
    count = len(ttfts) if isinstance(ttfts, list) else 0
    lists: dict[str, list[Any]] = {}
    for key in SGLANG_DETAILS:
        value = record.get(key)
        if not isinstance(value, list) or len(value) != count:
            raise ValueError(f"{key} must be a list of one value per request ({count}, like ttfts)")
        lists[key] = value
    cache = _sglang_cache_lists(record, count)
    rows = []
    for i in range(count):
        error = lists["errors"][i] or None
        gaps = lists["itls"][i]
        if not isinstance(gaps, list):
            raise ValueError(f"itls[{i}] must be a list of non-negative numbers")
        itl = [finite_number(f"itls[{i}]", gap, minimum=0) for gap in gaps]
        ttft = finite_number(f"ttfts[{i}]", lists["ttfts"][i], minimum=0)
        output_tokens = whole_number(f"output_lens[{i}]", lists["output_lens"][i])
        e2e = None if error else ttft + sum(itl)
        rows.append(
            {
                "load_level": level,
                "request_idx": i,
                "origin": "measured",
                "input_tokens": whole_number(f"input_lens[{i}]", lists["input_lens"][i]),
                "output_tokens": output_tokens,
                "ttft_s": None if error else ttft,
                "itl_s": itl,
                "tpot_s": time_per_output_token(ttft, e2e, output_tokens),
                "e2e_s": e2e,
                "error": None if error is None else str(error),
                **({} if cache is None else _cached_by_tier(cache[0][i], cache[1][i], i)),
            }
        )
    return rows


def _sglang_cache_lists(record: dict[str, Any], count: int) -> tuple[list[Any], list[Any]] | None:
    """The per-request ``cached_tokens`` and ``cached_tokens_details`` of a line written
    with ``--cache-report --output-details`` (details all null when absent), else None."""
    cached, details = record.get("cached_tokens"), record.get("cached_tokens_details")
    if cached is None:
        return None
    for key, value in zip(SGLANG_CACHE_DETAILS, (cached, details), strict=True):
        if value is not None and (not isinstance(value, list) or len(value) != count):
            raise ValueError(f"{key} must be a list of one value per request ({count}, like ttfts)")
    return cached, details if details is not None else [None] * count


def _cached_by_tier(cached: object, details: object, i: int) -> dict[str, int | None]:
    """Request ``i``'s cached tokens and their tiers, as SGLang's server reports them:
    its details name ``device`` and ``host`` (0 when left out) and ``storage`` only with
    a storage backend; no details and nothing cached is 0 on the device and host; no
    details for cached tokens leaves the tiers unknown."""
    tokens = whole_number(f"cached_tokens[{i}]", cached)
    if details is None:
        known = 0 if tokens == 0 else None
        return {
            "cached_tokens": tokens,
            "device_cached_tokens": known,
            "host_cached_tokens": known,
            "storage_cached_tokens": None,
        }
    if not isinstance(details, dict):
        raise ValueError(f"cached_tokens_details[{i}] must be an object or null")
    row: dict[str, int | None] = {"cached_tokens": tokens}
    for tier in CACHE_TIERS:
        value = details.get(tier)
        row[f"{tier}_cached_tokens"] = (
            None
            if value is None and tier == "storage"
            else whole_number(f"cached_tokens_details[{i}].{tier}", value or 0)
        )
    return row


def time_per_output_token(
    ttft: float | None, e2e: float | None, output_tokens: int | None
) -> float | None:
    """A request's TPOT as the serving benchmarks define it: its decode time spread over
    the tokens after the first, None for a failed request or one of fewer than two."""
    if ttft is None or e2e is None or output_tokens is None or output_tokens < 2:
        return None
    return (e2e - ttft) / (output_tokens - 1)


def read_summary_export(path: Path, fmt: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The summary row of an AIPerf or GenAI-Perf JSON export, and the run's settings; a
    value no column holds (not a number, negative, infinite, beyond 2**53) is an
    `InputError` naming the file and the value."""
    document = read_json_document(path)
    try:
        return _export_summary(document, fmt)
    except ValueError as exc:
        raise InputError(f"{path}: {exc}") from None


def _export_summary(document: dict[str, Any], fmt: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """`read_summary_export` of a parsed export; ValueError for a value out of range."""
    metrics = export_metrics(document)
    tool = "aiperf" if fmt == "aiperf_summary" else "genai-perf"

    def stat(metric: str, statistic: str) -> tuple[float, str] | None:
        """The statistic's value and its unit, when the export has it."""
        entry = metrics.get(metric)
        if not isinstance(entry, dict) or entry.get(statistic) is None:
            return None
        value = finite_number(f"{metric}.{statistic}", entry[statistic], minimum=0)
        return value, str(entry.get("unit", ""))

    def number(metric: str) -> float | None:
        found = stat(metric, "avg")
        return None if found is None else found[0]

    def milliseconds(metric: str, statistic: str) -> float | None:
        found = stat(metric, statistic)
        if found is None:
            return None
        value, unit = found
        if unit not in MILLISECONDS_PER_UNIT:
            raise ValueError(f"{metric} is in {unit!r}, not a unit of time")
        return value * MILLISECONDS_PER_UNIT[unit]

    def total(metric: str) -> int | None:
        value = number(metric)
        return None if value is None else round(value)

    span = stat("benchmark_duration", "avg")  # seconds unless it says otherwise
    duration = None if span is None else span[0] * SECONDS_PER_UNIT.get(span[1], 1.0)
    settings = _load_settings(document.get("input_config"))
    summary: dict[str, Any] = {
        "load_level": 0,
        "tool": tool,
        "request_rate": settings.get("request_rate"),
        "max_concurrency": settings.get("max_concurrency"),
        "completed": total("request_count"),
        "failed": total("error_request_count") or (0 if tool == "aiperf" else None),
        "duration_s": duration,
        "total_input_tokens": total("total_isl"),
        "total_output_tokens": total("total_osl"),
        "request_throughput": number("request_throughput"),
        "output_throughput": number("output_token_throughput"),
    }
    for metric, names in EXPORT_METRICS.items():
        name = next((name for name in names if name in metrics), names[0])
        for statistic, key in STATISTICS.items():
            summary[f"{statistic}_{metric}_ms"] = milliseconds(name, key)
    cached = total("total_usage_prompt_cache_read_tokens")  # AIPerf's; no tiers
    percent = number("overall_usage_prompt_cache_read_pct")
    summary["total_cached_tokens"] = cached
    summary["prefix_hit_rate"] = (
        _share(cached, total("total_usage_prompt_tokens")) if percent is None else percent / 100
    )
    return summary, {k: v for k, v in settings.items() if v is not None}


def _load_settings(config: object) -> dict[str, Any]:
    """The request rate and concurrency an export's ``input_config`` asked for (a value
    that is no number is not a setting; a number out of range raises `BadValue`)."""
    if not isinstance(config, dict):
        return {}
    places = {"input_config": config, "input_config.loadgen": config.get("loadgen") or {}}
    found: dict[str, Any] = {}
    for where, place in places.items():
        if not isinstance(place, dict):
            continue
        concurrency, rate = place.get("concurrency"), place.get("request_rate")
        if is_number(concurrency):
            found["max_concurrency"] = whole_number(f"{where}.concurrency", concurrency)
        if is_number(rate):
            found["request_rate"] = finite_number(f"{where}.request_rate", rate, minimum=0)
    return found
