"""The reference model: its indexer is the formula, its traces are deterministic."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from kvtrace import connect
from kvtrace.collectors.dsa_ref import ByteTokenizer, DsaRef, DsaRefConfig
from kvtrace.collectors.dsa_tracer import DsaTracer

SMALL = DsaRefConfig(
    dim=32,
    n_layers=2,
    n_heads=2,
    index_heads=3,
    index_dim=8,
    rope_dim=4,
    q_lora_rank=16,
    index_topk=5,
    max_seq_len=64,
)


class Recorder:
    """Stands in for the tracer: remembers what the model reported."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, dict]] = []

    def step(self, positions):
        recorder = self

        class _Step:
            def __enter__(self):
                recorder.steps.append((next(iter(positions.values())), {}))

            def __exit__(self, *exc):
                return False

        return _Step()

    def record_topk(self, layer_id, indices, scores=None):
        self.steps[-1][1][layer_id] = (indices.tolist(), scores.tolist())


def _rotate(vector: list[float], position: int, theta: float) -> list[float]:
    out = list(vector)
    for i in range(0, len(vector), 2):
        angle = position * theta ** (-i / len(vector))
        a, b = vector[i], vector[i + 1]
        out[i], out[i + 1] = (
            a * math.cos(angle) - b * math.sin(angle),
            (a * math.sin(angle) + b * math.cos(angle)),
        )
    return out


def test_first_layers_top_k_is_the_index_formula_computed_by_hand():
    model = DsaRef(SMALL, seed=3)
    prompt = [5, 17, 99, 3, 250, 8, 8, 61, 140, 2, 77, 31]
    recorder = Recorder()
    generated = model.generate(prompt, 2, tracer=recorder)
    position, layers = recorder.steps[0]
    assert position == len(prompt)
    tokens = [*prompt, generated[0]]
    indexer = model.blocks[0].indexer
    c = SMALL
    with torch.no_grad():
        h = model.blocks[0].attn_norm(model.embed(torch.tensor(tokens)))
        raw_keys = indexer.k_norm(indexer.wk(h)).tolist()
        raw_q = (
            indexer.wq_b(indexer.q_norm(indexer.wq_a(h[-1:])))
            .view(c.index_heads, c.index_dim)
            .tolist()
        )
        weights = (indexer.w_proj(h[-1]) / math.sqrt(c.index_heads * c.index_dim)).tolist()
    keys = [
        _rotate(k[: c.rope_dim], s, c.rope_theta) + k[c.rope_dim :] for s, k in enumerate(raw_keys)
    ]
    queries = [_rotate(q[: c.rope_dim], position, c.rope_theta) + q[c.rope_dim :] for q in raw_q]
    index = [
        sum(
            weights[head] * max(0.0, sum(a * b for a, b in zip(queries[head], key, strict=True)))
            for head in range(c.index_heads)
        )
        for key in keys
    ]
    expected = sorted(range(len(index)), key=lambda s: -index[s])[: c.index_topk]
    picked, scores = layers[0]
    assert sorted(picked) == sorted(expected)
    assert scores == pytest.approx([index[s] for s in picked], rel=1e-4, abs=1e-6)
    assert set(layers) == {0, 1} and all(len(p) == 5 for p, _ in layers.values())


def test_short_sequences_select_every_position():
    model = DsaRef(SMALL, seed=1)
    recorder = Recorder()
    model.generate([1, 2], 3, tracer=recorder)
    assert [sorted(layers[0][0]) for _, layers in recorder.steps] == [[0, 1, 2], [0, 1, 2, 3]]


def _collect(warehouse, seed: int, tag: str) -> list:
    model = DsaRef(SMALL, seed=seed)
    tokenizer = ByteTokenizer()
    tracer = DsaTracer(warehouse, run_name=f"det-{tag}", dataset="unit", block_sizes=(4,))
    for request, text in enumerate(["needle in a haystack", "the grass is green"]):
        prompt = tokenizer.encode(text)
        tracer.begin_request(request, prompt)
        out = model.generate(prompt, 6, request_id=request, tracer=tracer)
        tracer.end_request(request, new_tokens=len(out))
    tracer.close()
    return (
        connect(warehouse)
        .execute(
            "SELECT request_id, step_idx, layer_id, selected_pos FROM dsa_steps "
            "WHERE run_id LIKE ? ORDER BY ALL",
            [f"det-{tag}-%"],
        )
        .fetchall()
    )


def test_same_seed_same_selections(warehouse):
    first, second = _collect(warehouse, 7, "a"), _collect(warehouse, 7, "b")
    assert first == second and len(first) == 2 * 5 * 2
    assert _collect(warehouse, 8, "c") != first


def test_weights_round_trip_through_safetensors(tmp_path):
    from safetensors.torch import save_file

    model = DsaRef(SMALL, seed=5)
    path = tmp_path / "dsa-ref.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    loaded = DsaRef.from_safetensors(path, SMALL)
    prompt = ByteTokenizer().encode("same weights")
    assert loaded.generate(prompt, 5) == model.generate(prompt, 5)


def test_greedy_decoding_is_deterministic_and_sampling_follows_its_seed():
    model = DsaRef(SMALL, seed=2)
    prompt = ByteTokenizer().encode("abc")
    assert model.generate(prompt, 8) == model.generate(prompt, 8)
    assert model.generate(prompt, 8, temperature=1.0, seed=4) == model.generate(
        prompt, 8, temperature=1.0, seed=4
    )
    assert np.all(np.array(model.generate(prompt, 8)) < SMALL.vocab_size)


def test_collect_runs_ruler_prompts_and_records_skips(warehouse):
    from dataclasses import replace

    from kvtrace.collectors._dsa_collect import collect_dsa
    from kvtrace.collectors.datasets.ruler import niah_requests

    tokenizer = ByteTokenizer()

    def count(text: str) -> int:
        return len(tokenizer.encode(text))

    short = list(niah_requests(2, 500, count, seed=1))
    long = [replace(r, request_id=2) for r in niah_requests(1, 800, count, seed=2)]
    assert all(count(r.prompt) <= 500 for r in short) and count(long[0].prompt) > 600
    model = DsaRef(replace(SMALL, max_seq_len=1024), seed=0)
    report = collect_dsa(
        warehouse,
        short + long,
        model=model,
        tokenizer=tokenizer,
        run_name="ruler-test",
        dataset="ruler",
        block_sizes=(4, 16),
        max_new_tokens=3,
        max_prompt_tokens=600,
    )
    assert (report.requests, report.skipped, report.new_tokens) == (2, 1, 6)
    con = connect(warehouse)
    skipped = con.execute(
        "SELECT request_id, skip_reason FROM requests WHERE status = 'skipped'"
    ).fetchall()
    assert skipped == [(2, f"prompt of {count(long[0].prompt)} tokens is longer than 600")]
    rows = con.execute(
        "SELECT count(*), min(seq_len), max(len(selected_pos)) FROM dsa_steps"
    ).fetchone()
    assert rows[0] == 2 * 2 * 2 * 2  # requests x decode steps x layers x block sizes
    assert rows[2] == SMALL.index_topk and rows[1] > 400
    tokens = con.execute(
        "SELECT request_id, prompt_tokens, token_ids FROM dsa_request_tokens ORDER BY 1"
    ).fetchall()
    for request, (request_id, prompt_tokens, token_ids) in zip(short, tokens, strict=True):
        prompt = tokenizer.encode(request.prompt)
        assert request_id == request.request_id and prompt_tokens == len(prompt)
        assert token_ids[:prompt_tokens] == list(prompt) and len(token_ids) == len(prompt) + 3


def _selections(warehouse, run: str) -> list:
    return (
        connect(warehouse)
        .execute(
            "SELECT request_id, step_idx, layer_id, selected_pos FROM dsa_steps "
            "WHERE run_id LIKE ? ORDER BY ALL",
            [f"{run}-%"],
        )
        .fetchall()
    )


def test_a_batched_decode_selects_and_generates_what_one_at_a_time_does(warehouse):
    model = DsaRef(SMALL, seed=4)
    tokenizer = ByteTokenizer()
    prompts = [tokenizer.encode(text) for text in ("a", "a longer prompt here", "mid size")]
    budgets = [7, 3, 5]  # rows leave the batch at different steps
    alone = DsaTracer(warehouse, run_name="alone", dataset="unit", block_sizes=(4,))
    one_by_one = []
    for request, (prompt, budget) in enumerate(zip(prompts, budgets, strict=True)):
        alone.begin_request(request, prompt)
        one_by_one.append(model.generate(prompt, budget, request_id=request, tracer=alone))
        alone.end_request(request)
    alone.close()
    together = DsaTracer(warehouse, run_name="batch", dataset="unit", block_sizes=(4,))
    for request, prompt in enumerate(prompts):
        together.begin_request(request, prompt)
    finished = []
    batched = model.generate_batch(
        prompts,
        budgets,
        request_ids=[0, 1, 2],
        tracer=together,
        seeds=[0, 0, 0],
        on_finish=finished.append,
    )
    for request in range(3):
        together.end_request(request)
    together.close()
    assert batched == one_by_one and [len(out) for out in batched] == budgets
    assert finished == [1, 2, 0]
    expected = _selections(warehouse, "alone")
    assert len(expected) == (6 + 2 + 4) * SMALL.n_layers
    assert _selections(warehouse, "batch") == expected


def test_a_device_that_is_not_here_is_refused_in_one_sentence():
    from kvtrace.collectors.models import torch_device
    from kvtrace.errors import InputError

    assert torch_device("cpu") == torch.device("cpu")
    with pytest.raises(InputError, match="'gpu0' is not a torch device"):
        torch_device("gpu0")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(InputError, match="CUDA GPU"):
        torch_device(f"cuda:{count}")  # one index past the last GPU, or no GPU at all


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_gpu_decodes_and_selects_what_the_cpu_does():
    from dataclasses import replace

    config = replace(SMALL, dim=64, index_topk=12, max_seq_len=256)
    prompt = ByteTokenizer().encode("the same tokens on either device, " * 3)
    on_cpu, on_gpu = Recorder(), Recorder()
    cpu_tokens = DsaRef(config, seed=3).generate(prompt, 6, tracer=on_cpu)
    gpu_model = DsaRef(config, seed=3).to("cuda")
    assert gpu_model.config_dict()["device"] == "cuda:0"
    assert gpu_model.generate(prompt, 6, tracer=on_gpu) == cpu_tokens
    assert [start for start, _ in on_gpu.steps] == [start for start, _ in on_cpu.steps]
    for (_, cpu_layers), (_, gpu_layers) in zip(on_cpu.steps, on_gpu.steps, strict=True):
        for layer, (cpu_positions, cpu_scores) in cpu_layers.items():
            gpu_positions, gpu_scores = gpu_layers[layer]
            assert sorted(gpu_positions) == sorted(cpu_positions)
            np.testing.assert_allclose(gpu_scores, cpu_scores, rtol=1e-4, atol=1e-5)
