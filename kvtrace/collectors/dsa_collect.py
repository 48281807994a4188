"""Run a dataset's prompts through a DSA model with the tracer on: ``kvtrace collect dsa``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from kvtrace.collectors.datasets import DatasetRequest
from kvtrace.collectors.dsa_ref import ByteTokenizer, DsaRef
from kvtrace.collectors.dsa_tracer import DsaTracer
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
    try:
        for request in requests:
            prompt = tokenizer.encode(request.prompt)
            limit = min(max_prompt_tokens, model.config.max_seq_len - 1)
            if len(prompt) > limit:
                tracer.skip_request(request.request_id, len(prompt),
                                    f"prompt of {len(prompt)} tokens is longer than {limit}")
                report.skipped += 1
                continue
            arrival = time.perf_counter() - started
            tracer.begin_request(request.request_id, prompt)
            out = model.generate(prompt, max_new_tokens, request_id=request.request_id,
                                 tracer=tracer, temperature=temperature,
                                 eos_id=tokenizer.eos_id, seed=seed + request.request_id)
            tracer.end_request(request.request_id, new_tokens=len(out), arrival_s=arrival,
                               finish_s=time.perf_counter() - started)
            report.requests += 1
            report.new_tokens += len(out)
            report.seconds = time.perf_counter() - started
            if progress:
                progress(report)
    finally:
        tracer.close()
    report.seconds = time.perf_counter() - started
    return report
