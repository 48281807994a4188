"""Replaying an ingested workload through the DSA collector."""

from __future__ import annotations

import json

from kvtrace import connect
from kvtrace.collectors.collect_options import DsaCollectOptions
from kvtrace.collectors.datasets.workload import block_prompt
from kvtrace.collectors.dsa_run import run_dsa_collection
from kvtrace.ingest import ingest


def test_shared_leading_hashes_become_shared_prompt_prefixes():
    a = block_prompt([7, 8, 9], 16, 49)
    b = block_prompt([7, 8, 5], 16, 49)
    c = block_prompt([6], 16, 20)
    assert len(a) == len(b) == 48 and len(c) == 19
    assert a[:32] == b[:32] and a[32:] != b[32:]  # blocks 7 and 8 shared, then they differ
    assert a[:16] != c[:16]


def test_a_mooncake_style_trace_replays_with_its_prefix_hits(warehouse, tmp_path):
    trace = tmp_path / "mini.jsonl"
    trace.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [0, 1]},
                {"timestamp": 5, "input_length": 1100, "output_length": 2, "hash_ids": [0, 1, 2]},
                {"timestamp": 9, "input_length": 300, "output_length": 2, "hash_ids": [3]},
            ]
        )
        + "\n"
    )
    ingest(warehouse, [str(trace)])
    report = run_dsa_collection(
        warehouse,
        DsaCollectOptions(
            dataset="workload",
            workload="mini",
            limit=3,
            max_new_tokens=2,
            layers=1,
            topk=32,
            block_sizes=(16,),
            run_name="replay",
        ),
    )
    assert report.requests == 3
    rows = (
        connect(warehouse)
        .execute(
            "SELECT request_id, prompt_tokens, prefix_cache_hit, prefix_cached_tokens "
            "FROM requests q JOIN runs r USING (run_id) WHERE r.run_name = 'replay' "
            "ORDER BY request_id"
        )
        .fetchall()
    )
    # the byte tokenizer: input_length tokens with BOS; request 1 shares block 0 and 1
    # (1,024 tokens) with request 0, so the whole 256-token key region is a hit
    assert rows == [(0, 600, False, 0), (1, 1100, True, 256), (2, 300, False, 0)]
