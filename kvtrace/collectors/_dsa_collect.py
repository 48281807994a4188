"""Run a dataset's prompts through a DSA model with the tracer on: ``kvtrace collect dsa``."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from kvtrace.collectors._needles import needle_spans
from kvtrace.collectors.datasets import DatasetRequest
from kvtrace.collectors.dsa_tracer import DsaTracer
from kvtrace.errors import InputError
from kvtrace.warehouse import Warehouse


class TracedModel(Protocol):
    """What the runners need of a model (`DsaRef`, `HfCausalLM`); a model that can
    decode several requests at once also has ``generate_batch`` (see `DsaRef`)."""

    @property
    def name(self) -> str: ...

    @property
    def index_topk(self) -> int: ...

    @property
    def max_seq_len(self) -> int: ...

    def config_dict(self) -> dict[str, Any]: ...

    def generate(
        self,
        prompt: list[int],
        max_new_tokens: int,
        *,
        request_id: int,
        tracer: Any,
        temperature: float,
        eos_id: int | None,
        seed: int,
    ) -> list[int]: ...


class Tokenizer(Protocol):
    @property
    def eos_id(self) -> int | None: ...

    def decode(self, tokens: list[int]) -> str: ...

    def encode(self, text: str) -> list[int]: ...


@dataclass
class CollectReport:
    run_id: str
    requests: int = 0
    skipped: int = 0
    new_tokens: int = 0
    seconds: float = 0.0


@dataclass
class _Job:
    """A request ready to decode."""

    request_id: int
    prompt: list[int]
    budget: int
    arrival_s: float
    source: DatasetRequest | None = None  # scored after decoding when it has references


Progress = Callable[[CollectReport], None]


def collect_dsa(
    warehouse: Warehouse,
    requests: Iterable[DatasetRequest],
    *,
    model: TracedModel,
    tokenizer: Tokenizer,
    run_name: str,
    dataset: str,
    dataset_variant: str | None = None,
    block_sizes: tuple[int, ...] = (64,),
    sample_rate: float = 1.0,
    max_new_tokens: int = 16,
    max_prompt_tokens: int = 16384,
    batch_size: int = 1,
    temperature: float = 0.0,
    seed: int = 0,
    scores: Literal["stats", "full"] = "stats",
    progress: Progress | None = None,
    commit_every_s: float = 30.0,
) -> CollectReport:
    """Decode every request with ``model``, tracing its DSA selections into ``warehouse``.

    Requests are decoded ``batch_size`` at a time (one batched decode step for all of
    them).  Prompts longer than ``max_prompt_tokens`` are not run; they are recorded in
    ``requests`` with a skip reason.  ``max_new_tokens`` 0 decodes until EOS or the
    model's max_seq_len.  The traced rows are committed every ``commit_every_s`` seconds
    and at the end.
    """
    _check_batching(model, batch_size)
    tracer = DsaTracer(
        warehouse,
        commit_every_s=commit_every_s,
        run_name=run_name,
        dataset=dataset,
        block_sizes=block_sizes,
        topk=model.index_topk,
        sample_rate=sample_rate,
        seed=seed,
        scores=scores,
        model=model.name,
        model_config=model.config_dict(),
        dataset_variant=dataset_variant,
        collector_config={
            "selection": model.config_dict().get("selection", "all-heads"),
            "max_new_tokens": max_new_tokens,
            "temperature": temperature,
            "max_prompt_tokens": max_prompt_tokens,
            "batch_size": batch_size,
        },
    )
    report = CollectReport(tracer.run_id)
    started = time.perf_counter()
    limit = _prompt_limit(model, max_prompt_tokens)
    decoding: dict[str, Any] = dict(
        model=model,
        tokenizer=tokenizer,
        report=report,
        temperature=temperature,
        eos_id=tokenizer.eos_id,
        seed=seed,
    )
    batch: list[_Job] = []
    try:
        for request in requests:
            prompt = tokenizer.encode(request.prompt)
            if _skipped(tracer, report, request.request_id, len(prompt), limit):
                continue
            batch.append(
                _Job(
                    request.request_id,
                    prompt,
                    max_new_tokens,
                    time.perf_counter() - started,
                    request,
                )
            )
            if len(batch) == batch_size:
                _decode(tracer, batch, clock_s=time.perf_counter() - started, **decoding)
                batch = []
                report.seconds = time.perf_counter() - started
                if progress:
                    progress(report)
        if batch:
            _decode(tracer, batch, clock_s=time.perf_counter() - started, **decoding)
    finally:
        tracer.close()
    report.seconds = time.perf_counter() - started
    if progress:
        progress(report)
    return report


def _check_batching(model: TracedModel, batch_size: int) -> None:
    if batch_size < 1:
        raise InputError("the batch size must be at least 1")
    if batch_size > 1 and not hasattr(model, "generate_batch"):
        raise InputError(f"{model.name} decodes one request at a time; use --batch-size 1")


def _prompt_limit(model: TracedModel, max_prompt_tokens: int) -> int:
    return min(max_prompt_tokens, model.max_seq_len - 1)


def _skipped(
    tracer: DsaTracer, report: CollectReport, request_id: int, prompt_tokens: int, limit: int
) -> bool:
    """Record a request whose prompt is too long as skipped; say whether it was."""
    if prompt_tokens <= limit:
        return False
    tracer.skip_request(
        request_id, prompt_tokens, f"prompt of {prompt_tokens} tokens is longer than {limit}"
    )
    report.skipped += 1
    return True


def _decode(
    tracer: DsaTracer,
    batch: list[_Job],
    *,
    model: TracedModel,
    tokenizer: Tokenizer,
    report: CollectReport,
    clock_s: float,
    temperature: float,
    eos_id: int | None,
    seed: int,
) -> float:
    """Decode a batch of requests with the tracer on; returns the time the last one
    finished on the caller's clock (``clock_s`` plus the seconds decoding took)."""
    for job in batch:
        tracer.begin_request(job.request_id, job.prompt)
    began = time.perf_counter()
    finished: dict[int, float] = {}

    def finish(row: int) -> None:
        finished[row] = clock_s + time.perf_counter() - began

    if len(batch) == 1:
        job = batch[0]
        outs = [
            model.generate(
                job.prompt,
                job.budget,
                request_id=job.request_id,
                tracer=tracer,
                temperature=temperature,
                eos_id=eos_id,
                seed=seed + job.request_id,
            )
        ]
        finish(0)
    else:
        # _check_batching made sure that the model has generate_batch
        outs = model.generate_batch(  # type: ignore[attr-defined]
            [job.prompt for job in batch],
            [job.budget for job in batch],
            request_ids=[job.request_id for job in batch],
            tracer=tracer,
            temperature=temperature,
            eos_id=eos_id,
            seeds=[seed + job.request_id for job in batch],
            on_finish=finish,
        )
    for row, (job, out) in enumerate(zip(batch, outs, strict=True)):
        if job.source is not None and job.source.references:
            _record_answer(tracer, tokenizer, job.source, out)
        tracer.end_request(
            job.request_id,
            new_tokens=len(out),
            token_ids=out,
            arrival_s=job.arrival_s,
            finish_s=finished[row],
        )
        report.requests += 1
        report.new_tokens += len(out)
    return max(finished.values())


def _record_answer(
    tracer: DsaTracer, tokenizer: Tokenizer, request: DatasetRequest, out: list[int]
) -> None:
    """Score the generated answer and note where the prompt hid the needle."""
    tracer.record_answer(
        request.request_id,
        task=request.task or "ruler",
        sample_index=request.request_id,
        prediction=tokenizer.decode(out),
        references=request.references,
        needle_spans=needle_spans(request, tokenizer.encode),
    )


def replay_arrivals(
    warehouse: Warehouse,
    arrivals: Iterable,
    *,
    model: TracedModel,
    tokenizer: Tokenizer,
    run_name: str,
    dataset: str,
    dataset_variant: str | None = None,
    batch_size: int = 1,
    time_scale: float = 1.0,
    block_sizes: tuple[int, ...] = (64,),
    max_new_tokens: int = 16,
    max_prompt_tokens: int = 16384,
    seed: int = 0,
    progress: Progress | None = None,
    commit_every_s: float = 30.0,
) -> CollectReport:
    """Serve recorded arrivals FIFO on a simulated clock, tracing DSA selections.

    The clock starts at the first arrival (times divided by ``time_scale``).  When the
    model is free it takes up to ``batch_size`` requests that have arrived and decodes
    them as one batch; each finishes when its own decoding ends, and the model is free
    again when the last one has.  Arrival, finish and latency go to ``requests``.  A
    request generates its recorded response length, at most ``max_new_tokens`` (0: no
    cap).
    """
    from kvtrace.collectors.datasets.burstgpt import filler_prompt

    _check_batching(model, batch_size)
    if time_scale <= 0:
        raise InputError("the time scale must be positive")
    tracer = DsaTracer(
        warehouse,
        commit_every_s=commit_every_s,
        run_name=run_name,
        dataset=dataset,
        block_sizes=block_sizes,
        topk=model.index_topk,
        seed=seed,
        model=model.name,
        model_config=model.config_dict(),
        dataset_variant=dataset_variant,
        collector_config={
            "selection": model.config_dict().get("selection", "all-heads"),
            "arrival_trace": True,
            "batch_size": batch_size,
            "time_scale": time_scale,
            "max_new_tokens_cap": max_new_tokens,
            "max_prompt_tokens": max_prompt_tokens,
        },
    )
    report = CollectReport(tracer.run_id)
    pending = deque(sorted(arrivals, key=lambda a: a.arrival_s))
    clock = 0.0
    started = time.perf_counter()
    limit = _prompt_limit(model, max_prompt_tokens)
    try:
        while pending:
            clock = max(clock, pending[0].arrival_s / time_scale)
            batch: list = []
            while (
                pending and len(batch) < batch_size and (pending[0].arrival_s / time_scale <= clock)
            ):
                arrival = pending.popleft()
                if _skipped(tracer, report, arrival.request_id, arrival.prompt_tokens, limit):
                    continue
                wanted = max(arrival.response_tokens, 1)
                text = arrival.prompt or filler_prompt(arrival.prompt_tokens)
                batch.append(
                    _Job(
                        arrival.request_id,
                        tokenizer.encode(text),
                        min(wanted, max_new_tokens) if max_new_tokens > 0 else wanted,
                        arrival.arrival_s / time_scale,
                    )
                )
            if batch:
                clock = _decode(
                    tracer,
                    batch,
                    model=model,
                    tokenizer=tokenizer,
                    report=report,
                    clock_s=clock,
                    temperature=0.0,
                    eos_id=None,
                    seed=seed,
                )
            report.seconds = time.perf_counter() - started
            if progress:
                progress(report)
    finally:
        tracer.close()
    report.seconds = time.perf_counter() - started
    return report
