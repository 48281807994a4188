"""Trace DSA top-k selections of a running model straight into the warehouse.

The public API (guides: "Instrument your engine", "Python API")::

    import kvtrace

    with kvtrace.trace("warehouse", run_name="ruler-dsa", dataset="ruler") as tracer:
        tracer.begin_request(request_id, prompt_token_ids)
        with tracer.step({request_id: start_pos}):        # one forward step, all layers
            ...  # inside the model, per layer (any module, no tracer at hand):
            kvtrace.record_topk(layer_id, topk_indices, scores)
        tracer.end_request(request_id, new_tokens=n, token_ids=generated)

A record sampled out or of an untraced layer costs one check.  A step keeps its records
on their device (`kvtrace.collectors._dsa_record`), moves them to the host in one
transfer when it ends, and hands them to a background thread that writes through the
`DsaWriter` ingest uses and commits every ``commit_every_s`` seconds; leaving the
``with`` block, even by Ctrl-C's KeyboardInterrupt, commits every completed step.
"""

from __future__ import annotations

import copy
import random
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

import numpy as np

from kvtrace.collectors._dsa_prefill import PrefillStep, prefill_table
from kvtrace.collectors._dsa_record import (
    CURRENT,
    Backlog,
    HostStep,
    StepLayout,
    StepRecords,
    yield_to_the_model,
)
from kvtrace.collectors._dsa_requests import OpenRequest, prefix_hashes
from kvtrace.collectors._dsa_settings import checked, settings
from kvtrace.collectors._dsa_steps import canonical_columns
from kvtrace.collectors.kv_tiers import HbmOnly, TierModel
from kvtrace.defaults import DEFAULT_PREFIX_KEY_TOKENS
from kvtrace.errors import InputError, KvtraceError
from kvtrace.warehouse import Commit, Warehouse
from kvtrace.warehouse.rows.bookkeeping import collection_run_id, quarantine_rows, run_row
from kvtrace.warehouse.rows.dsa_writer import DsaWriter, load_kernels
from kvtrace.warehouse.rows.eval import eval_row

__all__ = ["DsaTracer", "WriterFailed", "prefix_hashes"]

_STOP = object()


class WriterFailed(KvtraceError):
    """The tracer's background writer failed; nothing more can be traced."""


class DsaTracer:
    """Collect DSA top-k selections into ``warehouse`` (see the module docstring).

    Parameters
    ----------
    run_name, dataset
        Labels of the run; the run id is derived from the name.
    block_sizes
        Block sizes to store the trace at (each is a partition of its own).
    topk
        The k the indexer asks for, stored with every row.
    sample_rate
        Share of (step, layer) records kept, drawn with ``seed``.
    layers
        Layers to trace (default: all).
    scores
        ``"stats"`` keeps min/mean/max of the index scores, ``"full"`` every score.
    prefill
        Also trace prefill: each request's chunk of prompt tokens in a step becomes a
        ``dsa_prefill`` row per layer (default: decode only, as the seed traces).
    prefix_tokens
        Prompt tokens whose hashes define a request's prefix (candidates 32..1024).
    rank, world_size
        Of this process (default: ``$RANK`` / ``$WORLD_SIZE`` as torchrun sets them, else
        0 and 1), recorded in ``runs``.  With ``world_size > 1`` each traced rank gets
        its own run id (and so its own files) under the shared run name.
    all_ranks
        Trace every rank; by default only rank 0 traces (the seed's rule: tensor-parallel
        ranks select alike) and the others' tracers do nothing.  The view
        ``dsa_rank_disagreements`` lists where traced ranks disagree.
    backlog_mb
        Host memory the steps waiting for the writer may take; when the writer falls
        behind that far, the model's next step waits for it (``writer_wait_s`` adds up
        the wait) rather than memory growing or steps being dropped.
    tier_model
        Which KV tier serves each touched block (`kvtrace.collectors.kv_tiers`); by
        default every block is an HBM hit.  Each block size gets its own copy.
    commit_every_s
        How often the background writer makes its files visible.
    clock
        Seconds since the epoch, read when each step starts (its ``ts_us``).
    """

    def __init__(
        self,
        warehouse: Warehouse,
        *,
        run_name: str,
        dataset: str,
        block_sizes: Sequence[int] = (64,),
        topk: int | None = None,
        sample_rate: float = 1.0,
        layers: Sequence[int] | None = None,
        scores: Literal["stats", "full"] = "stats",
        prefill: bool = False,
        prefix_tokens: int = DEFAULT_PREFIX_KEY_TOKENS,
        rank: int | None = None,
        world_size: int | None = None,
        all_ranks: bool = False,
        seed: int = 0,
        model: str | None = None,
        model_config: Mapping[str, Any] | None = None,
        dataset_variant: str | None = None,
        collector_config: Mapping[str, Any] | None = None,
        tier_model: TierModel | None = None,
        commit_every_s: float = 30.0,
        backlog_mb: float = 256.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        rank, world_size = checked(block_sizes, sample_rate, rank, world_size)
        self.warehouse = warehouse
        self.run_name, self.dataset = run_name, dataset
        # Each collection is a run of its own, and so is each rank of a multi-process one
        # (its own run id, runs row and request ids); they share the run name, so grouping
        # by it joins the ranks.
        self.run_id = collection_run_id(
            run_name if world_size == 1 else f"{run_name}/rank{rank}-of-{world_size}"
        )
        self.block_sizes = tuple(block_sizes)
        self.topk, self.sample_rate = topk, sample_rate
        self.layers = None if layers is None else frozenset(layers)
        self.full_scores = scores == "full"
        self.prefill = prefill
        self.prefix_tokens = prefix_tokens
        self._clock = clock
        model_of_tiers = tier_model or HbmOnly()
        self._tiers = {size: copy.deepcopy(model_of_tiers) for size in self.block_sizes}
        self.traced_rank = rank == 0 or all_ranks
        self.enabled = self.traced_rank
        self._rng = random.Random(seed)
        self._seen_prefixes: set[str] = set()
        self._requests: dict[int, OpenRequest] = {}
        self._next_request_id = 0
        self._finished: dict[int, dict[str, Any]] = {}
        self._tokens: list[dict[str, Any]] = []  # dsa_request_tokens rows
        self._answers: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []  # row, spans
        self._step: StepRecords | None = None
        self._record_no = 0
        self._batch_step = 0
        self._backlog = Backlog(int(backlog_mb * (1 << 20)))
        self._error: BaseException | None = None
        self._run_written = False
        self._run_row = run_row(
            self.run_id,
            run_name,
            "dsa",
            source="collect",
            dataset=dataset,
            dataset_variant=dataset_variant,
            model=model,
            model_config=dict(model_config) if model_config else None,
            collector_config=settings(
                block_sizes=list(self.block_sizes),
                topk=topk,
                sample_rate=sample_rate,
                layers=sorted(self.layers) if self.layers else None,
                scores=scores,
                phase="all" if prefill else "decode",
                prefix_tokens=prefix_tokens,
                seed=seed,
                all_ranks=all_ranks,
                more=collector_config,
            ),
            rank=rank,
            world_size=world_size,
            started_at=datetime.now(timezone.utc),
        )
        self._writer_thread: threading.Thread | None = None
        if self.traced_rank:
            self._start_writer(commit_every_s)

    def _start_writer(self, commit_every_s: float) -> None:
        # loading compiled kernels holds the GIL (a second on a slow host): here, before
        # decoding, not at the writer's first batch, where it would stall the model
        load_kernels()
        self._writer_thread = threading.Thread(
            target=self._write_loop, name="kvtrace-writer", args=(commit_every_s,), daemon=True
        )
        self._writer_thread.start()
        # a script that never closes still commits: before the interpreter's end stops
        # thread pools (the writer's among them), as atexit handlers would be too late
        threading._register_atexit(_close_at_exit, weakref.ref(self))  # type: ignore[attr-defined]

    @property
    def writer_wait_s(self) -> float:
        """Seconds the model waited for the writer to make room (see ``backlog_mb``)."""
        return self._backlog.waited_s

    # -- requests ------------------------------------------------------------------------

    def begin_request(self, request_id: int | None, prompt_token_ids: Sequence[int]) -> int:
        """Open a request and return its id (``None``: one more than any begun before).

        Its prompt's prefix hashes decide whether it is a prefix hit: the longest
        candidate seen before is the cached length; a miss registers all."""
        request_id = self._next_request_id if request_id is None else request_id
        self._next_request_id = max(self._next_request_id, request_id + 1)
        if not self.traced_rank:
            return request_id
        hashes = prefix_hashes(prompt_token_ids, self.prefix_tokens)
        cached = max((n for n, key in hashes.items() if key in self._seen_prefixes), default=0)
        if cached == 0:  # a miss registers every candidate (the seed's rule)
            self._seen_prefixes.update(hashes.values())
        longest = max(hashes, default=None)
        self._requests[request_id] = OpenRequest(
            request_id,
            len(prompt_token_ids),
            hashes.get(longest) if longest else None,
            cached > 0,
            cached,
            longest or 0,
            np.asarray(prompt_token_ids, dtype=np.int32),
        )
        return request_id

    def skip_request(self, request_id: int, prompt_tokens: int, reason: str) -> None:
        """Record a request that was not run (e.g. a prompt longer than allowed)."""
        if not self.traced_rank:
            return
        self._finished[request_id] = {
            "request_id": request_id,
            "prompt_tokens": prompt_tokens,
            "status": "skipped",
            "skip_reason": reason,
        }

    def end_request(
        self,
        request_id: int,
        *,
        new_tokens: int | None = None,
        token_ids: Sequence[int] | None = None,
        status: str = "ok",
        arrival_s: float | None = None,
        finish_s: float | None = None,
    ) -> None:
        """Close a request and record what became of it; ``token_ids`` are the tokens
        it generated, kept with its prompt's (``dsa_request_tokens``) so that blocks can
        be identified by their content."""
        if not self.traced_rank:
            return
        request = self._requests.pop(request_id, None)
        if request is None:
            raise InputError(f"request {request_id} was never begun")
        generated = np.asarray(token_ids if token_ids is not None else [], dtype=np.int32)
        self._tokens.append(
            {
                "run_id": self.run_id,
                "request_id": request_id,
                "prompt_tokens": request.prompt_tokens,
                "token_ids": np.concatenate([request.prompt_ids, generated]),
                "prefix_key": request.prefix_key,
            }
        )
        latency = None if arrival_s is None or finish_s is None else ((finish_s - arrival_s) * 1000)
        self._finished[request_id] = {
            "request_id": request_id,
            "prompt_tokens": request.prompt_tokens,
            "new_tokens": new_tokens,
            "prefix_key": request.prefix_key,
            "prefix_cache_hit": request.prefix_hit,
            "prefix_cached_tokens": request.cached_tokens,
            "prefix_region_tokens": request.cached_tokens
            if request.prefix_hit
            else request.key_tokens,
            "arrival_s": arrival_s,
            "finish_s": finish_s,
            "latency_ms": latency,
            "status": status,
        }

    def record_answer(
        self,
        request_id: int,
        *,
        task: str,
        sample_index: int,
        prediction: str | None,
        references: list[str],
        needle_spans: Sequence[tuple[str, str, int, int]] = (),
    ) -> None:
        """Score a request's answer the RULER way into ``eval_samples`` and keep where its
        prompt hid the needle: ``(part, text, token_start, token_end)`` spans."""
        if not self.traced_rank:
            return
        request = self._requests.get(request_id)
        row = eval_row(
            run_id=self.run_id,
            task=task,
            sample_index=sample_index,
            prediction=prediction,
            references=references,
            context_length=request.prompt_tokens if request else None,
            request_id=request_id,
        )
        spans = [
            {
                "run_id": self.run_id,
                "request_id": request_id,
                "part": part,
                "text": text,
                "token_start": start,
                "token_end": end,
            }
            for part, text, start, end in needle_spans
        ]
        self._answers.append((row, spans))

    # -- steps -----------------------------------------------------------------------------

    @contextmanager
    def step(
        self, positions: Mapping[int, int | tuple[int, int]] | int, query_tokens: int = 1
    ) -> Iterator[None]:
        """One forward step of every layer: ``{request_id: start_pos}`` in batch order.

        ``start_pos`` is the position of the request's first query token in the step;
        each request has ``query_tokens`` of them, or give ``(start_pos, tokens)`` per
        request (a batch that mixes decodes and prefill chunks).  A bare ``start_pos``
        means the only open request.  The rows of each `record_topk` follow this order,
        request by request, token by token.  A request with one token at or past its
        prompt's end decodes (``dsa_steps``); a chunk of its prompt is prefill
        (``dsa_prefill``, when the tracer keeps prefill).  The step's wall time covers
        the block; an exception inside it (Ctrl-C's KeyboardInterrupt too) discards the
        step, none of it is written.  If the background writer has failed (a full disk,
        say), the next step raises its error rather than decoding for hours in vain.
        """
        if not self.traced_rank:
            yield
            return
        if self._error is not None:
            raise WriterFailed(f"the trace writer stopped: {self._error}") from self._error
        self._step = self._new_step(positions, query_tokens)
        ts_us = self._clock() * 1e6
        started = time.perf_counter()
        try:
            yield
        except BaseException:  # a failed step leaves no partial rows
            self._step = None
            raise
        latency_us = (time.perf_counter() - started) * 1e6
        records, self._step = self._step, None
        if records is not None and (records.indices or records.counts):
            self._submit(records.to_host(), latency_us, ts_us)

    def _new_step(
        self, positions: Mapping[int, int | tuple[int, int]] | int, query_tokens: int
    ) -> StepRecords | None:
        """The records of a step about to run, or None when nothing of it is traced."""
        if isinstance(positions, int):
            if len(self._requests) != 1:
                raise InputError(
                    "step(start_pos) needs exactly one open request; pass {request_id: start_pos}"
                )
            positions = {next(iter(self._requests)): positions}
        prompts = {r: q.prompt_tokens for r, q in self._requests.items()}
        layout = StepLayout.of(positions, query_tokens, prompts, self.prefill)
        return StepRecords(layout) if self.enabled and layout.traced else None

    def record_topk(
        self, layer_id: int, indices: Any, scores: Any = None, *, kv_group: int | None = None
    ) -> None:
        """The indexer's top-k of one layer for the step's query tokens.

        ``indices``: ``[k]`` (one query token), ``[rows, k]`` (a row per query token of
        the step, in the step's order) or ``[batch, tokens, k]``; a torch tensor on any
        device, or a NumPy array.  Negative positions are padding and dropped, and so
        are a prefill query's picks after its own position (a masked top-k's).
        ``scores`` (optional) align with ``indices``; they are kept for decode rows.
        Cheap: an int32 copy of the decode rows on their device, no transfer to the host.
        ``kv_group``: the selection is that of one KV group's query heads (GQA), stored
        with the group in ``dsa_steps.kv_group`` beside the layer's all-heads row (None).
        """
        step = self._step
        if step is None:
            return
        if self.layers is not None and layer_id not in self.layers:
            return
        if self.sample_rate < 1 and self._rng.random() >= self.sample_rate:
            return
        step.add(layer_id, indices, scores, kv_group)

    def close(self, open_status: str = "unfinished") -> None:
        """Write and commit everything; raise what the background writer hit, if anything.

        Requests still open get their ``requests`` row with ``open_status``.  Closing
        twice does nothing more."""
        if self in CURRENT:
            CURRENT.remove(self)
        thread, self._writer_thread = self._writer_thread, None
        if thread is None:
            return
        for request_id in list(self._requests):
            self.end_request(request_id, status=open_status)
        self._backlog.put(_STOP, 0)
        thread.join()
        if self._error is not None:
            raise self._error

    def __enter__(self) -> DsaTracer:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is None:
            self.close("unfinished")
        else:
            self.close("interrupted" if issubclass(kind, KeyboardInterrupt) else "failed")

    # -- bulk conversion -------------------------------------------------------------------

    def _submit(self, host: HostStep, latency_us: float, ts_us: float) -> None:
        """Hand a step's decode rows and prefill chunks to the writer thread."""
        batch_step, self._batch_step = self._batch_step, self._batch_step + 1
        if host.indices is not None:
            decode = host.layout.decode
            request_ids = [p.request_id for p in decode]
            item = (
                host.decode_layers,
                host.indices,
                host.scores,
                request_ids,
                [p.start for p in decode],
                latency_us,
                ts_us,
                {r: self._requests.get(r) for r in request_ids},
                batch_step,
                host.decode_groups,
            )
            size = host.indices.nbytes + (0 if host.scores is None else host.scores.nbytes)
            self._backlog.put(item, size)
        if host.counts:
            chunks = PrefillStep(host, latency_us, ts_us, batch_step)
            self._backlog.put(chunks, sum(c.nbytes for layer in host.counts for c in layer))

    # -- background writer -------------------------------------------------------------------

    def _write_loop(self, commit_every_s: float) -> None:
        """Take steps off the backlog in batches (one `DsaWriter.add` per batch, so the
        writer's fixed costs are paid rarely) and commit every ``commit_every_s``."""
        yield_to_the_model()
        pending = _Pending()
        last_commit, stop = time.monotonic(), False
        try:
            while not stop:
                steps, stop = self._backlog.batch(last_commit + commit_every_s, _STOP)
                self._take(steps, pending)
                due = stop or time.monotonic() - last_commit >= commit_every_s
                if pending.commit is not None and due:
                    self._commit(pending)
                    pending, last_commit = _Pending(pending.request_keys), time.monotonic()
            if self._finished or self._answers or self._tokens:  # requests after the steps
                self._commit(
                    _Pending(commit=self.warehouse.begin(self.run_id, operation="collect"))
                )
        except BaseException as exc:  # surfaced by the next step and by close()
            self._error = exc
            if pending.commit is not None:
                self.warehouse.abort(pending.commit)
            self._backlog.drain_until(_STOP, stopped=stop)  # what the model still submits

    def _take(self, steps: list[Any], pending: _Pending) -> None:
        """Add a batch of steps to the pending commit (begun with the first steps)."""
        if not steps:
            return
        if pending.commit is None:
            pending.commit = self.warehouse.begin(self.run_id, operation="collect")
        pending.prefill.extend(step for step in steps if isinstance(step, PrefillStep))
        decode = [step for step in steps if isinstance(step, tuple)]
        if decode:
            if pending.writer is None:
                pending.writer = self._new_writer(pending.commit, pending.request_keys)
            for cols, lines in self._canonical(decode):
                pending.writer.add(cols, lines, self._raw_of)

    def _new_writer(self, commit: Commit, request_keys: dict[str, int]) -> DsaWriter:
        return DsaWriter(
            self.warehouse,
            commit,
            string_ids=False,
            dataset=self.dataset,
            dataset_override=True,
            block_size=self.block_sizes[0],
            request_ids=request_keys,
        )

    def _commit(self, pending: _Pending) -> None:
        """Write what ``pending`` gathered and the requests closed since, and commit."""
        commit = pending.commit
        assert commit is not None
        result = pending.writer.finish() if pending.writer is not None else None
        if result is not None and result.rejected:
            rejected = quarantine_rows(self.run_id, "collect", None, result.rejected)
            self.warehouse.write_rows(commit, "quarantine", rejected)
        if pending.prefill:
            table = prefill_table(
                pending.prefill, run_id=self.run_id, dataset=self.dataset, topk=self.topk
            )
            self.warehouse.write(commit, "dsa_prefill", table)
        self._write_requests(commit)
        if not self._run_written:
            self.warehouse.write_rows(commit, "runs", [self._run_row])
            self._run_written = True
        self.warehouse.commit(commit)

    def _write_requests(self, commit: Commit) -> None:
        """The requests closed, their token ids and answers, since the last commit."""
        finished, self._finished = self._finished, {}
        tokens, self._tokens = self._tokens, []
        answers, self._answers = self._answers, []
        if answers:
            self.warehouse.write_rows(commit, "eval_samples", [row for row, _ in answers])
            spans = [span for _, spans in answers for span in spans]
            self.warehouse.write_rows(commit, "needle_spans", spans)
        if finished:
            rows = [
                {"run_id": self.run_id, "dataset": self.dataset, **r} for r in finished.values()
            ]
            self.warehouse.write_rows(commit, "requests", rows)
        if tokens:
            self.warehouse.write_rows(commit, "dsa_request_tokens", tokens)

    def _raw_of(self, record_no: int) -> str:
        return f"live record {record_no}"

    def _canonical(
        self, steps: list[tuple[Any, ...]]
    ) -> Iterator[tuple[dict[str, Any], np.ndarray]]:
        """Canonical columns of several steps, once per block size, with their record numbers."""
        lines: np.ndarray | None = None
        for cols in canonical_columns(
            steps,
            self.block_sizes,
            self._tiers,
            run_name=self.run_name,
            dataset=self.dataset,
            topk=self.topk,
            full_scores=self.full_scores,
        ):
            if lines is None:
                rows = len(cols["layer_id"])
                lines = np.arange(self._record_no, self._record_no + rows, dtype=np.int64)
                self._record_no += rows
            yield cols, lines


@dataclass
class _Pending:
    """What the writer thread has gathered for its next commit."""

    request_keys: dict[str, int] = field(default_factory=dict)
    commit: Commit | None = None
    writer: DsaWriter | None = None
    prefill: list[PrefillStep] = field(default_factory=list)


def _close_at_exit(tracer: weakref.ref[DsaTracer]) -> None:
    """Close a tracer still open when the interpreter ends; one line if that fails."""
    alive = tracer()
    if alive is None:
        return
    try:
        alive.close("unfinished")
    except Exception as exc:  # the interpreter is ending: say it in one line
        print(f"kvtrace: the trace {alive.run_name} was not fully written: {exc}", file=sys.stderr)
