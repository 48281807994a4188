"""serving_capacity: the highest rate a simulated server meets latency targets at."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.analysis.serving_capacity import (
    BatchTimeModel,
    CapacityQuestion,
    Server,
    Targets,
    arrival_times,
    kv_capacity_tokens,
    simulate,
)
from kvtrace.errors import InputError
from kvtrace.ingest import ingest

CONSTANT = BatchTimeModel(0.1)  # every batch takes 0.1 s


def _question(ttft_ms=None, tpot_ms=None, percentile=100.0, requests=11, **server):
    targets = Targets(
        ttft_ms / 1e3 if ttft_ms else None, tpot_ms / 1e3 if tpot_ms else None, percentile
    )
    return CapacityQuestion(targets, Server(**server), requests, "uniform", 0)


def test_ttft_of_evenly_spaced_single_token_requests_by_hand():
    # Up to 10/s each request finds the server idle (TTFT 0.1 s).  Above, request k arrives
    # at k / rate and starts when batch k ends at k x 0.1 s, waiting k (0.1 - 1 / rate);
    # the last (k = 10) may wait 0.05 s: rate 1 / 0.095 = 10.526/s.
    highest = _question(ttft_ms=150).highest(CONSTANT, np.array([[100, 1]]))
    assert highest == pytest.approx(1 / 0.095, rel=1e-3)
    assert highest <= 1 / 0.095


def test_tpot_of_evenly_spaced_requests_by_hand():
    # Requests of 3 output tokens: a prefill and two decodes of 0.1 s each, TPOT 0.1 s,
    # unless a prefill cuts in before the second decode (TPOT 0.15 s > 0.12 s).  With gap g
    # below 0.3 s the server falls behind: request k starts at 0.3k s and its second decode
    # at 0.3k + 0.2 s, which request k + 1 (arriving at (k + 1) g) must not precede:
    # g > (0.3k + 0.2) / (k + 1) for k up to 3 (5 requests), g > 1.1 / 4: rate 4 / 1.1.
    highest = _question(tpot_ms=120, requests=5).highest(CONSTANT, np.array([[100, 3]]))
    assert highest == pytest.approx(4 / 1.1, rel=1e-3)


def test_a_simulation_by_hand():
    # Two requests of (100 in, 3 out) 0.05 s apart under the constant model: A prefills over
    # [0, 0.1]; B waits and prefills over [0.1, 0.2] (A paused), then both decode over
    # [0.2, 0.3] and [0.3, 0.4].  TTFT 0.1 and 0.15 s; TPOT (0.4 - 0.1) / 2 and
    # (0.4 - 0.2) / 2; both reserve 103 KV tokens at once.
    run = simulate(
        CONSTANT, Server(), np.array([100, 100]), np.array([3, 3]), np.array([0.0, 0.05])
    )
    assert run.ttft_s == pytest.approx([0.1, 0.15])
    assert run.tpot_s == pytest.approx([0.15, 0.1])
    assert run.peak_kv_tokens == 206 and not run.memory_limited
    # With room for one request's 103 tokens, B waits for A to finish at 0.3 s.
    alone = simulate(
        CONSTANT,
        Server(kv_capacity_tokens=150),
        np.array([100, 100]),
        np.array([3, 3]),
        np.array([0.0, 0.05]),
    )
    assert alone.ttft_s == pytest.approx([0.1, 0.35])
    assert alone.tpot_s == pytest.approx([0.1, 0.1])
    assert alone.peak_kv_tokens == 103 and alone.memory_limited


def test_the_token_budget_splits_prefill_batches():
    # Three prompts of 600 tokens arrive together; a budget of 1,000 tokens prefills one at
    # a time (0.1 s each), 1,500 takes two (1,200 tokens) then one.
    prompts, outputs, at = np.array([600] * 3), np.array([1] * 3), np.zeros(3)
    one = simulate(CONSTANT, Server(max_batch_tokens=1000), prompts, outputs, at)
    two = simulate(CONSTANT, Server(max_batch_tokens=1500), prompts, outputs, at)
    assert one.ttft_s == pytest.approx([0.1, 0.2, 0.3])
    assert two.ttft_s == pytest.approx([0.1, 0.1, 0.2])


def test_the_memory_planner_by_hand():
    # (0.9 x 80 GiB - 16 GiB) / 131,072 B (Llama-3-8B's KV per token) = 56 GiB / 128 KiB
    assert kv_capacity_tokens(80, 16, 131072) == 56 * 8192
    with pytest.raises(InputError, match="no KV memory"):
        kv_capacity_tokens(16, 15, 131072)


MODEL = BatchTimeModel(0.004, 2e-5, 1.5e-4, 0.0, 3e-9)
MIX = np.column_stack(
    [
        np.random.default_rng(0).integers(50, 3000, 200),
        np.random.default_rng(1).integers(2, 300, 200),
    ]
)


def _poisson(ttft_ms=None, tpot_ms=None, capacity=None, seed=0):
    targets = Targets(ttft_ms / 1e3 if ttft_ms else None, tpot_ms / 1e3 if tpot_ms else None, 99)
    server = Server(kv_capacity_tokens=capacity)
    return CapacityQuestion(targets, server, 150, "poisson", seed).highest(MODEL, MIX)


def test_tighter_targets_give_no_higher_rate():
    by_ttft = [_poisson(ttft_ms=t) for t in (2000, 800, 400)]
    by_tpot = [_poisson(ttft_ms=5000, tpot_ms=t) for t in (60, 40, 25)]
    assert by_ttft == sorted(by_ttft, reverse=True) and by_ttft[0] > by_ttft[-1]
    assert by_tpot == sorted(by_tpot, reverse=True) and by_tpot[0] > by_tpot[-1]


def test_more_memory_gives_no_lower_rate():
    # KV for 8,000 tokens holds about four requests of the mix at once (mean 1,777 tokens)
    rates = [_poisson(ttft_ms=1000, tpot_ms=40, capacity=c) for c in (8000, 20000, 100000)]
    assert rates == sorted(rates) and rates[0] < rates[-1]


def test_the_search_is_deterministic():
    assert _poisson(ttft_ms=800, tpot_ms=40) == _poisson(ttft_ms=800, tpot_ms=40)
    assert arrival_times(5, 2.0, "poisson", 3) == pytest.approx(arrival_times(5, 2.0, "poisson", 3))
    assert _poisson(ttft_ms=800, tpot_ms=40, seed=1) != _poisson(ttft_ms=800, tpot_ms=40)


VLLM_RUN = {  # one level of `vllm bench serve` at 5 requests/s: 11 prompts of 100 tokens
    "backend": "vllm",
    "model_id": "m",
    "request_rate": 5.0,
    "duration": 2.0,
    "completed": 11,
    "input_lens": [100] * 11,
    "output_lens": [1] * 11,
    "ttfts": [0.1 + 0.01 * i for i in range(11)],
    "itls": [[] for _ in range(11)],
    "errors": [""] * 11,
}


@pytest.fixture
def served(warehouse, tmp_path):
    # Batches of 0.1 s whatever they hold: the fit is the constant model.
    lines = ["batch_size,batch_num_prefill_tokens,batch_num_decode_tokens,batch_execution_time"]
    lines += [f"{1 + i % 3},{100 * (i % 4)},{i % 3},0.1" for i in range(12)]
    (tmp_path / "batch_metrics.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "bench.json").write_text(json.dumps(VLLM_RUN))
    ingest(warehouse, [str(tmp_path / "batch_metrics.csv")], run_name="vidur")
    ingest(warehouse, [str(tmp_path / "bench.json")], run_name="bench")
    return connect(warehouse)


def test_serving_capacity_in_sql(served):
    cursor = served.execute(
        "FROM serving_capacity('bench', ttft_slo_ms := 150, percentile := 99, "
        "arrivals := 'uniform', requests := 11, model := 'llama-3-8b', gpu_memory_gib := 80, "
        "model_weights_gib := 16)"
    )
    names = [column[0] for column in cursor.description]
    highest, measured = (dict(zip(names, row, strict=True)) for row in cursor.fetchall())
    # p99 of the waits k (0.1 - 1 / rate), k = 0..10: 9.9 (0.1 - 1 / rate) <= 0.05
    assert highest["point"] == "highest" and highest["cost_run_id"] != highest["run_id"]
    assert highest["request_rate"] == pytest.approx(9.9 / (0.99 - 0.05), rel=1e-3)
    assert highest["meets_slo"] and highest["predicted_ttft_ms"] <= 150
    assert highest["kv_capacity_tokens"] == 56 * 8192 and not highest["memory_limited"]
    # At the measured 5/s every request finds the server idle: TTFT 100 ms, one request's
    # 101 tokens at a time; the measured p99 is of 0.10 .. 0.20 s: 0.199 s.
    assert measured["point"] == "measured" and measured["request_rate"] == 5.0
    assert measured["predicted_ttft_ms"] == pytest.approx(100)
    assert measured["measured_ttft_ms"] == pytest.approx(199)
    assert measured["peak_kv_tokens"] == 101
    assert measured["peak_kv_gib"] == pytest.approx(101 * 131072 / 2**30)
    assert measured["predicted_tpot_ms"] is None  # one output token each


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("'bench'", "give a TTFT or TPOT target"),
        ("'nothing', ttft_slo_ms := 100", "no run is named nothing"),
        ("'bench', ttft_slo_ms := 100, gpu_memory_gib := 80", "needs gpu_memory_gib"),
        ("'bench', ttft_slo_ms := 100, arrivals := 'bursty'", "poisson or uniform"),
        ("'bench', ttft_slo_ms := 100, cost_run := 'bench'", "has no batch timings"),
        (
            "'bench', ttft_slo_ms := 100, bytes_per_token := 1e9, gpu_memory_gib := 80, "
            "model_weights_gib := 1",
            "does not fit the KV capacity",
        ),
    ],
)
def test_bad_questions_say_why(served, arguments, message):
    with pytest.raises(Exception, match=message):
        served.execute(f"FROM serving_capacity({arguments})").fetchall()


def test_the_same_question_gets_the_same_answer(served):
    query = "FROM serving_capacity('bench', ttft_slo_ms := 150, tpot_slo_ms := 50)"
    assert served.execute(query).fetchall() == served.execute(query).fetchall()


def test_targets_each_request_misses_alone_have_no_rate(served):
    # every prefill takes 100 ms: a 90 ms TTFT target is missed at any rate
    row = served.execute(
        "SELECT request_rate, meets_slo FROM serving_capacity('bench', ttft_slo_ms := 90) "
        "WHERE point = 'highest'"
    ).fetchone()
    assert row == (None, None)


def _step_by_step(model, server, inputs, outputs, arrivals):
    """An independent plain-Python server: one iteration at a time, lists only."""
    n, clock, held = len(inputs), 0.0, 0
    queue, running, nxt = [], [], 0
    first, done, made = [None] * n, [None] * n, [0] * n
    while None in done:
        while nxt < n and arrivals[nxt] <= clock:
            queue.append(nxt)
            nxt += 1
        if not queue and not running:
            clock = arrivals[nxt]
            continue
        batch, tokens = [], 0
        while queue and len(running) + len(batch) < server.max_batch_size:
            head = queue[0]
            need = inputs[head] + outputs[head]
            if batch and tokens + inputs[head] > server.max_batch_tokens:
                break
            if server.kv_capacity_tokens is not None and held + need > server.kv_capacity_tokens:
                break
            batch.append(queue.pop(0))
            tokens += inputs[head]
            held += need
        if batch:
            squares = sum(inputs[r] ** 2 for r in batch)
            clock += max(
                model.intercept_s
                + model.per_prefill_token_s * tokens
                + model.per_prefill_sq_token_s * squares,
                0.0,
            )
            for r in batch:
                first[r], made[r] = clock, 1
            stepped = batch
        else:
            kv = sum(inputs[r] + made[r] for r in running)
            clock += max(
                model.intercept_s
                + model.per_decode_token_s * len(running)
                + model.per_kv_token_s * kv,
                0.0,
            )
            for r in running:
                made[r] += 1
            stepped = list(running)
        running = [r for r in running + batch if made[r] < outputs[r]]
        for r in stepped:
            if made[r] >= outputs[r]:
                done[r] = clock
                held -= inputs[r] + outputs[r]
    return first, done


@pytest.mark.parametrize("capacity", [None, 9000])
def test_the_simulation_matches_a_step_by_step_server(capacity):
    rng = np.random.default_rng(5)
    inputs = rng.integers(20, 2000, 120)
    outputs = rng.integers(1, 60, 120)
    arrivals = arrival_times(120, 40.0, "poisson", 5)
    model = BatchTimeModel(0.003, 1e-5, 2e-4, 1e-7, 2e-9)
    server = Server(max_batch_size=16, max_batch_tokens=3000, kv_capacity_tokens=capacity)
    run = simulate(model, server, inputs, outputs, arrivals)
    first, done = _step_by_step(model, server, inputs.tolist(), outputs.tolist(), arrivals)
    assert run.ttft_s == pytest.approx(np.array(first) - arrivals, rel=1e-9, abs=1e-12)
    multi = outputs > 1
    tpot = (np.array(done) - np.array(first))[multi] / (outputs[multi] - 1)
    assert run.tpot_s[multi] == pytest.approx(tpot, rel=1e-9, abs=1e-12)
    assert np.isnan(run.tpot_s[~multi]).all()
    assert run.memory_limited == (capacity is not None)
