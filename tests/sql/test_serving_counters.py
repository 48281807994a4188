"""serving_counters, engine_pool_snapshots and serving_warm_cache_runs against hand-worked
rows (the worked examples of serving_counters.sql's header among them)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from kvtrace import connect
from kvtrace.warehouse import Warehouse

START = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)


def sample(
    t: float,
    metric: str,
    value: float | None,
    *,
    kind: str = "counter",
    labels: dict[str, str] | None = None,
    worker: str = "w",
    run: str = "r",
    begin: datetime = START,
) -> dict:
    family = metric.removesuffix("_total") if kind == "counter" else metric
    return {
        "run_id": run,
        "experiment": "exp1",
        "worker_id": worker,
        "ts": begin + timedelta(seconds=t),
        "t_s": t,
        "metric": metric,
        "family": family,
        "labels": json.dumps(labels or {}, sort_keys=True, separators=(",", ":")),
        "value": value,
        "type": kind,
    }


def store(warehouse: Warehouse, table: str, rows: list[dict], run: str = "r") -> None:
    with warehouse.transaction(run, operation="collect") as commit:
        warehouse.write_rows(commit, table, rows)


def counters(warehouse: Warehouse, where: str) -> list[tuple]:
    return (
        connect(warehouse)
        .execute(
            "SELECT t_s, engine, quantity, part, value, delta, reset, series "
            f"FROM serving_counters WHERE {where} ORDER BY quantity, part, t_s"
        )
        .fetchall()
    )


def test_the_header_example_sums_engine_cores_and_takes_a_drop_as_a_restart(warehouse):
    # engine 0 reads 100, 160, 40 (restarted between 10 and 20 s), engine 1 50, 70, 90:
    # t=0: 150, no delta; t=10: 230, 60 + 20 = 80; t=20: 130, 40 (the reset) + 20 = 60
    hits = "vllm:prefix_cache_hits_total"
    rows = [
        sample(t, hits, v, labels={"engine": e, "model_name": "m"})
        for e, values in (("0", [100.0, 160.0, 40.0]), ("1", [50.0, 70.0, 90.0]))
        for t, v in zip((0, 10, 20), values, strict=True)
    ]
    # usage 0.2 and 0.4 on the two cores: the share is their mean, 0.3
    rows += [
        sample(0, "vllm:kv_cache_usage_perc", u, kind="gauge", labels={"engine": e})
        for e, u in (("0", 0.2), ("1", 0.4))
    ]
    store(warehouse, "engine_metrics", rows)
    assert counters(warehouse, "true") == [
        (0.0, "vllm", "kv_usage_share", None, pytest.approx(0.3), None, None, 2),
        (0.0, "vllm", "prefix_cache_hit_tokens", None, 150.0, None, False, 2),
        (10.0, "vllm", "prefix_cache_hit_tokens", None, 230.0, 80.0, False, 2),
        (20.0, "vllm", "prefix_cache_hit_tokens", None, 130.0, 60.0, True, 2),
    ]


def test_a_split_label_keeps_its_parts_and_an_unmapped_metric_is_left_out(warehouse):
    total = "vllm:kv_offload_total_bytes_total"
    rows = [
        sample(t, total, v, labels={"engine": "0", "transfer_type": d})
        for d, values in (("GPU_to_CPU", [1000.0, 5000.0]), ("CPU_to_GPU", [0.0, 2048.0]))
        for t, v in zip((0, 5), values, strict=True)
    ]
    rows.append(sample(5, "vllm:kv_offload_total_bytes_created", 1.7e9, kind="gauge"))
    rows.append(sample(5, "python_gc_collections_total", 12.0))
    store(warehouse, "engine_metrics", rows)
    assert counters(warehouse, "true") == [
        (0.0, "vllm", "offload_bytes_by_direction", "CPU_to_GPU", 0.0, None, False, 1),
        (5.0, "vllm", "offload_bytes_by_direction", "CPU_to_GPU", 2048.0, 2048.0, False, 1),
        (0.0, "vllm", "offload_bytes_by_direction", "GPU_to_CPU", 1000.0, None, False, 1),
        (5.0, "vllm", "offload_bytes_by_direction", "GPU_to_CPU", 5000.0, 4000.0, False, 1),
    ]


def test_rank_duplicated_counts_take_the_largest_series_and_sglang_tiers_stay_apart(warehouse):
    # load_back_tokens: every rank reports the same logical count, so ranks are not added
    back = "sglang:load_back_tokens_total"
    rows = [
        sample(t, back, v, labels={"tp_rank": r, "pool": "kv"})
        for r in ("0", "1")
        for t, v in ((0, 10.0), (1, 25.0))
    ]
    cached = "sglang:cached_tokens_total"
    rows += [
        sample(t, cached, v, labels={"cache_source": s})
        for s, values in (("device", [100.0, 180.0]), ("host", [0.0, 30.0]))
        for t, v in zip((0, 1), values, strict=True)
    ]
    store(warehouse, "engine_metrics", rows)
    assert counters(warehouse, "t_s = 1") == [
        (1.0, "sglang", "cached_prompt_tokens_by_tier", "device", 180.0, 80.0, False, 1),
        (1.0, "sglang", "cached_prompt_tokens_by_tier", "host", 30.0, 30.0, False, 1),
        (1.0, "sglang", "host_load_tokens", "kv", 25.0, 15.0, False, 2),
    ]


def test_engine_pool_snapshots_from_vllm_sglang_and_lmcache_rows(warehouse):
    info = {
        "block_size": "16",
        "num_gpu_blocks": "2048",
        "engine": "0",
        "num_cpu_blocks": "None",
    }
    rows = [
        # vLLM: 2,048 blocks x 16 = 32,768 tokens; 25 % used: 24,576 available
        sample(0, "vllm:cache_config_info", 1.0, kind="gauge", labels=info, worker="v"),
        sample(0, "vllm:kv_cache_usage_perc", 0.25, kind="gauge", worker="v"),
        sample(0, "vllm:num_requests_running", 3.0, kind="gauge", worker="v"),
        # SGLang with kv_used_tokens: capacity = used + available = 22,086 + 70,000
        sample(0, "sglang:kv_available_tokens", 70000.0, kind="gauge", worker="s"),
        sample(0, "sglang:kv_used_tokens", 22086.0, kind="gauge", worker="s"),
        sample(0, "sglang:kv_evictable_tokens", 1000.0, kind="gauge", worker="s"),
        sample(0, "sglang:streaming_session_held_tokens", 15000.0, kind="gauge", worker="s"),
        sample(0, "sglang:num_running_reqs", 3.0, kind="gauge", worker="s"),
        # SGLang without it: capacity = num_used / token_usage = 30,000 / 0.25
        sample(0, "sglang:num_used_tokens", 30000.0, kind="gauge", worker="s2"),
        sample(0, "sglang:token_usage", 0.25, kind="gauge", worker="s2"),
        # LMCache: 3 GiB of local cache in use
        sample(0, "lmcache:local_cache_usage", 3 * 2**30, kind="gauge", worker="l"),
    ]
    store(warehouse, "engine_metrics", rows)
    got = (
        connect(warehouse)
        .execute(
            "SELECT worker_id, engine, capacity_tokens, available_tokens, idle_evictable_tokens,"
            " held_tokens, running_batch_size, kvcache_mem_gb FROM engine_pool_snapshots"
            " ORDER BY worker_id"
        )
        .fetchall()
    )
    assert got == [
        ("l", "lmcache", None, None, None, None, None, 3.0),
        ("s", "sglang", 92086, 70000, 1000, 15000, 3, None),
        ("s2", "sglang", 120000, None, None, None, None, None),
        ("v", "vllm", 32768, 24576, None, None, 3, None),
    ]


def _run(warehouse: Warehouse, run: str, hour: int, hits: float, queries: float, hashes):
    """A run of exp1 begun at `hour`: vLLM counters from 0 to the given totals over 60 s,
    and a workload_requests row holding the prompt-block hashes."""
    begin = START.replace(hour=hour)
    rows = [
        sample(t, m, v, run=run, begin=begin)
        for m, total in (
            ("vllm:prefix_cache_hits_total", hits),
            ("vllm:prefix_cache_queries_total", queries),
        )
        for t, v in ((0, 5000.0), (60, 5000.0 + total))
    ]
    store(warehouse, "engine_metrics", rows, run)
    if hashes is not None:
        request = {
            "run_id": run,
            "request_idx": 0,
            "arrival_s": 0.0,
            "input_tokens": 2048,
            "output_tokens": 10,
            "hash_ids": list(hashes),
            "hash_block_tokens": 512,
        }
        store(warehouse, "workload_requests", [request], run)


def test_a_later_run_repeating_the_prompts_with_a_jumping_hit_rate_is_warned(warehouse):
    # the header's example: B repeats 3 of its 4 hashes (0.75); hit rate 0.30 -> 0.80
    _run(warehouse, "A", 10, 300.0, 1000.0, [1, 2, 3, 9])
    _run(warehouse, "B", 11, 800.0, 1000.0, [1, 2, 3, 4])
    # C repeats nothing of A or B and its hit rate rises too: no warning
    _run(warehouse, "C", 12, 900.0, 1000.0, [50, 51])
    got = (
        connect(warehouse)
        .execute(
            "SELECT experiment, earlier_run, later_run, later_fingerprints, overlap_share,"
            " earlier_hit_rate, later_hit_rate, hit_rate_source, warning"
            " FROM serving_warm_cache_runs"
        )
        .fetchall()
    )
    assert [row[:8] for row in got] == [
        ("exp1", "A", "B", 4, 0.75, 0.3, 0.8, "engine counters"),
        ("exp1", "A", "C", 2, 0.0, 0.3, 0.9, "engine counters"),
        ("exp1", "B", "C", 2, 0.0, 0.8, 0.9, "engine counters"),
    ]
    assert got[0][8] == (
        "run B repeats 75% of the prompt blocks of run A and its prefix-cache hit rate rose"
        " from 30% to 80%: it likely met a cache the earlier run warmed; reset the prefix"
        " cache or restart the server between runs"
    )
    assert got[1][8] is None and got[2][8] is None


def test_thresholds_and_request_records_as_the_hit_rate_source(warehouse):
    # no engine counters: hit rates from request_metrics' cached over input tokens
    for run, hour, cached in (("A", 10, [0, 100]), ("B", 11, [400, 500])):
        requests = [
            {
                "run_id": run,
                "experiment": "exp1",
                "request_id": str(i),
                "cached_tokens": c,
                "input_tokens": 500,
                "arrival_s": float(i),
            }
            for i, c in enumerate(cached)
        ]
        store(warehouse, "request_metrics", requests, run)
        store(
            warehouse,
            "engine_metrics",
            [
                sample(
                    0,
                    "vllm:num_requests_running",
                    1.0,
                    kind="gauge",
                    run=run,
                    begin=START.replace(hour=hour),
                )
            ],
            run,
        )
        store(
            warehouse,
            "workload_requests",
            [{"run_id": run, "request_idx": 0, "arrival_s": 0.0, "hash_ids": [1, 2]}],
            run,
        )
    # A: 100 of 1,000 = 0.1; B: 900 of 1,000 = 0.9; B repeats both hashes (1.0)
    con = connect(warehouse)
    row = con.execute(
        "SELECT overlap_share, earlier_hit_rate, later_hit_rate, hit_rate_source,"
        " warning IS NOT NULL FROM serving_warm_cache_runs"
    ).fetchall()
    assert row == [(1.0, 0.1, 0.9, "request records", True)]
    # a jump of 0.8 is below a threshold of 0.85: no warning
    strict = con.execute(
        "SELECT warning FROM serving_warm_cache(min_overlap := 0.5, min_jump := 0.85)"
    ).fetchall()
    assert strict == [(None,)]
