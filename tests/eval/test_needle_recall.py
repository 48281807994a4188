"""Needle spans from the collector and the share of the needle each selection held."""

from __future__ import annotations

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.collectors._dsa_collect import collect_dsa
from kvtrace.collectors._needles import needle_spans
from kvtrace.collectors.datasets.ruler import niah_requests
from kvtrace.collectors.dsa_ref import ByteTokenizer, DsaRef, DsaRefConfig
from kvtrace.collectors.dsa_tracer import DsaTracer


def test_recall_counts_needle_tokens_and_blocks_the_selection_held(warehouse):
    # the worked example of eval.sql: value tokens 10..13, key tokens 4..5, B = 4
    with DsaTracer(
        warehouse, run_name="needle", dataset="ruler", block_sizes=(4,), topk=8
    ) as tracer:
        tracer.begin_request(0, list(range(40)))
        with tracer.step(40):
            tracer.record_topk(0, np.array([0, 5, 11, 30, -1, -1]))  # -1 pads
            tracer.record_topk(1, np.array([4, 5, 10, 11, 12, 13]))
        tracer.record_answer(
            0,
            task="niah_single",
            sample_index=0,
            prediction="1234",
            references=["7777"],
            needle_spans=[("value", "7777", 10, 14), ("key", "k", 4, 6)],
        )
        tracer.end_request(0, new_tokens=1)
    con = connect(warehouse)
    rows = con.execute(
        "SELECT layer_id, needle_tokens, needle_tokens_selected, needle_token_recall, "
        "needle_blocks, needle_blocks_selected, needle_block_recall, score "
        "FROM eval_needle_recall(4)"
    ).fetchall()
    assert rows == [
        (0, 6, 2, pytest.approx(1 / 3), 3, 2, pytest.approx(2 / 3), 0.0),
        (1, 6, 6, 1.0, 3, 3, 1.0, 0.0),
    ]
    by_layer = con.execute(
        "SELECT layer_id, answer, needle_block_recall, full_block_recall "
        "FROM eval_needle_recall_by_layer(4)"
    ).fetchall()
    assert by_layer == [(0, "wrong", pytest.approx(2 / 3), 0.0), (1, "wrong", 1.0, 1.0)]
    # at B = 16 the needle sits in block 0 only, which layer 0 touches
    assert con.execute(
        "SELECT min(needle_block_recall) FROM eval_needle_recall(16)"
    ).fetchone() == (1.0,)
    sample = con.execute(
        "SELECT request_id, context_length, error_class FROM eval_samples"
    ).fetchone()
    assert sample == (0, 40, "wrong_value")


def test_spans_of_the_offline_generator_decode_back_to_the_needle():
    tokenizer = ByteTokenizer()
    for request in niah_requests(
        3, 800, lambda s: len(tokenizer.encode(s)), variant="multikey", seed=1
    ):
        tokens = tokenizer.encode(request.prompt)
        spans = needle_spans(request, tokenizer.encode)
        assert [part for part, *_ in spans] == ["key", "value"]
        for _, text, start, end in spans:
            assert tokenizer.decode(tokens[start:end]) == text
        assert spans[1][1] == request.answer


def test_spans_of_ruler_files_are_every_occurrence_of_an_answer():
    from kvtrace.collectors.datasets import DatasetRequest

    request = DatasetRequest(0, "ab 42 cd 42", references=["42"])
    spans = needle_spans(request, ByteTokenizer().encode)  # BOS shifts tokens by one
    assert spans == [("value", "42", 4, 6), ("value", "42", 10, 12)]


def test_a_collected_ruler_run_scores_answers_and_links_them_to_requests(warehouse):
    tokenizer = ByteTokenizer()
    requests = list(niah_requests(2, 600, lambda s: len(tokenizer.encode(s)), seed=2))
    config = DsaRefConfig(
        dim=32,
        n_layers=2,
        n_heads=2,
        index_heads=2,
        index_dim=8,
        rope_dim=4,
        q_lora_rank=16,
        index_topk=64,
        max_seq_len=2048,
    )
    collect_dsa(
        warehouse,
        requests,
        model=DsaRef(config),
        tokenizer=tokenizer,
        run_name="niah",
        dataset="ruler",
        max_new_tokens=3,
        block_sizes=(16,),
    )
    con = connect(warehouse)
    samples = con.execute(
        "SELECT request_id, task, answers, metric, context_length FROM eval_samples ORDER BY 1"
    ).fetchall()
    assert samples == [
        (
            r.request_id,
            "niah_single",
            [r.answer],
            "string_match_all",
            len(tokenizer.encode(r.prompt)),
        )
        for r in requests
    ]
    recall = con.execute(
        "SELECT count(DISTINCT request_id), count(*), "
        "min(needle_tokens) FROM eval_needle_recall(16)"
    ).fetchone()
    traced = con.execute("SELECT count(*) FROM dsa_steps").fetchone()[0]
    assert recall[0] == 2 and recall[1] == traced > 0  # every traced row has its needle
    assert recall[2] == min(len(r.meta["key"]) + len(r.answer) for r in requests)
