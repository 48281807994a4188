"""The KV access views: hand-worked examples and brute-force cache simulation."""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.analysis.kv_access import _stream, curves
from kvtrace.collectors.dsa_tracer import DsaTracer
from kvtrace.errors import QueryError
from kvtrace.ingest import ingest
from tests import cache_models
from tests.conftest import seed_record, write_jsonl

# The example of queries/dsa_access.sql: block size 16, one request, two steps, two layers.
EXAMPLE = [
    seed_record(0, 0, 100, [3, 20]),
    seed_record(0, 1, 100, [21, 40]),
    seed_record(0, 0, 101, [5]),
    seed_record(0, 1, 101, [41]),
]


@pytest.fixture
def example(warehouse, tmp_path):
    ingest(warehouse, [str(write_jsonl(tmp_path / "example.jsonl", EXAMPLE))])
    return connect(warehouse)


def _rows(con, sql: str) -> list[tuple]:
    return con.execute(sql).fetchall()


def test_the_access_stream_unions_layers_per_step_or_keeps_them_apart(example):
    assert _rows(
        example, "SELECT step_idx, layer_id, blocks FROM dsa_access(16) ORDER BY step_idx"
    ) == [(100, None, [0, 1, 2]), (101, None, [0, 2])]
    assert _rows(
        example,
        "SELECT step_idx, layer_id, blocks FROM dsa_access(16, "
        "'layer_block') ORDER BY step_idx, layer_id",
    ) == [(100, 0, [0, 1]), (100, 1, [1, 2]), (101, 0, [0]), (101, 1, [2])]


def test_reuse_distances_of_the_worked_example(example):
    # block: 0, 1, 2 first touches; 0 after {1, 2}; 2 after {0}
    assert _rows(
        example, "SELECT distance, accesses, share FROM dsa_reuse(16) ORDER BY distance NULLS FIRST"
    ) == [(None, 3, 0.6), (1, 1, 0.2), (2, 1, 0.2)]
    # layer_block: four first touches; (0, 0) after three others; (1, 2) after (0, 0)
    assert _rows(
        example,
        "SELECT distance, accesses FROM dsa_reuse(16, 'layer_block') ORDER BY distance NULLS FIRST",
    ) == [(None, 4), (1, 1), (3, 1)]


@pytest.mark.parametrize(
    ("policy", "hits"),
    [
        ("lru", [0, 1, 2, 2]),
        ("fifo", [0, 1, 2, 2]),
        ("opt", [0, 2, 2, 2]),
    ],
)
def test_hit_curves_of_the_worked_example(example, policy, hits):
    rows = _rows(
        example,
        f"SELECT capacity_blocks, accesses, hits, missed_blocks, hit_rate "
        f"FROM dsa_hit_curve(16, '{policy}', capacities := [3]) "
        "ORDER BY capacity_blocks",
    )
    assert [r[0] for r in rows] == [1, 2, 3, 4]
    assert [r[2] for r in rows] == hits
    assert all(r[1] == 5 and r[3] == 5 - r[2] and r[4] == r[2] / 5 for r in rows)


def test_step_overlap_of_the_worked_example(example):
    rows = _rows(
        example,
        "SELECT step_idx, layer_id, blocks, prev_step_jaccard, "
        "prev_step_reused, prev_layer_jaccard, prev_layer_reused "
        "FROM dsa_step_overlap(16) ORDER BY step_idx, layer_id",
    )
    assert rows == [
        (100, 0, 2, None, None, None, None),
        (100, 1, 2, None, None, 1 / 3, 0.5),  # {1, 2} against layer 0's {0, 1}
        (101, 0, 1, 0.5, 1.0, None, None),  # {0} after {0, 1}
        (101, 1, 1, 0.5, 1.0, 0.0, 0.0),  # {2} after {1, 2}; layer 0 took {0}
    ]


def test_working_set_counts_distinct_items_of_the_last_steps(example):
    assert _rows(
        example, "SELECT step_idx, working_set FROM dsa_working_set(16, 1) ORDER BY step_idx"
    ) == [(100, 3), (101, 2)]
    assert _rows(
        example, "SELECT step_idx, working_set FROM dsa_working_set(16, 2) ORDER BY step_idx"
    ) == [(100, 3), (101, 3)]
    assert _rows(
        example,
        "SELECT step_idx, working_set FROM dsa_working_set(16, 1, 'layer_block') ORDER BY step_idx",
    ) == [(100, 4), (101, 2)]


# -- a random trace against brute force --------------------------------------------------


def _random_trace(rng) -> list[dict]:
    """Three requests, the second and third prefix-cache hits of 2 and 5 blocks of 16."""
    records = []
    for request, cached in ((0, None), (1, 2), (2, 5)):
        prompt = int(rng.integers(60, 120))
        for step in range(prompt, prompt + int(rng.integers(3, 6))):
            for layer in range(3):
                positions = sorted(
                    rng.choice(step + 1, size=min(12, step + 1), replace=False).tolist()
                )
                extra = (
                    {}
                    if cached is None
                    else {"prefix": {"prefix_cache_hit": True, "prefix_cached_blocks": cached}}
                )
                records.append(seed_record(request, layer, step, positions, **extra))
    return records


def _streams(records, block_size: int, granularity: str) -> dict[int, list]:
    """Each request's access stream, built from the raw records by the definition."""
    by_step: dict[tuple, dict] = {}
    for r in records:
        blocks = {p // block_size for p in r["selected_token_pos"]}
        by_step.setdefault((r["request_id"], r["step_idx"]), {})[r["layer_id"]] = blocks
    streams: dict[int, list] = {}
    for (request, _step), layers in sorted(by_step.items()):
        if granularity == "block":
            items = [(request, b) for b in sorted(set().union(*layers.values()))]
        else:
            items = [(request, layer, b) for layer in sorted(layers) for b in sorted(layers[layer])]
        streams.setdefault(request, []).extend(items)
    return streams


def _pinned(records, block_size: int, granularity: str) -> dict[int, list]:
    """Each request's pinned items in rank order: prefix blocks (x layers), block-major."""
    layers = sorted({r["layer_id"] for r in records})
    pinned = {}
    for r in records:
        cached = r.get("prefix", {}).get("prefix_cached_blocks")
        blocks = math.ceil(cached * 16 / block_size) if cached else 0
        request = r["request_id"]
        pinned[request] = (
            [(request, b) for b in range(blocks)]
            if granularity == "block"
            else [(request, layer, b) for b in range(blocks) for layer in layers]
        )
    return pinned


def _pin_prefix_hits(stream, pinned, capacity) -> int:
    resident = set(pinned[:capacity])
    room = capacity - len(resident)
    cache: OrderedDict = OrderedDict()
    hits = 0
    for item in stream:
        if item in resident:
            hits += 1
        elif item in cache:
            cache.move_to_end(item)
            hits += 1
        elif room > 0:
            cache[item] = True
            if len(cache) > room:
                cache.popitem(last=False)
    return hits


BRUTE = {"lru": cache_models.lru_hits, "fifo": cache_models.fifo_hits, "opt": cache_models.opt_hits}


@pytest.fixture
def random_trace(warehouse, tmp_path):
    records = _random_trace(np.random.default_rng(11))
    ingest(warehouse, [str(write_jsonl(tmp_path / "random.jsonl", records))])
    return connect(warehouse), records


@pytest.fixture(params=["whole requests", "windows of 4 rows on 3 threads"])
def windowing(request, monkeypatch):
    """The stream read in windows of whole requests on one thread, or in windows of 4
    stored rows (cut inside requests: a step has 3) shared among 3 threads."""
    if request.param != "whole requests":
        monkeypatch.setattr(_stream, "WINDOW_ROWS", 4)
        monkeypatch.setattr(curves, "default_threads", lambda: 3)
    else:
        monkeypatch.setattr(curves, "default_threads", lambda: 1)
    return request.param


@pytest.mark.parametrize("granularity", ["block", "layer_block"])
@pytest.mark.parametrize("scope", ["request", "run"])
@pytest.mark.parametrize("policy", ["lru", "fifo", "opt", "pin_prefix"])
def test_hit_curves_equal_brute_force_simulation(
    random_trace, policy, granularity, scope, windowing
):
    con, records = random_trace
    block_size = 12  # not a power of two: re-binned from the stored positions
    streams = _streams(records, block_size, granularity)
    pinned = _pinned(records, block_size, granularity)
    if scope == "run":  # ingested: requests one after another, one shared cache
        streams = {0: [item for r in sorted(streams) for item in streams[r]]}
        pinned = {0: [item for r in sorted(pinned) for item in pinned[r]]}
    rows = _rows(
        con,
        f"SELECT capacity_blocks, hits, accesses FROM dsa_hit_curve("
        f"{block_size}, '{policy}', '{granularity}', '{scope}', [3, 5, 7]) "
        "ORDER BY capacity_blocks",
    )
    largest = max(len(set(s)) for s in streams.values())
    grid = [2**k for k in range(math.ceil(math.log2(largest)) + 1)]
    assert [r[0] for r in rows] == sorted({*grid, 3, 5, 7})
    for capacity, hits, accesses in rows:
        assert accesses == sum(len(s) for s in streams.values())
        if policy == "pin_prefix":
            expected = sum(
                _pin_prefix_hits(streams[u], pinned.get(u, []), capacity) for u in streams
            )
        else:
            expected = sum(sum(BRUTE[policy](s, capacity)) for s in streams.values())
        assert hits == expected, (capacity, policy, granularity, scope, windowing)


def test_runs_read_in_one_batch_are_simulated_apart(warehouse, tmp_path):
    rng = np.random.default_rng(2)
    first, second = _random_trace(rng), _random_trace(rng)
    for records, name in ((first, "one"), (second, "two")):
        for record in records:
            record["run_name"] = name
        ingest(warehouse, [str(write_jsonl(tmp_path / f"{name}.jsonl", records))])
    rows = _rows(
        connect(warehouse),
        "SELECT r.run_name, c.capacity_blocks, c.hits "
        "FROM dsa_hit_curve(16, 'opt', 'layer_block') c JOIN runs r USING (run_id)",
    )
    assert {name for name, _, _ in rows} == {"one", "two"}
    for name, capacity, hits in rows:
        streams = _streams(first if name == "one" else second, 16, "layer_block")
        assert hits == sum(sum(cache_models.opt_hits(s, capacity)) for s in streams.values())


def test_reuse_histogram_equals_the_stack_distances_by_definition(random_trace):
    con, records = random_trace
    distances = [
        d
        for s in _streams(records, 12, "layer_block").values()
        for d in cache_models.stack_distance(s)
    ]
    rows = _rows(con, "SELECT distance, accesses FROM dsa_reuse(12, 'layer_block')")
    expected = {}
    for d in distances:
        key = None if d < 0 else d
        expected[key] = expected.get(key, 0) + 1
    assert dict(rows) == expected


def test_a_shared_cache_follows_the_batched_step_order(warehouse):
    tracer = DsaTracer(warehouse, run_name="batched", dataset="unit", block_sizes=(16,))
    tracer.begin_request(7, list(range(40)))
    tracer.begin_request(3, list(range(40)))
    streams = {3: [[0, 33], [1, 16]], 7: [[17, 32], [2, 3]]}  # positions per step
    for step in range(2):
        with tracer.step({7: 40 + step, 3: 40 + step}):
            tracer.record_topk(0, np.array([streams[7][step], streams[3][step]]))
    tracer.end_request(7)
    tracer.end_request(3)
    tracer.close()
    # batched order: step 0 (request 3: blocks 0, 2; request 7: 1, 2), step 1 (3: 0, 1; 7: 0)
    shared = [(3, 0), (3, 2), (7, 1), (7, 2), (3, 0), (3, 1), (7, 0)]
    con = connect(warehouse)
    for capacity in (1, 2, 3, 4):
        got = _rows(
            con,
            f"SELECT hits FROM dsa_hit_curve(16, 'lru', 'block', 'run', "
            f"[{capacity}]) WHERE capacity_blocks = {capacity}",
        )
        assert got == [(sum(cache_models.lru_hits(shared, capacity)),)]


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("FROM dsa_hit_curve(16, 'mru')", "unknown policy 'mru'"),
        ("FROM dsa_hit_curve(16, capacities := [0])", "capacities must be at least 1"),
        ("FROM dsa_hit_curve(0)", "block size must be a positive"),
        ("FROM dsa_reuse(16, 'page')", "unknown granularity 'page'"),
        ("FROM dsa_access(16, 'page')", "unknown granularity 'page'"),
        ("FROM dsa_working_set(16, 0)", "window must be at least 1"),
    ],
)
def test_bad_arguments_are_one_sentence(example, sql, message):
    from kvtrace.sql.query import run_query

    with pytest.raises(QueryError, match=message):
        run_query(example, sql)
