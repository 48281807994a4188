"""summary.json has the seed's fields and shapes (seed 000_* section 5.3)."""

from __future__ import annotations

import json

import pytest

from kvtrace import connect
from kvtrace.analysis.summary import run_summary
from kvtrace.collectors._dsa_collect import collect_dsa, replay_arrivals
from kvtrace.collectors.datasets.ruler import niah_requests
from kvtrace.collectors.dsa_ref import ByteTokenizer, DsaRef, DsaRefConfig
from kvtrace.errors import QueryError
from kvtrace.ingest import ingest

CONFIG = DsaRefConfig(
    dim=32,
    n_layers=2,
    n_heads=2,
    index_heads=2,
    index_dim=8,
    rope_dim=4,
    q_lora_rank=16,
    index_topk=16,
    max_seq_len=1024,
)
STATS = {"count", "min", "p50", "p95", "max", "mean"}
SEED_FIELDS = {
    "run_name",
    "dataset",
    "config",
    "unique_blocks",
    "tokens_per_touched_block",
    "offsets",
    "prefix_intersection_ratio",
    "prefix_hot_blocks",
}


def _check_seed_shapes(summary: dict) -> None:
    assert set(summary) >= SEED_FIELDS
    for name in (
        "unique_blocks",
        "tokens_per_touched_block",
        "offsets",
        "prefix_intersection_ratio",
    ):
        extra = {"mean_per_row"} if name == "tokens_per_touched_block" else set()
        assert set(summary[name]) == STATS | extra, name
    for request, blocks in summary["prefix_hot_blocks"].items():
        assert request.isdigit() and 0 < len(blocks) <= 20
        assert all(set(b) == {"block_id", "touch_count"} for b in blocks)
    json.dumps(summary)  # plain JSON throughout


def test_a_collected_run_carries_its_settings_and_no_serving_block(warehouse):
    tokenizer = ByteTokenizer()
    requests = list(niah_requests(2, 300, lambda t: len(tokenizer.encode(t)), seed=1))
    collect_dsa(
        warehouse,
        requests,
        model=DsaRef(CONFIG),
        tokenizer=tokenizer,
        run_name="niah",
        dataset="ruler",
        block_sizes=(16,),
        max_new_tokens=3,
        temperature=0.0,
        dataset_variant="niah_single-300",
    )
    summary = run_summary(connect(warehouse), "niah")
    _check_seed_shapes(summary)
    assert "serving" not in summary
    config = summary["config"]
    assert config["kv_block_size_tokens"] == 16 and config["topk"] == 16
    assert config["prefix_key_tokens"] == 256 and config["sample_rate"] == 1.0
    assert config["temperature"] == 0.0 and config["dataset_variant"] == "niah_single-300"


def test_an_arrival_trace_run_has_every_serving_field(warehouse, tmp_path):
    from kvtrace.collectors.datasets.burstgpt import load_arrivals

    trace = tmp_path / "burst.csv"
    trace.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "0.0,ChatGPT,100,2,102,Conversation log\n"
        "0.5,ChatGPT,90,4,94,Conversation log\n"
    )
    arrivals, _ = load_arrivals(trace)
    replay_arrivals(
        warehouse,
        arrivals,
        model=DsaRef(CONFIG),
        tokenizer=ByteTokenizer(),
        run_name="burst",
        dataset="burstgpt",
        batch_size=2,
        block_sizes=(16,),
        max_new_tokens=3,
    )
    summary = run_summary(connect(warehouse), "burst")
    _check_seed_shapes(summary)
    serving = summary["serving"]
    assert set(serving) == {"requests", "latency_ms", "batch_size", "max_new_tokens_cap"}
    assert set(serving["latency_ms"]) == {"p50", "p95", "p99", "max"}
    assert (serving["requests"], serving["batch_size"], serving["max_new_tokens_cap"]) == (2, 2, 3)


@pytest.mark.parametrize("tasks", [1, 2, 3, 7])
def test_any_cut_into_request_shares_merges_into_the_same_summary(
    warehouse, synthetic_trace, tasks
):
    from kvtrace.analysis._summary_shares import merge, row_statistics
    from kvtrace.analysis.summary import SummaryAnalysis, SummarySpec

    ingest(warehouse, [str(synthetic_trace("cut", requests=7, steps=3, layers=4, seed=5))])
    con = connect(warehouse)
    analysis = SummaryAnalysis(SummarySpec("cut"))
    shares = analysis.plan(con, tasks)
    assert len(shares) == tasks
    parts = [analysis.run(con, share) for share in shares]
    whole = run_summary(con, "cut")
    assert analysis.merge(con, shares, parts) == whole  # floats exactly
    assert row_statistics(merge(parts))["rows"] == 7 * 3 * 4
    assert len(whole["prefix_hot_blocks"]) == 7


@pytest.mark.parametrize(
    ("sizes", "run_meta", "expected"),
    [
        ((16, 64), None, 64),  # the tracer's default
        ((16, 64), 16, 16),  # the tracer's own, from its run_meta
        ((16, 32), None, None),  # neither: the user chooses
    ],
)
def test_a_run_at_several_block_sizes_is_summarised_at_the_one_it_was_traced_at(
    warehouse, tmp_path, sizes, run_meta, expected
):
    from tests.conftest import seed_record, write_jsonl

    folder = tmp_path / "hand"
    folder.mkdir()
    records = [
        seed_record(request, layer, step, [1, 5, 40], block_size=size, seq_len_current=64 + step)
        for size in sizes
        for request in range(2)
        for layer in range(2)
        for step in range(2)
    ]
    write_jsonl(folder / "trace.jsonl", records)
    if run_meta is not None:
        (folder / "run_meta.json").write_text(
            json.dumps({"config": {"kv_block_size_tokens": run_meta}})
        )
    ingest(warehouse, [str(folder)])
    con = connect(warehouse)
    if expected is None:
        with pytest.raises(QueryError, match=r"block sizes \[16, 32\] and was traced at 64"):
            run_summary(con, "hand")
        return
    chosen = run_summary(con, "hand")
    assert chosen["config"]["kv_block_size_tokens"] == expected
    assert chosen == run_summary(con, "hand", expected)
