"""vLLM's serving-benchmark arithmetic, written again for the tests (vLLM does not install
here), so that kvtrace's serving_benchmark_table can be held against it.

Read from vllm-project/vllm at commit 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1:
``vllm/benchmarks/serve.py`` (``calculate_metrics``; the result dict ``benchmark`` returns
and ``main`` saves with ``--save-result --save-detailed``) and
``vllm/benchmarks/lib/endpoint_request_func.py`` (``RequestFuncOutput``: a request's
timings as the streaming client takes them, and what a failure leaves in them).  What is
vLLM's here is its arithmetic; the code is this project's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

METRICS = ("ttft", "tpot", "itl", "e2el")
PERCENTILES = (90.0, 99.0)  # --metric-percentiles 90,99


@dataclass
class Outcome:
    """One request as vLLM's client recorded it (its ``RequestFuncOutput``)."""

    prompt_len: int
    success: bool = False
    error: str = ""
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    latency: float = 0.0
    usage_tokens: int | None = 0  # the server's completion_tokens, when it sent usage
    text_tokens: int = 0  # what the tokenizer counts in the generated text
    start_time: float = 0.0  # perf_counter when the request was sent
    queue_time: float = 0.0  # time it waited for the client's concurrency limit


def streamed(
    prompt_len: int,
    start: float,
    chunk_times: list[float],
    usage_tokens: int | None,
    text_tokens: int,
    queue_time: float = 0.0,
    end: float | None = None,
) -> Outcome:
    """A request whose token chunks arrived at ``chunk_times`` (perf_counter seconds): its
    TTFT, chunk gaps and latency taken by the same subtractions the client makes.  The
    latency runs to the last chunk, or to ``end`` for a client that also waits for what
    follows it (vLLM's chat client before it left out the trailing usage chunk)."""
    return Outcome(
        prompt_len,
        success=True,
        ttft=chunk_times[0] - start,
        itl=[later - earlier for earlier, later in pairwise(chunk_times)],
        latency=(chunk_times[-1] if end is None else end) - start,
        usage_tokens=usage_tokens,
        text_tokens=text_tokens,
        start_time=start,
        queue_time=queue_time,
    )


def failed(prompt_len: int, start: float, error: str, queue_time: float = 0.0) -> Outcome:
    """A request that got no chunk: an HTTP error (its reason, possibly empty) or an
    exception (its traceback); TTFT and latency stay 0."""
    return Outcome(prompt_len, error=error, start_time=start, queue_time=queue_time)


def output_len(outcome: Outcome) -> int:
    """The output length vLLM counts: the server's usage count, else the tokenizer's."""
    if not outcome.success:
        return 0
    return outcome.usage_tokens or outcome.text_tokens


def outcomes_of(document: dict) -> list[Outcome]:
    """The requests of a result file that keeps no latencies, as vLLM's client recorded
    them: each request's latency ends at its last chunk."""
    return [
        Outcome(
            document["input_lens"][i],
            success=not error,
            error=error,
            ttft=document["ttfts"][i],
            itl=document["itls"][i],
            latency=document["ttfts"][i] + sum(document["itls"][i]),
            usage_tokens=document["output_lens"][i],
        )
        for i, error in enumerate(document["errors"])
    ]


@dataclass
class Reported:
    """What ``calculate_metrics`` reports, by serving_benchmark_table's column names, and
    the metrics it had no values for (it reports 0 for those)."""

    values: dict[str, float]
    empty: set[str]


def calculate_metrics(
    outcomes: list[Outcome], duration: float, goodput_ms: dict[str, float]
) -> Reported:
    """vLLM's numbers for a benchmark of ``outcomes`` that took ``duration`` seconds."""
    series: dict[str, list[float]] = {metric: [] for metric in METRICS}
    goodput_tpots: list[float] = []  # one per completed request: 0 below two tokens
    total_input = 0
    for outcome in outcomes:
        if not outcome.success:
            continue
        tokens = output_len(outcome)
        total_input += outcome.prompt_len
        tpot = 0.0
        if tokens > 1:
            tpot = (outcome.latency - outcome.ttft) / (tokens - 1)
            series["tpot"].append(tpot)
        goodput_tpots.append(tpot)
        series["itl"].extend(outcome.itl)
        series["ttft"].append(outcome.ttft)
        series["e2el"].append(outcome.latency)
    completed = len(series["ttft"])
    total_output = sum(output_len(outcome) for outcome in outcomes)
    judged = {"ttft": series["ttft"], "tpot": goodput_tpots, "e2el": series["e2el"]}
    limits = {name: ms / 1000 for name, ms in goodput_ms.items()}  # compared in seconds
    good = sum(
        all(judged[name][i] <= limit for name, limit in limits.items()) for i in range(completed)
    )
    values: dict[str, float] = {
        "completed": completed,
        "failed": len(outcomes) - completed,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": completed / duration,
        "output_throughput": total_output / duration,
        "total_token_throughput": (total_input + total_output) / duration,
    }
    if goodput_ms:
        values["request_goodput"] = good / duration
    for metric, data in series.items():
        sample = np.asarray(data or [0.0])  # a metric of no values reports 0
        values[f"mean_{metric}_ms"] = float(np.mean(sample)) * 1000
        values[f"median_{metric}_ms"] = float(np.median(sample)) * 1000
        values[f"std_{metric}_ms"] = float(np.std(sample)) * 1000
        for p in PERCENTILES:
            values[f"p{p:g}_{metric}_ms"] = float(np.percentile(sample, p)) * 1000
    return Reported(values, {metric for metric, data in series.items() if not data})


def result_file(
    outcomes: list[Outcome],
    duration: float,
    goodput_ms: dict[str, float],
    *,
    request_rate: float = math.inf,
    max_concurrency: int | None = None,
    printed: bool = True,
) -> dict[str, object]:
    """The JSON ``vllm bench serve --save-result --save-detailed --percentile-metrics
    ttft,tpot,itl,e2el --metric-percentiles 90,99`` writes for ``outcomes``, in its key
    order; ``printed=False`` leaves out the statistics it printed."""
    reported = calculate_metrics(outcomes, duration, goodput_ms).values
    document: dict[str, object] = {
        "date": "20261101-120000",
        "endpoint_type": "openai",
        "backend": "openai",
        "label": None,
        "model_id": "example/model",
        "tokenizer_id": "example/model",
        "num_prompts": len(outcomes),
        "request_rate": "inf" if math.isinf(request_rate) else request_rate,
        "burstiness": 1.0,
        "max_concurrency": max_concurrency,
        "duration": duration,
        **{
            key: reported[key]
            for key in (
                "completed",
                "failed",
                "total_input_tokens",
                "total_output_tokens",
                "request_throughput",
            )
        },
        "request_goodput": reported.get("request_goodput"),
        "output_throughput": reported["output_throughput"],
        "total_token_throughput": reported["total_token_throughput"],
        "input_lens": [outcome.prompt_len for outcome in outcomes],
        "output_lens": [output_len(outcome) for outcome in outcomes],
        "ttfts": [outcome.ttft for outcome in outcomes],
        "itls": [outcome.itl for outcome in outcomes],
        "latencies": [outcome.latency for outcome in outcomes],
        "start_times": [outcome.start_time for outcome in outcomes],
        "queue_times": [outcome.queue_time for outcome in outcomes],
        "generated_texts": ["" for _ in outcomes],
        "errors": [outcome.error for outcome in outcomes],
        "max_output_tokens_per_s": 0.0,
        "max_concurrent_requests": 0,
        "rtfx": 0.0,
    }
    if printed:
        for metric in METRICS:
            for statistic in ("mean", "median", "std", *(f"p{p:g}" for p in PERCENTILES)):
                key = f"{statistic}_{metric}_ms"
                document[key] = reported[key]
    return document


def disagreements(row: dict[str, object], reported: Reported) -> list[str]:
    """Each statistic where a serving_benchmark_table row is not vLLM's number, with both
    numbers; where vLLM had no values and printed 0, the row must hold NULL."""
    wrong = []
    for column, expected in reported.values.items():
        got = row[column]
        metric = column.split("_")[1] if column.endswith("_ms") else None
        if metric in reported.empty:
            agrees = got is None and expected == 0
        else:
            agrees = isinstance(got, (int, float)) and math.isclose(
                got, expected, rel_tol=1e-9, abs_tol=1e-9
            )
        if not agrees:
            wrong.append(f"{column}: kvtrace {got!r}, vLLM {expected!r}")
    return wrong
