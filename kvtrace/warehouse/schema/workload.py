"""Workload traces: one row per request of an arrival trace."""

from __future__ import annotations

import pyarrow as pa

from kvtrace.warehouse.schema.core import TableSpec

__all__ = [
    "BATCH_METRICS",
    "BENCHMARK_SUMMARIES",
    "CACHE_TIERS",
    "REQUEST_TIMINGS",
    "WORKLOAD_REQUESTS",
]

# The tiers a serving engine reports its prefix-cache hits by: SGLang's
# cached_tokens_details (GPU memory, host memory, the L3 storage backend)
CACHE_TIERS = ("device", "host", "storage")

WORKLOAD_REQUESTS = TableSpec(
    "workload_requests",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("request_idx", pa.int64()),  # the request's place in the trace, from 0
            ("arrival_s", pa.float64()),  # seconds since the trace's first arrival
            ("input_tokens", pa.int64()),
            ("output_tokens", pa.int64()),
            ("hash_ids", pa.list_(pa.int64())),  # prefix-block hashes, NULL when absent
            ("hash_block_tokens", pa.int32()),  # tokens per hashed block
            ("model", pa.string()),
            ("log_type", pa.string()),
            # the conversation or session, when recorded; for a trace of parent links
            # alone (Bailian), the root request of the request's parent chain
            ("session_id", pa.string()),
            # the request's turn in its session, 1-based as the trace writes it
            ("turn", pa.int64()),
            # the trace's kind of request (Bailian's text, image, file, search; an agentic
            # trace's agent kind)
            ("request_type", pa.string()),
            ("parent_id", pa.string()),  # the request it follows on from, NULL for a root
            ("request_key", pa.string()),  # the trace's own id of the request
            # Files before turn, request_type, parent_id and request_key read them as NULL.
        ]
    ),
    partition_by=("run_id",),
    sort_by=("request_idx",),
    record_key=("request_idx",),
)

REQUEST_TIMINGS = TableSpec(
    "request_timings",
    pa.schema(
        [
            ("run_id", pa.string()),
            # the load level within the run: the line of an SGLang bench_serving file (one
            # line per request rate or concurrency), 0 for one-level formats
            ("load_level", pa.int64()),
            ("request_idx", pa.int64()),
            ("origin", pa.string()),  # measured (a benchmark) or simulated (a simulator)
            ("arrival_s", pa.float64()),
            ("input_tokens", pa.int64()),
            ("output_tokens", pa.int64()),
            ("ttft_s", pa.float64()),
            ("itl_s", pa.list_(pa.float64())),  # inter-token latencies, when recorded
            # time per output token after the first: (e2e - ttft) / (output tokens - 1), or
            # the simulator's own (Vidur's normalised decode time)
            ("tpot_s", pa.float64()),
            ("e2e_s", pa.float64()),
            ("scheduling_delay_s", pa.float64()),
            ("preemptions", pa.int64()),
            ("error", pa.string()),
            # prompt tokens the server found cached, where the tool recorded them (SGLang
            # with --cache-report, AIPerf's usage_prompt_cache_read_tokens), and SGLang's
            # split of them by the tier that held them (cached_tokens_details); NULL where
            # the file does not say.  Files before these columns read them as NULL.
            ("cached_tokens", pa.int64()),
            *((f"{tier}_cached_tokens", pa.int64()) for tier in CACHE_TIERS),
        ]
    ),
    partition_by=("run_id",),
    sort_by=("load_level", "request_idx"),
    record_key=("load_level", "request_idx"),
)

_STATISTICS = ("mean", "median", "std", "p90", "p99")
BENCHMARK_SUMMARIES = TableSpec(
    "benchmark_summaries",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("load_level", pa.int64()),  # as in request_timings
            ("tool", pa.string()),  # vllm, sglang, aiperf or genai-perf: who computed them
            ("request_rate", pa.float64()),  # the rate asked for; inf: all at once
            ("max_concurrency", pa.int64()),
            ("completed", pa.int64()),
            ("failed", pa.int64()),
            ("duration_s", pa.float64()),
            ("total_input_tokens", pa.int64()),
            ("total_output_tokens", pa.int64()),
            ("request_throughput", pa.float64()),
            ("input_throughput", pa.float64()),
            ("output_throughput", pa.float64()),
            ("total_token_throughput", pa.float64()),
            *(
                (f"{statistic}_{metric}_ms", pa.float64())
                for metric in ("ttft", "tpot", "itl", "e2el")
                for statistic in _STATISTICS
            ),
            # the cached prompt tokens the tool counted (SGLang's cache_report, AIPerf's
            # total_usage_prompt_cache_read_tokens), per tier where it splits them, and
            # each over the prompt tokens it counted them against
            ("total_cached_tokens", pa.int64()),
            *((f"{tier}_cached_tokens", pa.int64()) for tier in CACHE_TIERS),
            ("prefix_hit_rate", pa.float64()),
            *((f"{tier}_hit_rate", pa.float64()) for tier in CACHE_TIERS),
        ]
    ),
    partition_by=("run_id",),
    sort_by=("load_level",),
    record_key=("load_level",),
)
"""What a serving benchmark printed for a load level, when its file holds the summary:
one row per (run, load level), in ``serving_benchmark_table``'s column names; NULL where
the tool does not report a number."""

BATCH_METRICS = TableSpec(
    "batch_metrics",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("batch_idx", pa.int64()),
            ("batch_size", pa.int64()),
            ("prefill_tokens", pa.int64()),
            ("decode_tokens", pa.int64()),
            ("execution_time_s", pa.float64()),
        ]
    ),
    partition_by=("run_id",),
    sort_by=("batch_idx",),
    record_key=("batch_idx",),
)
