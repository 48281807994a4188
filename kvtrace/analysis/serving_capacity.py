"""Serving capacity from a fitted batch-time model: the highest request rate that meets
TTFT / TPOT targets, and the KV memory it takes.

The server is simulated at the level of iterations, as Vidur's replica scheduler for
vLLM runs them (microsoft/vidur 7d47513, ``vllm_replica_scheduler``):

- requests arrive at rate λ, Poisson (exponential gaps) or evenly spaced, their (input,
  output) lengths drawn with replacement from a trace's length mix, all from one seed;
- each iteration is prefill-prioritised: while requests wait, the next iteration admits
  them first come first served into one prefill batch, up to ``max_batch_size`` running
  requests and ``max_batch_tokens`` prompt tokens (a longer prompt runs alone), and
  running requests do not decode in it; otherwise every running request decodes one
  token;
- an iteration lasts what the fitted model (`kvtrace.analysis.cost_model`) predicts:
  intercept + prefill tokens, squared prompt lengths, decode tokens and KV tokens read
  (each running request's prompt plus the tokens it generated) times their costs;
- a request reserves the KV of its prompt and its whole output when it is admitted and
  frees it when it completes (no preemption); with a KV capacity C in tokens (the memory
  planner of the InferMax paper, C = (0.9 x GPU memory - model weights) / KV bytes per
  token), a request waits while the reserved tokens and its own would exceed C.

A run of decode iterations up to the next completion or arrival is summed at once (its
KV reads grow by one token per request and iteration).  TTFT is the end of a request's
prefill iteration less its arrival; TPOT is (completion
- first token) / (output tokens - 1), over requests of more than one output token, as
vLLM's benchmark computes it.  A rate meets the SLOs when the given percentile (linear
interpolation) of each is at most its target.  The search doubles or halves from the
rate one request alone could sustain until it brackets the boundary (no rate, when the
requests served one by one already miss a target), then bisects
(geometrically) to a relative width of 1e-3, reusing the same arrivals scaled by 1/λ,
as Vidur-Search bisects for the highest QPS without a growing queue.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import duckdb
import numpy as np

from kvtrace.analysis.cost_model import cost_model_rows
from kvtrace.analysis.kv_layouts import bytes_per_token as layout_bytes_per_token
from kvtrace.errors import InputError

GIB = 2**30
ARRIVALS = ("poisson", "uniform")
_REL_WIDTH = 1e-3
_MAX_STEPS = 60  # doublings or halvings before the search gives up
_MEASURED = {50: "median", 90: "p90", 99: "p99"}  # serving_benchmark's percentile columns


@dataclass(frozen=True)
class BatchTimeModel:
    """A fitted batch-time model's coefficients in seconds (a missing term costs 0)."""

    intercept_s: float
    per_prefill_token_s: float = 0.0
    per_decode_token_s: float = 0.0
    per_kv_token_s: float = 0.0
    per_prefill_sq_token_s: float = 0.0

    @classmethod
    def of_row(cls, row: dict[str, Any]) -> BatchTimeModel:
        """The model of a `cost_model_rows` row."""
        return cls(
            row["intercept_s"],
            per_prefill_token_s=row["per_prefill_token_s"] or 0.0,
            per_decode_token_s=row["per_decode_token_s"] or 0.0,
            per_kv_token_s=row["per_kv_token_s"] or 0.0,
            per_prefill_sq_token_s=row["per_prefill_sq_token_s"] or 0.0,
        )

    def prefill_s(self, prompts: np.ndarray) -> float:
        """Seconds of a prefill batch of these prompt lengths."""
        seconds = (
            self.intercept_s
            + self.per_prefill_token_s * float(prompts.sum())
            + self.per_prefill_sq_token_s * float((prompts.astype(float) ** 2).sum())
        )
        return max(seconds, 0.0)

    def alone_s(self, prompts: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        """Per request, its seconds served alone: its prefill, then output - 1 decodes of
        contexts prompt + 1 ... prompt + output - 1."""
        prompts, decodes = prompts.astype(float), outputs.astype(float) - 1
        prefill = (
            self.intercept_s
            + self.per_prefill_token_s * prompts
            + self.per_prefill_sq_token_s * prompts**2
        )
        contexts = decodes * prompts + decodes * (decodes + 1) / 2
        decode = decodes * (self.intercept_s + self.per_decode_token_s)
        seconds: np.ndarray = np.maximum(prefill, 0.0) + np.maximum(
            decode + self.per_kv_token_s * contexts, 0.0
        )
        return seconds

    def decode_run(self, contexts: np.ndarray, steps: int) -> np.ndarray:
        """Seconds elapsed after each of ``steps`` decode iterations of these requests
        (each iteration adds a token to every context)."""
        fixed = self.intercept_s + self.per_decode_token_s * len(contexts)
        read = float(contexts.sum()) + len(contexts) * np.arange(steps)
        return np.cumsum(np.maximum(fixed + self.per_kv_token_s * read, 0.0))


@dataclass(frozen=True)
class Server:
    """The simulated server's limits."""

    max_batch_size: int = 256
    max_batch_tokens: int = 8192
    kv_capacity_tokens: int | None = None  # None: unlimited


@dataclass(frozen=True)
class Simulation:
    """Per request its TTFT and TPOT (NaN for one output token), and the KV it took."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    peak_kv_tokens: int
    memory_limited: bool  # whether a request waited for KV memory

    def percentiles(self, percentile: float) -> tuple[float, float | None]:
        """The TTFT and TPOT at ``percentile`` (None when no request has a TPOT)."""
        tpot = self.tpot_s[np.isfinite(self.tpot_s)]
        return (
            float(np.percentile(self.ttft_s, percentile)),
            float(np.percentile(tpot, percentile)) if len(tpot) else None,
        )


def arrival_times(
    requests: int, rate: float, kind: Literal["poisson", "uniform"], seed: int
) -> np.ndarray:
    """Arrival times in seconds of ``requests`` requests at ``rate`` per second, the first
    at 0: exponential gaps (Poisson) or gaps of 1 / rate."""
    if kind == "uniform":
        return np.arange(requests) / rate
    gaps = np.random.default_rng(seed).exponential(1.0, requests)
    return np.concatenate([[0.0], np.cumsum(gaps[:-1])]) / rate


def simulate(
    model: BatchTimeModel,
    server: Server,
    inputs: np.ndarray,
    outputs: np.ndarray,
    arrivals: np.ndarray,
) -> Simulation:
    """Serve the requests (in arrival order) as the module docstring describes."""
    n = len(inputs)
    reserve = inputs + outputs
    first = np.full(n, np.nan)
    done = np.full(n, np.nan)
    generated = np.zeros(n, np.int64)
    queue: deque[int] = deque()
    running = np.empty(0, np.int64)
    clock, arrived, held, peak, finished = 0.0, 0, 0, 0, 0
    memory_limited = False
    capacity = server.kv_capacity_tokens
    while finished < n:
        while arrived < n and arrivals[arrived] <= clock:
            queue.append(arrived)
            arrived += 1
        if not queue and not len(running):
            clock = float(arrivals[arrived])
            continue
        admitted: list[int] = []
        tokens = 0
        while queue and len(running) + len(admitted) < server.max_batch_size:
            head = queue[0]
            if admitted and tokens + inputs[head] > server.max_batch_tokens:
                break
            if capacity is not None and held + reserve[head] > capacity:
                memory_limited = True
                break
            admitted.append(queue.popleft())
            tokens += int(inputs[head])
            held += int(reserve[head])
        peak = max(peak, held)
        if admitted:
            batch = np.array(admitted)
            clock += model.prefill_s(inputs[batch])
            first[batch] = clock
            generated[batch] = 1
            ended = batch[outputs[batch] <= 1]
            running = np.concatenate([running, batch[outputs[batch] > 1]])
        else:  # decode up to the next completion, or until the next arrival can join
            until_done = int((outputs[running] - generated[running]).min())
            elapsed = model.decode_run(inputs[running] + generated[running], until_done)
            steps = until_done
            if not queue and arrived < n:
                waited = int(np.searchsorted(elapsed, arrivals[arrived] - clock)) + 1
                steps = min(steps, waited)
            clock += float(elapsed[steps - 1])
            generated[running] += steps
            ended = running[generated[running] >= outputs[running]]
            running = running[generated[running] < outputs[running]]
        done[ended] = clock
        held -= int(reserve[ended].sum())
        finished += len(ended)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(outputs > 1, (done - first) / (outputs - 1), np.nan)
    return Simulation(first - arrivals, tpot, peak, memory_limited)


@dataclass(frozen=True)
class Targets:
    """The latency targets (None: not checked) at a percentile."""

    ttft_s: float | None
    tpot_s: float | None
    percentile: float

    def met_by(self, run: Simulation) -> bool:
        ttft, tpot = run.percentiles(self.percentile)
        return (self.ttft_s is None or ttft <= self.ttft_s) and (
            self.tpot_s is None or tpot is None or tpot <= self.tpot_s
        )


def highest_rate(meets: Callable[[float], bool], guess: float) -> float | None:
    """The highest rate ``meets`` accepts, to a relative width of 1e-3, searched from
    ``guess`` (None when even a rate 2^-60 of it fails)."""
    if meets(guess):
        low, high = guess, 2 * guess
        for _ in range(_MAX_STEPS):
            if not meets(high):
                break
            low, high = high, 2 * high
        else:
            raise InputError(
                "every rate meets the targets (a TPOT target alone does not bound the "
                "queue's wait): give a TTFT target"
            )
    else:
        low, high = guess / 2, guess
        for _ in range(_MAX_STEPS):
            if meets(low):
                break
            low, high = low / 2, low
        else:
            return None
    while high / low > 1 + _REL_WIDTH:
        middle = math.sqrt(low * high)
        low, high = (middle, high) if meets(middle) else (low, middle)
    return low


@dataclass(frozen=True)
class CapacityQuestion:
    """What serving_capacity(...) was asked, checked."""

    targets: Targets
    server: Server
    requests: int
    arrivals: Literal["poisson", "uniform"]
    seed: int

    def at(
        self,
        model: BatchTimeModel,
        mix: np.ndarray,
        rate: float,
        arrivals: Literal["poisson", "uniform"] | None = None,
    ) -> Simulation:
        """The simulation of the question's requests at ``rate`` (arriving as the
        question says unless ``arrivals`` is given)."""
        picks = np.random.default_rng(self.seed).integers(0, len(mix), self.requests)
        chosen = mix[picks]
        times = arrival_times(self.requests, rate, arrivals or self.arrivals, self.seed)
        return simulate(model, self.server, chosen[:, 0], chosen[:, 1], times)

    def highest(self, model: BatchTimeModel, mix: np.ndarray) -> float | None:
        """The highest rate meeting the targets."""
        alone = model.alone_s(mix[:, 0], mix[:, 1])
        if not alone.mean() > 0:
            raise InputError("the fitted model predicts no time for a request")
        one_by_one = self.at(model, mix, 1 / (2 * alone.max()), arrivals="uniform")
        if not self.targets.met_by(one_by_one):
            return None  # each request alone already misses a target
        return highest_rate(
            lambda rate: self.targets.met_by(self.at(model, mix, rate)), 1 / alone.mean()
        )


def kv_capacity_tokens(
    gpu_memory_gib: float, model_weights_gib: float, kv_bytes_per_token: float, share: float = 0.9
) -> int:
    """C = (share x GPU memory - model weights) / KV bytes per token, in whole tokens."""
    free = share * gpu_memory_gib * GIB - model_weights_gib * GIB
    if free <= 0:
        raise InputError(
            f"{model_weights_gib:g} GiB of weights leave no KV memory in {share:.0%} of "
            f"{gpu_memory_gib:g} GiB"
        )
    return int(free // kv_bytes_per_token)


def _checked_question(
    ttft_slo_ms: float | None,
    tpot_slo_ms: float | None,
    percentile: float,
    max_batch_size: int,
    max_batch_tokens: int,
    requests: int,
    arrivals: str,
    seed: int,
    kv_capacity: int | None,
) -> CapacityQuestion:
    if ttft_slo_ms is None and tpot_slo_ms is None:
        raise InputError("give a TTFT or TPOT target (ttft_slo_ms, tpot_slo_ms)")
    for name, value in (("ttft_slo_ms", ttft_slo_ms), ("tpot_slo_ms", tpot_slo_ms)):
        if value is not None and not value > 0:
            raise InputError(f"{name} must be positive, got {value}")
    if not 0 < percentile <= 100:
        raise InputError(f"the percentile must be in (0, 100], got {percentile}")
    if max_batch_size < 1 or max_batch_tokens < 1 or requests < 1:
        raise InputError("max_batch_size, max_batch_tokens and requests must be positive")
    if arrivals not in ARRIVALS:
        raise InputError(f"expected poisson or uniform arrivals, got {arrivals!r}")
    return CapacityQuestion(
        Targets(
            ttft_slo_ms / 1e3 if ttft_slo_ms is not None else None,
            tpot_slo_ms / 1e3 if tpot_slo_ms is not None else None,
            percentile,
        ),
        Server(max_batch_size, max_batch_tokens, kv_capacity),
        requests,
        arrivals,  # type: ignore[arg-type]
        seed,
    )


def _run_ids(con: duckdb.DuckDBPyConnection, name: str) -> list[str]:
    found = con.sql("SELECT run_id FROM runs_named([$name])", params={"name": name}).fetchall()
    return [run_id for (run_id,) in found]


def _length_mix(con: duckdb.DuckDBPyConnection, run: str, run_ids: list[str]) -> np.ndarray:
    """(input, output) tokens of the run's trace requests, else of its benchmark's."""
    for table, kept, order in (
        ("workload_requests", "true", "run_id, request_idx"),
        ("request_timings", "error IS NULL", "run_id, load_level, request_idx"),
    ):
        rows = con.sql(
            f"SELECT input_tokens, output_tokens FROM {table} "
            f"WHERE {kept} AND run_id IN (SELECT unnest($ids::VARCHAR[])) "
            f"AND input_tokens > 0 AND output_tokens > 0 ORDER BY {order}",
            params={"ids": run_ids},
        ).fetchnumpy()
        if len(rows["input_tokens"]):
            return np.column_stack([rows["input_tokens"], rows["output_tokens"]]).astype(np.int64)
    raise InputError(f"run {run} has no requests with input and output lengths")


def _cost_model(
    con: duckdb.DuckDBPyConnection, run_ids: list[str], cost_run: str | None
) -> tuple[str, BatchTimeModel]:
    """The fitted model of ``cost_run``, else of the run itself, else the only one."""
    fitted = {row["run_id"]: row for row in cost_model_rows(con, "batches")}
    if cost_run is not None:
        chosen = [r for r in _run_ids(con, cost_run) if r in fitted]
        if not chosen:
            raise InputError(f"run {cost_run} has no batch timings to fit")
    else:
        chosen = [r for r in run_ids if r in fitted] or list(fitted)
        if not chosen:
            raise InputError("no run has batch timings (batch_metrics) to fit a model on")
    if len(chosen) > 1:
        raise InputError(f"several runs have batch timings ({', '.join(chosen)}): name cost_run")
    return chosen[0], BatchTimeModel.of_row(fitted[chosen[0]])


def _measured_rates(
    con: duckdb.DuckDBPyConnection, run_ids: list[str], percentile: float
) -> list[tuple[int, float, float | None, float | None]]:
    """(load level, request rate, measured TTFT and TPOT in ms at the percentile) of the
    run's measured benchmark levels with a finite rate (None for a percentile the
    serving-benchmark table has no column of)."""
    column = _MEASURED.get(int(percentile)) if float(percentile).is_integer() else None
    ttft = f"{column}_ttft_ms" if column else "NULL::DOUBLE"
    tpot = f"{column}_tpot_ms" if column else "NULL::DOUBLE"
    return con.sql(
        f"SELECT load_level, request_rate, {ttft}, {tpot} FROM serving_benchmark "
        "WHERE run_id IN (SELECT unnest($ids::VARCHAR[])) AND origin = 'measured' "
        "AND isfinite(request_rate) AND request_rate > 0 ORDER BY load_level",
        params={"ids": run_ids},
    ).fetchall()


def serving_capacity_rows(
    con: duckdb.DuckDBPyConnection,
    run: str | None,
    ttft_slo_ms: float | None,
    tpot_slo_ms: float | None,
    percentile: float,
    cost_run: str | None,
    model: str | None,
    bytes_per_token: float | None,
    gpu_memory_gib: float | None,
    model_weights_gib: float | None,
    max_batch_size: int,
    max_batch_tokens: int,
    requests: int,
    arrivals: str,
    seed: int,
) -> list[dict[str, Any]]:
    """The highest rate's row, then one row per measured load level of the run."""
    if run is None:
        raise InputError("name the run whose length mix to serve")
    run_ids = _run_ids(con, run)
    if not run_ids:
        raise InputError(f"no run is named {run}")
    kv_bytes = bytes_per_token if bytes_per_token is not None else None
    if kv_bytes is None and model is not None:
        kv_bytes = float(layout_bytes_per_token(model))
    if kv_bytes is not None and not kv_bytes > 0:
        raise InputError(f"bytes_per_token must be positive, got {kv_bytes}")
    capacity = None
    if gpu_memory_gib is not None or model_weights_gib is not None:
        if gpu_memory_gib is None or model_weights_gib is None or kv_bytes is None:
            raise InputError(
                "the KV capacity needs gpu_memory_gib, model_weights_gib and the KV bytes "
                "per token (model or bytes_per_token)"
            )
        capacity = kv_capacity_tokens(gpu_memory_gib, model_weights_gib, kv_bytes)
    question = _checked_question(
        ttft_slo_ms,
        tpot_slo_ms,
        percentile,
        max_batch_size,
        max_batch_tokens,
        requests,
        arrivals,
        seed,
        capacity,
    )
    mix = _length_mix(con, run, run_ids)
    if capacity is not None and int(mix.sum(axis=1).max()) > capacity:
        raise InputError(
            f"a request of {int(mix.sum(axis=1).max())} tokens does not fit the KV capacity "
            f"of {capacity} tokens"
        )
    cost_run_id, batch_model = _cost_model(con, run_ids, cost_run)
    common = {
        "run_id": ", ".join(run_ids),
        "cost_run_id": cost_run_id,
        "requests": requests,
        "percentile": float(percentile),
        "ttft_slo_ms": ttft_slo_ms,
        "tpot_slo_ms": tpot_slo_ms,
        "kv_bytes_per_token": kv_bytes,
        "kv_capacity_tokens": capacity,
    }

    def row(
        point: str, level: int | None, rate: float | None, measured: tuple[Any, Any]
    ) -> dict[str, Any]:
        run_at = question.at(batch_model, mix, rate) if rate is not None else None
        ttft, tpot = run_at.percentiles(percentile) if run_at else (None, None)
        peak = run_at.peak_kv_tokens if run_at else None
        return {
            **common,
            "point": point,
            "load_level": level,
            "request_rate": rate,
            "meets_slo": question.targets.met_by(run_at) if run_at else None,
            "predicted_ttft_ms": ttft * 1e3 if ttft is not None else None,
            "predicted_tpot_ms": tpot * 1e3 if tpot is not None else None,
            "measured_ttft_ms": measured[0],
            "measured_tpot_ms": measured[1],
            "peak_kv_tokens": peak,
            "peak_kv_gib": peak * kv_bytes / GIB if peak is not None and kv_bytes else None,
            "memory_limited": run_at.memory_limited if run_at else None,
        }

    rows = [row("highest", None, question.highest(batch_model, mix), (None, None))]
    for level, rate, ttft_ms, tpot_ms in _measured_rates(con, run_ids, percentile):
        rows.append(row("measured", level, rate, (ttft_ms, tpot_ms)))
    return rows
