"""Prefix caches as engines run them, against brute force written here: every semantics x
weight x policy on random traces with shared prefixes, the worked example of the SQL
header, byte budgets, the agreement with kvcache-simulator on the Mooncake trace, and
bad arguments."""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import OrderedDict

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.analysis.kv_layouts import LAYOUTS
from kvtrace.errors import QueryError
from kvtrace.ingest import ingest
from kvtrace.sql.query import run_query
from tests import cache_models
from tests.conftest import DATA

BLOCK = 512  # tokens per block of a Mooncake-format trace


# -- brute force ---------------------------------------------------------------------------


def _hash_chain(requests: list[list[int]], capacity: int, policy: str) -> list[int]:
    """vLLM-like pool: the leading cached run, then every block touched in order; a block
    is named by its path (the hash of everything up to its end)."""
    cache: OrderedDict[tuple, None] = OrderedDict()
    hits = []
    for ids in requests:
        blocks = [tuple(ids[: i + 1]) for i in range(len(ids))]
        run = 0
        while run < len(blocks) and blocks[run] in cache:
            run += 1
        hits.append(run)
        for block in blocks:
            if block in cache:
                if policy == "lru":
                    cache.move_to_end(block)
                continue
            cache[block] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits


def _radix(requests: list[list[int]], capacity: int, policy: str) -> list[int]:
    """SGLang-like tree: nodes are prefixes (tuples); leaves evicted, LRU or Belady."""
    paths = [[tuple(blocks[: i + 1]) for i in range(len(blocks))] for blocks in requests]
    cached: dict[tuple, int] = {}  # node -> last use (LRU) or next use (OPT)
    clock = 0
    hits = []

    def next_use(node: tuple, after: int) -> int:
        return next((r for r in range(after + 1, len(paths)) if node in paths[r]), len(paths))

    def leaves() -> list[tuple]:
        return [n for n in cached if not any(len(m) == len(n) + 1 and m[:-1] == n for m in cached)]

    for r, path in enumerate(paths):
        run = 0
        while run < len(path) and path[run] in cached:
            run += 1
        hits.append(run)
        for node in path[:run]:
            clock += 1
            cached[node] = next_use(node, r) if policy == "opt" else clock
        guarded = {node for node in path if node in cached}
        for node in path[run:]:
            if len(cached) >= capacity:
                free = [n for n in leaves() if n not in guarded]
                if not free:
                    break
                if policy == "opt":
                    victim = max(free, key=lambda n: (cached[n], len(n), n))
                    if cached[victim] <= next_use(node, r):
                        break
                else:
                    victim = min(free, key=lambda n: cached[n])
                del cached[victim]
            if len(cached) >= capacity or (len(node) > 1 and node[:-1] not in cached):
                break
            clock += 1
            cached[node] = next_use(node, r) if policy == "opt" else clock
    return hits


def _block_hits(requests: list[list[int]], capacity: int, policy: str) -> list[list[bool]]:
    stream = [b for blocks in requests for b in blocks]
    model = {"lru": cache_models.lru_hits, "fifo": cache_models.fifo_hits}
    hit = (model.get(policy) or cache_models.opt_hits)(stream, capacity)
    out, at = [], 0
    for blocks in requests:
        out.append(hit[at : at + len(blocks)])
        at += len(blocks)
    return out


def _expected(requests, inputs, capacity, policy, semantics, weight, warmup) -> float:
    if semantics == "prefix":
        simulate = _radix if policy in ("radix_lru", "opt") else _hash_chain
        runs = simulate(requests, capacity, "opt" if policy == "opt" else policy)
        masks = [[i < run for i in range(len(b))] for b, run in zip(requests, runs, strict=True)]
    else:
        masks = _block_hits(requests, capacity, policy)
    first = math.floor(len(requests) * warmup)
    hit = total = 0.0
    for blocks, mask, tokens in list(zip(requests, masks, inputs, strict=True))[first:]:
        sizes = [max(0, min(BLOCK, tokens - i * BLOCK)) for i in range(len(blocks))]
        got = sum(s for s, m in zip(sizes, mask, strict=True) if m)
        if weight == "blocks":
            hit, total = hit + sum(mask), total + len(blocks)
        elif weight == "tokens":
            hit, total = hit + got, total + sum(sizes)
        else:
            hit, total = hit + got / max(sum(sizes), 1), total + 1
    return hit / total


# -- traces --------------------------------------------------------------------------------


def _random_trace(seed: int) -> tuple[list[list[int]], list[int]]:
    """Requests that extend one of a few shared prefixes (ids chained like Mooncake's)."""
    rng = np.random.default_rng(seed)
    roots = [
        [int(x) for x in rng.choice(1000, size=int(rng.integers(1, 5)), replace=False)]
        for _ in range(4)
    ]
    requests, inputs, fresh = [], [], 2000
    for _ in range(40):
        blocks = list(roots[int(rng.integers(0, 4))])
        blocks = blocks[: int(rng.integers(1, len(blocks) + 1))]
        for _ in range(int(rng.integers(0, 4))):
            blocks.append(fresh)
            fresh += 1
        requests.append(blocks)
        inputs.append(len(blocks) * BLOCK - int(rng.integers(0, BLOCK)))
    return requests, inputs


def _store(warehouse, tmp_path, requests, inputs) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(
        "".join(
            json.dumps({"timestamp": i, "input_length": n, "output_length": 1, "hash_ids": b})
            + "\n"
            for i, (b, n) in enumerate(zip(requests, inputs, strict=True))
        )
    )
    ingest(warehouse, [str(path)])


@pytest.fixture(scope="module")
def random_traces(tmp_path_factory):
    from kvtrace.warehouse import Warehouse
    from tests.conftest import warehouse_at

    found = {}
    for seed in (1, 2):
        folder = tmp_path_factory.mktemp(f"prefix{seed}")
        warehouse = Warehouse(warehouse_at(folder / "wh"), create=True)
        requests, inputs = _random_trace(seed)
        _store(warehouse, folder, requests, inputs)
        found[seed] = (connect(warehouse), requests, inputs)
    return found


# -- tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize(
    ("semantics", "policy"),
    [
        ("block", "lru"),
        ("block", "fifo"),
        ("block", "opt"),
        ("prefix", "lru"),
        ("prefix", "fifo"),
        ("prefix", "radix_lru"),
        ("prefix", "opt"),
    ],
)
@pytest.mark.parametrize("weight", ["blocks", "tokens", "requests"])
def test_every_semantics_weight_and_policy_equals_brute_force(
    random_traces, seed, semantics, policy, weight
):
    con, requests, inputs = random_traces[seed]
    for warmup in (0.0, 0.5):
        rows = con.sql(
            "SELECT capacity_blocks, hit_rate FROM workload_prefix_hit_curve("
            f"'{policy}', [3, 5, 7], semantics := '{semantics}', weight := '{weight}', "
            f"warmup := {warmup})"
        ).fetchall()
        assert rows
        for capacity, rate in rows:
            expected = _expected(requests, inputs, capacity, policy, semantics, weight, warmup)
            assert rate == pytest.approx(expected), (capacity, warmup)


def test_the_worked_example_of_the_sql_header(warehouse, tmp_path):
    a, b, c = 11, 12, 13
    _store(warehouse, tmp_path, [[a, b], [a, c], [a, b]], [2 * BLOCK, 3 * BLOCK // 2, 2 * BLOCK])
    con = connect(warehouse)

    def rate(warmup: float) -> float:
        return con.sql(
            "SELECT hit_rate FROM workload_prefix_hit_curve('radix_lru', [2], 'prefix', "
            f"'tokens', {warmup}) WHERE capacity_blocks = 2"
        ).fetchall()[0][0]

    assert rate(0.0) == pytest.approx(8 / 22)  # in the header's 4-token blocks
    assert rate(0.5) == pytest.approx(8 / 14)


def test_the_block_semantics_keeps_its_former_numbers(random_traces):
    con, requests, _ = random_traces[1]
    stream = [b for blocks in requests for b in blocks]
    rows = con.sql(
        "SELECT capacity_blocks, accesses, hits FROM workload_prefix_hit_curve('lru')"
    ).fetchall()
    for capacity, accesses, hits in rows:
        assert accesses == len(stream)
        assert hits == sum(cache_models.lru_hits(stream, capacity))


def test_a_byte_budget_is_the_blocks_it_holds(random_traces):
    con, _, _ = random_traces[1]
    per_token = {layout.name: layout.bytes_per_token for layout in LAYOUTS}["llama-3-8b"]
    budget = per_token * BLOCK * 6 + 1  # six blocks and a byte
    rows = con.sql(
        "SELECT capacity_blocks, capacity_bytes FROM workload_prefix_hit_curve('lru', "
        f"capacity_bytes := [{budget}], model := 'llama-3-8b') WHERE capacity_bytes IS NOT NULL"
    ).fetchall()
    assert rows == [(6, budget)]
    same = con.sql(
        "SELECT capacity_blocks FROM workload_prefix_hit_curve('lru', "
        f"capacity_bytes := [{budget}], bytes_per_token := {per_token}) "
        "WHERE capacity_bytes IS NOT NULL"
    ).fetchall()
    assert same == [(6,)]


def test_the_kv_layouts_agree_with_kvcache_simulators_calculator():
    calculator = pytest.importorskip("kvcache_sim.calculator")
    data = calculator.load_models_data()
    models = calculator.models_by_id(data)
    theirs = {
        "deepseek-v3": "deepseek-v3",
        "llama-3-8b": "llama-3.1-8b",
        "llama-3-70b": "llama-3.1-70b",
        "qwen3-8b": "qwen3-8b",
        "qwen3-32b": "qwen3-32b",
        "qwen3-235b-a22b": "qwen3-235b-a22b",
    }
    for layout in LAYOUTS:
        if layout.name not in theirs:
            continue  # deepseek-v3.2: FlashMLA's FP8 layout, which the calculator does not model
        size = calculator.calculate_cache_size(
            models[theirs[layout.name]],
            tokens=1024,
            precision="bf16_fp16",
            indexer_precision=None,
            block_size=512,
            include_draft_kv_cache=False,
            include_linear_attention_state=False,
            models_data=data,
        )
        assert layout.bytes_per_token == size.bytes_per_token, layout.name


def test_prefix_token_hits_after_warm_up_equal_kvcache_simulators(warehouse):
    """kvcache-simulator 0.1.3 (Apache-2.0) as the reference: its lru is a radix tree,
    its optimal Belady over the tree's leaves, its fifo a block pool; token weighted,
    half the requests as warm-up."""
    trace_module = pytest.importorskip("kvcache_sim.trace")
    from kvcache_sim.plan import build_execution_plan
    from kvcache_sim.policies import simulate_policy

    path = DATA / "mooncake_conversation_trace.jsonl"
    ingest(warehouse, [str(path)])
    con = connect(warehouse)
    plan = build_execution_plan(
        trace_module.parse_trace_lines(path.read_text().splitlines(), block_size=512),
        warmup_fraction=0.5,
    )
    for ours, theirs in (("radix_lru", "lru"), ("fifo", "fifo"), ("opt", "optimal")):
        rows = dict(
            con.sql(
                f"SELECT capacity_blocks, hit_rate FROM workload_prefix_hit_curve('{ours}', "
                "[1000, 5000, 20000], 'prefix', 'tokens', 0.5)"
            ).fetchall()
        )
        for capacity in (1000, 5000, 20000):
            reference = simulate_policy(plan, theirs, capacity)
            assert reference.measurementMode == "fixed_window"
            assert rows[capacity] == pytest.approx(reference.hitRate, abs=1e-12), (ours, capacity)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("'lru', [0]", "cache capacities must be at least 1 block"),
        ("'radix_lru'", "radix_lru needs semantics 'prefix'"),
        ("'lru', semantics := 'tree'", "for the semantics, got 'tree'"),
        ("'lru', weight := 'bytes'", "for the weight, got 'bytes'"),
        ("'lru', warmup := 1", "the warm-up share must lie in [0, 1), got 1.0"),
        ("'lru', capacity_bytes := [1000], model := 'gpt-5'", "no KV layout is known for 'gpt-5'"),
        ("'lru', capacity_bytes := [1000]", "byte budgets need bytes_per_token or a model"),
        (
            "'lru', capacity_bytes := [1000], model := 'llama-3-8b'",
            "a budget of 1,000 bytes holds no block",
        ),
    ],
)
def test_bad_arguments_are_one_sentence(random_traces, arguments, message):
    con, _, _ = random_traces[1]
    with pytest.raises(QueryError, match=re.escape(message)):
        run_query(con, f"FROM workload_prefix_hit_curve({arguments})")


def test_per_request_hits_add_up_to_the_curve_and_save_prefill_time(random_traces):
    con, requests, inputs = random_traces[2]
    rows = con.sql(
        "SELECT request_idx, counted, tokens, hit_blocks, hit_tokens, ttft_saved_ms "
        "FROM workload_prefix_requests('radix_lru', [5], warmup := 0.5, prefill_tok_s := 1000) "
        "ORDER BY request_idx"
    ).fetchall()
    runs = _radix(requests, 5, "radix_lru")
    assert [r[3] for r in rows] == runs
    for (_, counted, tokens, hit_blocks, hit_tokens, saved), n, index in zip(
        rows, inputs, range(len(rows)), strict=True
    ):
        assert counted == (index >= len(requests) // 2)
        assert tokens == n
        assert hit_tokens == min(hit_blocks * BLOCK, n)
        assert saved == pytest.approx(hit_tokens)  # 1 ms per token at 1,000 tokens/s
    (curve,) = con.sql(
        "SELECT hit_tokens FROM workload_prefix_hit_curve('radix_lru', [5], 'prefix', "
        "'tokens', 0.5) WHERE capacity_blocks = 5"
    ).fetchall()
    assert curve[0] == sum(r[4] for r in rows if r[1])


def test_the_prefix_tree_by_brute_force(random_traces):
    con, requests, inputs = random_traces[1]
    (row,) = con.sql(
        "SELECT requests, nodes, leaves, max_depth, mean_branching, shared_nodes, "
        "shared_token_share, infinite_hit_rate, isl_p50 FROM workload_prefix_tree"
    ).fetchall()
    holders: dict[tuple, set] = {}
    for r, blocks in enumerate(requests):
        for i in range(len(blocks)):
            holders.setdefault(tuple(blocks[: i + 1]), set()).add(r)
    nodes = set(holders)
    children = {n: [m for m in nodes if len(m) == len(n) + 1 and m[:-1] == n] for n in nodes}
    sizes = [
        [max(0, min(BLOCK, n - i * BLOCK)) for i in range(len(b))]
        for b, n in zip(requests, inputs, strict=True)
    ]
    shared = sum(
        s
        for b, sz in zip(requests, sizes, strict=True)
        for i, s in enumerate(sz)
        if len(holders[tuple(b[: i + 1])]) >= 2
    )
    infinite = _radix(requests, 10**9, "radix_lru")
    served = sum(sum(sz[:run]) for sz, run in zip(sizes, infinite, strict=True))
    total = sum(map(sum, sizes))
    assert row[0] == len(requests)
    assert row[1] == len(nodes)
    assert row[2] == sum(1 for n in nodes if not children[n])
    assert row[3] == max(map(len, requests))
    inner = [len(c) for n, c in children.items() if c]
    assert row[4] == pytest.approx(sum(inner) / len(inner))
    assert row[5] == sum(1 for h in holders.values() if len(h) >= 2)
    assert row[6] == pytest.approx(shared / total)
    assert row[7] == pytest.approx(served / total)
    assert row[8] == pytest.approx(float(np.median(inputs)))


@pytest.mark.parametrize("seed", range(20))
def test_one_stack_distance_pass_gives_the_lru_pool_at_every_capacity(seed):
    from kvtrace.kernels.cache_sim import dense_ids
    from kvtrace.kernels.prefix_sim import leading_lru_distances, radix_nodes

    rng = np.random.default_rng(seed)
    requests = [
        [int(b) for b in rng.integers(0, 30, size=int(rng.integers(1, 9)))] for _ in range(60)
    ]
    flat = np.array([b for blocks in requests for b in blocks])
    starts = np.concatenate([[0], np.cumsum([len(b) for b in requests])])
    paths, _ = radix_nodes(dense_ids(flat)[0], starts)
    leading = leading_lru_distances(paths, starts)
    # capacities past the number of reads too: a block never read before is never a hit
    for capacity in (1, 2, 3, 5, 8, 13, 40, len(flat), len(flat) + 1, 10**12):
        runs = [
            int(((leading[s:e] >= 0) & (leading[s:e] < capacity)).sum())
            for s, e in itertools.pairwise(starts)
        ]
        assert runs == _hash_chain(requests, capacity, "lru"), capacity


def test_the_prefix_curve_command_prints_the_curve(warehouse, tmp_path, cli):
    requests, inputs = _random_trace(3)
    _store(warehouse, tmp_path, requests, inputs)
    status, out, err = cli(
        "-w",
        warehouse.location,
        "prefix-curve",
        "--policy",
        "radix_lru",
        "--capacity",
        "5",
        "--warmup",
        "0.5",
        "--format",
        "csv",
    )
    assert status == 0, err
    (row,) = [line.split(",") for line in out.splitlines()[1:]]
    expected = _expected(requests, inputs, 5, "radix_lru", "prefix", "tokens", 0.5)
    assert float(row[5]) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--capacity", "0"], "cache capacities must be at least 1 block"),
        (["--capacity-gib", "1", "--model", "gpt-9"], "no KV layout is known for 'gpt-9'"),
        (["--capacity-gib", "1"], "byte budgets need bytes_per_token or a model"),
    ],
)
def test_bad_prefix_curve_settings_exit_with_one_sentence(
    warehouse, tmp_path, cli, arguments, message
):
    _store(warehouse, tmp_path, *_random_trace(4))
    status, _, err = cli("-w", warehouse.location, "prefix-curve", *arguments)
    assert status != 0 and message in err
    assert "Traceback" not in err


def test_a_trace_without_hashes_is_one_sentence(warehouse, cli):
    ingest(warehouse, [str(DATA / "azure_llm_inference_code.csv")])
    status, _, err = cli("-w", warehouse.location, "prefix-curve")
    assert status != 0 and "no workload run has block hashes (hash_ids)" in err
    status, _, err = cli(
        "-w", warehouse.location, "prefix-curve", "--run", "azure_llm_inference_code"
    )
    assert status != 0 and "has no block hashes (hash_ids)" in err
    assert "Traceback" not in err
