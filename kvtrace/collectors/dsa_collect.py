"""Run a dataset's prompts through a DSA model with the tracer on: ``kvtrace collect dsa``."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from kvtrace.collectors.datasets import DatasetRequest
from kvtrace.collectors.dsa_ref import ByteTokenizer, DsaRef
from kvtrace.collectors.dsa_tracer import DsaTracer
from kvtrace.errors import InputError
from kvtrace.warehouse import Warehouse


@dataclass
class CollectReport:
    run_id: str
    requests: int = 0
    skipped: int = 0
    new_tokens: int = 0
    seconds: float = 0.0


Progress = Callable[[CollectReport], None]


def collect_dsa(warehouse: Warehouse, requests: Iterable[DatasetRequest], *, model: DsaRef,
                tokenizer: ByteTokenizer, run_name: str, dataset: str,
                dataset_variant: str | None = None, block_sizes: tuple[int, ...] = (64,),
                sample_rate: float = 1.0, max_new_tokens: int = 16,
                max_prompt_tokens: int = 16384, temperature: float = 0.0, seed: int = 0,
                scores: Literal["stats", "full"] = "stats",
                progress: Progress | None = None) -> CollectReport:
    """Decode every request with ``model``, tracing its DSA selections into ``warehouse``.

    Prompts longer than ``max_prompt_tokens`` are not run; they are recorded in
    ``requests`` with a skip reason.  ``max_new_tokens`` 0 decodes until EOS or the
    model's max_seq_len.
    """
    tracer = DsaTracer(
        warehouse, run_name=run_name, dataset=dataset, block_sizes=block_sizes,
        topk=model.config.index_topk, sample_rate=sample_rate, seed=seed, scores=scores,
        model="dsa-ref", model_config=model.config.to_dict(), dataset_variant=dataset_variant,
        collector_config={"max_new_tokens": max_new_tokens, "temperature": temperature,
                          "max_prompt_tokens": max_prompt_tokens})
    report = CollectReport(tracer.run_id)
    started = time.perf_counter()
    limit = _prompt_limit(model, max_prompt_tokens)
    try:
        for request in requests:
            prompt = tokenizer.encode(request.prompt)
            if _skipped(tracer, report, request.request_id, len(prompt), limit):
                continue
            now = time.perf_counter() - started
            _decode(tracer, model, report, request.request_id, prompt, max_new_tokens,
                    arrival_s=now, clock_s=now, temperature=temperature,
                    eos_id=tokenizer.eos_id, seed=seed + request.request_id)
            report.seconds = time.perf_counter() - started
            if progress:
                progress(report)
    finally:
        tracer.close()
    report.seconds = time.perf_counter() - started
    return report


def _prompt_limit(model: DsaRef, max_prompt_tokens: int) -> int:
    return min(max_prompt_tokens, model.config.max_seq_len - 1)


def _skipped(tracer: DsaTracer, report: CollectReport, request_id: int, prompt_tokens: int,
             limit: int) -> bool:
    """Record a request whose prompt is too long as skipped; say whether it was."""
    if prompt_tokens <= limit:
        return False
    tracer.skip_request(request_id, prompt_tokens,
                        f"prompt of {prompt_tokens} tokens is longer than {limit}")
    report.skipped += 1
    return True


def _decode(tracer: DsaTracer, model: DsaRef, report: CollectReport, request_id: int,
            prompt: list[int], budget: int, *, arrival_s: float, clock_s: float,
            **generate: object) -> float:
    """Decode one request with the tracer on; returns its finish time on the caller's
    clock (``clock_s`` plus the seconds decoding took)."""
    tracer.begin_request(request_id, prompt)
    began = time.perf_counter()
    out = model.generate(prompt, budget, request_id=request_id, tracer=tracer, **generate)
    finish = clock_s + time.perf_counter() - began
    tracer.end_request(request_id, new_tokens=len(out), arrival_s=arrival_s, finish_s=finish)
    report.requests += 1
    report.new_tokens += len(out)
    return finish


def replay_arrivals(warehouse: Warehouse, arrivals: Iterable, *, model: DsaRef,
                    tokenizer: ByteTokenizer, run_name: str, dataset: str,
                    dataset_variant: str | None = None, batch_size: int = 1,
                    time_scale: float = 1.0, block_sizes: tuple[int, ...] = (64,),
                    max_new_tokens: int = 16, max_prompt_tokens: int = 16384,
                    seed: int = 0, progress: Progress | None = None) -> CollectReport:
    """Serve recorded arrivals FIFO on a simulated clock, tracing DSA selections.

    The clock starts at the first arrival (times divided by ``time_scale``).  When the
    model is free it takes up to ``batch_size`` requests that have arrived and runs them
    one after the other; each finishes when its own decoding ends.  Arrival, finish and
    latency go to ``requests``.  A request generates its recorded response length, at
    most ``max_new_tokens`` (0: no cap).
    """
    from kvtrace.collectors.datasets.burstgpt import filler_prompt

    if batch_size < 1 or time_scale <= 0:
        raise InputError("the batch size must be at least 1 and the time scale positive")
    tracer = DsaTracer(
        warehouse, run_name=run_name, dataset=dataset, block_sizes=block_sizes,
        topk=model.config.index_topk, seed=seed, model="dsa-ref",
        model_config=model.config.to_dict(), dataset_variant=dataset_variant,
        collector_config={"batch_size": batch_size, "time_scale": time_scale,
                          "max_new_tokens_cap": max_new_tokens,
                          "max_prompt_tokens": max_prompt_tokens})
    report = CollectReport(tracer.run_id)
    pending = deque(sorted(arrivals, key=lambda a: a.arrival_s))
    clock = 0.0
    started = time.perf_counter()
    limit = _prompt_limit(model, max_prompt_tokens)
    try:
        while pending:
            clock = max(clock, pending[0].arrival_s / time_scale)
            batch = []
            while pending and len(batch) < batch_size and (
                    pending[0].arrival_s / time_scale <= clock):
                batch.append(pending.popleft())
            for arrival in batch:
                if _skipped(tracer, report, arrival.request_id, arrival.prompt_tokens, limit):
                    continue
                prompt = tokenizer.encode(filler_prompt(arrival.prompt_tokens))
                wanted = max(arrival.response_tokens, 1)
                budget = min(wanted, max_new_tokens) if max_new_tokens > 0 else wanted
                clock = _decode(tracer, model, report, arrival.request_id, prompt, budget,
                                arrival_s=arrival.arrival_s / time_scale, clock_s=clock,
                                seed=seed + arrival.request_id)
            report.seconds = time.perf_counter() - started
            if progress:
                progress(report)
    finally:
        tracer.close()
    report.seconds = time.perf_counter() - started
    return report
