"""A shared, content-addressed pool against brute force: block keys from token ids and
from prefix keys, shared hits, arrivals replayed, tiers simulated with demotion,
replication, and the fetch-or-recompute boundary and TTFT worked by hand."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.analysis.kv_access.whatif import Tier, WhatIfSpec, whatif
from kvtrace.collectors.dsa_tracer import DsaTracer
from kvtrace.errors import InputError, KvtraceError
from kvtrace.ingest import ingest
from tests import cache_models
from tests.conftest import seed_record, write_jsonl
from tests.sql.test_dsa_access import _pin_prefix_hits

DOCUMENT = list(range(1000, 1040))  # 40 tokens two requests share whole, one in part
PROMPTS = {
    0: DOCUMENT + [100 + i for i in range(8)],
    1: DOCUMENT + [200 + i for i in range(8)],
    2: DOCUMENT[:32] + [300 + i for i in range(16)],
}
GENERATED = {r: [50 + r * 10 + i for i in range(4)] for r in PROMPTS}
STEPS = 4  # decode positions 48 .. 51


def _selections(seed: int = 3) -> dict[tuple[int, int, int], list[int]]:
    """(request, step, layer) -> ascending positions, at most 9 of the 49 .. 52 tokens."""
    rng = np.random.default_rng(seed)
    picked = {}
    for request, step, layer in itertools.product(PROMPTS, range(STEPS), range(2)):
        position = 48 + step
        size = min(9, position + 1)
        picked[(request, step, layer)] = sorted(
            rng.choice(position + 1, size=size, replace=False).tolist()
        )
    return picked


class _Clock:
    """0.4 s per step: steps 0 and 1 fall in second 0, steps 2 and 3 in second 1 (and
    so on), whatever the machine's speed."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        self.now += 0.4
        return self.now - 0.4


def _trace_together(warehouse) -> dict:
    """All three requests in one batch from the first step."""
    picked = _selections()
    tracer = DsaTracer(
        warehouse, run_name="shared", dataset="unit", block_sizes=(4,), clock=_Clock()
    )
    for request, prompt in PROMPTS.items():
        tracer.begin_request(request, prompt)
    for step in range(STEPS):
        with tracer.step({r: 48 + step for r in PROMPTS}):
            for layer in range(2):
                tracer.record_topk(layer, np.array([picked[(r, step, layer)] for r in PROMPTS]))
    for request in PROMPTS:
        tracer.end_request(request, token_ids=GENERATED[request])
    tracer.close()
    return picked


@pytest.fixture
def together(warehouse):
    picked = _trace_together(warehouse)
    return connect(warehouse), picked


def _content(request: int, block: int, block_size: int) -> tuple:
    """A block's identity by the definition: the tokens up to its end when the block is
    full in the recorded tokens, else the request's own."""
    tokens = PROMPTS[request] + GENERATED[request]
    if (block + 1) * block_size <= len(tokens):
        return ("tokens", tuple(tokens[: (block + 1) * block_size]))
    return ("private", request, block)


def _stream(picked, block_size: int, granularity: str, sharing: str) -> list[tuple]:
    """(request, item) in the pool's order: step, then request, then layer, then block."""
    accesses = []
    for step in range(STEPS):
        for request in sorted(PROMPTS):
            layers = {layer: picked[(request, step, layer)] for layer in range(2)}
            per_layer = {
                layer: sorted({p // block_size for p in pos}) for layer, pos in layers.items()
            }
            if granularity == "block":
                blocks = sorted(set().union(*per_layer.values()))
                units = [(None, b) for b in blocks]
            else:
                units = [(layer, b) for layer in sorted(per_layer) for b in per_layer[layer]]
            for layer, block in units:
                name = (
                    _content(request, block, block_size)
                    if sharing == "content"
                    else ("private", request, block)
                )
                accesses.append((request, (layer, name)))
    return accesses


def _shared_hits(stream: list[tuple], hits: list[bool]) -> int:
    """Hits on a request's first touch of an item."""
    seen = set()
    shared = 0
    for (request, item), hit in zip(stream, hits, strict=True):
        if (request, item) not in seen and hit:
            shared += 1
        seen.add((request, item))
    return shared


def test_block_keys_name_equal_token_prefixes_alike_at_4_and_16(together):
    con, _ = together
    for block_size in (4, 16):
        rows = con.execute(
            f"SELECT request_id, sharing_rule, block_keys FROM dsa_block_keys({block_size})"
        ).fetchall()
        names: dict[int, set] = {}
        for request, rule, keys in rows:
            assert rule == "token_ids"
            tokens = PROMPTS[request] + GENERATED[request]
            assert len(keys) == len(tokens) // block_size  # full blocks only
            for block, key in enumerate(keys):
                names.setdefault(key, set()).add(_content(request, block, block_size))
        assert all(len(contents) == 1 for contents in names.values())  # one content per key
        contents = [next(iter(c)) for c in names.values()]
        assert len(set(contents)) == len(contents)  # and one key per content
    shared16 = con.execute(
        "SELECT count(DISTINCT block_keys[2]), count(DISTINCT block_keys[3]) "
        "FROM dsa_block_keys(16)"
    ).fetchall()
    assert shared16 == [(1, 3)]  # tokens 16-31 are everyone's; 32-47 each request's own


@pytest.mark.parametrize("granularity", ["block", "layer_block"])
@pytest.mark.parametrize("block_size", [4, 16])
@pytest.mark.parametrize("policy", ["lru", "fifo", "opt"])
def test_a_content_pool_hits_and_shares_as_brute_force_does(
    together, policy, granularity, block_size
):
    con, picked = together
    stream = _stream(picked, block_size, granularity, "content")
    items = [item for _, item in stream]
    brute = {"lru": cache_models.lru_hits, "fifo": cache_models.fifo_hits}
    brute["opt"] = cache_models.opt_hits
    rows = con.execute(
        f"SELECT capacity_blocks, accesses, hits, shared_hits FROM dsa_hit_curve({block_size}, "
        f"'{policy}', '{granularity}', 'run', [3, 5], 'content') ORDER BY capacity_blocks"
    ).fetchall()
    assert rows
    for capacity, accesses, hits, shared in rows:
        expected = brute[policy](items, capacity)
        assert accesses == len(items)
        assert hits == sum(expected), (capacity, policy)
        assert shared == _shared_hits(stream, expected), (capacity, policy)
    private = con.execute(
        f"SELECT sum(shared_hits) FROM dsa_hit_curve({block_size}, '{policy}', "
        f"'{granularity}', 'run', [], 'private')"
    ).fetchall()
    assert private == [(0,)]


@pytest.mark.parametrize("granularity", ["block", "layer_block"])
def test_pin_prefix_pins_each_shared_prefix_block_once(together, granularity):
    con, picked = together
    block_size = 8
    stream = _stream(picked, block_size, granularity, "content")
    items = [item for _, item in stream]
    # requests 1 and 2 hit the 32-token prefix request 0 registered: blocks 0-3, pinned once
    layers = [None] if granularity == "block" else [0, 1]
    pinned = []
    for request in (1, 2):
        for block, layer in itertools.product(range(32 // block_size), layers):
            item = (layer, _content(request, block, block_size))
            if item not in pinned:
                pinned.append(item)
    assert len(pinned) == 4 * len(layers)
    rows = con.execute(
        f"SELECT capacity_blocks, hits FROM dsa_hit_curve({block_size}, 'pin_prefix', "
        f"'{granularity}', 'run', [2, 3, 6], 'content')"
    ).fetchall()
    for capacity, hits in rows:
        assert hits == _pin_prefix_hits(items, pinned, capacity), capacity


def test_the_access_stream_carries_the_item_keys(together):
    con, picked = together
    rows = con.execute(
        "SELECT request_id, step_idx, layer_id, pool_step, stream_order, sharing_rule, "
        "blocks, items FROM dsa_access(4, 'layer_block', 'content') "
        "ORDER BY pool_step, request_id, layer_id"
    ).fetchall()
    names: dict[int, tuple] = {}
    for request, step, layer, pool_step, order, rule, blocks, items in rows:
        assert (pool_step, order, rule) == (step - 47, "batch_step", "token_ids")
        assert blocks == sorted({p // 4 for p in picked[(request, step - 48, layer)]})
        for block, item in zip(blocks, items, strict=True):
            names.setdefault(item, set()).add(_content(request, block, 4))
            if _content(request, block, 4)[0] == "private":
                assert item == (request << 32) + block
    assert all(len(c) == 1 for c in names.values())


def test_the_pool_s_working_set_counts_a_shared_block_once(together):
    con, picked = together
    rows = con.execute(
        "SELECT request_id, pool_step, working_set FROM dsa_working_set(4, 2, 'block', "
        "'content') ORDER BY pool_step"
    ).fetchall()
    steps: dict[int, set] = {}
    for step, request in itertools.product(range(STEPS), sorted(PROMPTS)):
        blocks = {p // 4 for layer in range(2) for p in picked[(request, step, layer)]}
        steps.setdefault(step, set()).update(_content(request, b, 4) for b in blocks)
    expected = [len(steps[s] | steps.get(s - 1, set())) for s in range(STEPS)]
    assert [(r, p, w) for r, p, w in rows] == [(None, s + 1, expected[s]) for s in range(STEPS)]


# -- the seed's rule: prefix keys of a dump -------------------------------------------------


def test_a_dump_shares_the_blocks_wholly_inside_the_prefix_key_region(warehouse, tmp_path):
    # prefix key "k" covers 32 tokens (--prefix-key-tokens 32); two requests hold it, with
    # first decode positions 40 and 50.  At B = 12 blocks 0 and 1 (tokens 0-23) lie wholly
    # inside the region and are shared; block 2 (24-35) straddles it and stays private.
    prefix = {"prefix": {"prefix_cache_hit": False, "prefix_cached_blocks": 2, "prefix_key": "k"}}
    records, streams = [], []
    rng = np.random.default_rng(4)
    for request, first in ((0, 40), (1, 50)):
        for step in range(first, first + 3):
            positions = sorted(rng.choice(step + 1, size=8, replace=False).tolist())
            records.append(seed_record(request, 0, step, positions, **prefix))
            for block in sorted({p // 12 for p in positions}):
                shared = (block + 1) * 12 <= 32
                streams.append((request, ("k", block) if shared else (request, block)))
    ingest(warehouse, [str(write_jsonl(tmp_path / "t.jsonl", records))], prefix_key_tokens=32)
    con = connect(warehouse)
    rules = con.execute("SELECT DISTINCT sharing_rule FROM dsa_block_keys(12)").fetchall()
    assert rules == [("prefix_key",)]
    items = [item for _, item in streams]
    for capacity, hits, shared in con.execute(
        "SELECT capacity_blocks, hits, shared_hits FROM dsa_hit_curve(12, 'lru', 'block', "
        "'run', [], 'content')"
    ).fetchall():
        expected = cache_models.lru_hits(items, capacity)
        assert hits == sum(expected)
        assert shared == _shared_hits(streams, expected)
    assert shared > 0


def test_the_request_that_wrote_a_dump_s_prefix_shares_it(warehouse, tmp_path):
    # Seven requests, one after another; three (0, 2, 4) hold prefix key "p".  The seed
    # writes 0 cached blocks on a miss and 2 (N = 32 tokens at B = 16) on a hit, so request
    # 0, which wrote the prefix, has the same 32-token key region as the two that hit it:
    # its blocks 0 and 1 are ("p", block), and requests 2 and 4 hit them in a shared pool.
    keys = {0: "p", 1: "a", 2: "p", 3: "b", 4: "p", 5: "c", 6: "d"}
    records, streams = [], []
    for request, key in keys.items():
        hit = key == "p" and request > 0
        prefix = {"prefix_cache_hit": hit, "prefix_cached_blocks": 2 if hit else 0}
        for step in (40, 41):
            positions = [1, 20, step]
            records.append(
                seed_record(request, 0, step, positions, prefix={**prefix, "prefix_key": key})
            )
            for block in sorted({p // 16 for p in positions}):
                shared = (block + 1) * 16 <= 32
                streams.append((request, (key, block) if shared else (request, block)))
    ingest(warehouse, [str(write_jsonl(tmp_path / "t.jsonl", records))])
    items = [item for _, item in streams]
    rows = (
        connect(warehouse)
        .execute(
            "SELECT capacity_blocks, hits, shared_hits FROM dsa_hit_curve(16, 'lru', "
            "'block', 'run', [4, 100], 'content') WHERE capacity_blocks IN (4, 100)"
        )
        .fetchall()
    )
    assert len(rows) == 2
    for capacity, hits, shared in rows:
        expected = cache_models.lru_hits(items, capacity)
        assert hits == sum(expected), capacity
        assert shared == _shared_hits(streams, expected), capacity
    assert rows[-1][2] == 4  # blocks 0 and 1 of requests 2 and 4


def test_sharing_a_run_with_neither_token_ids_nor_prefix_keys_is_one_sentence(
    warehouse, tmp_path, cli
):
    records = [seed_record(0, 0, 40, [1, 2, 30])]
    ingest(warehouse, [str(write_jsonl(tmp_path / "t.jsonl", records))])
    status, _, err = cli("-w", warehouse.location, "whatif", "--sharing", "content")
    assert status != 0
    assert "records neither token ids nor prefix keys" in err
    assert "Traceback" not in err


# -- arrivals replayed --------------------------------------------------------------------


def _arrivals_csv(path, seconds: list[float]):
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    lines += [f"2023-11-16 18:17:{3 + s:010.7f},100,10" for s in seconds]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_arrivals_replay_interleaves_the_steps_as_continuous_batching_would(warehouse, tmp_path):
    # three requests of three steps each; arrivals at 0, 0.05 and 0.2 s, 30 ms a step:
    # request 0 runs on ticks 0-2, request 1 from ceil(0.05 / 0.03) = 2 on (2-4), request
    # 2 from ceil(0.2 / 0.03) = 7 on (7-9).
    rng = np.random.default_rng(8)
    records = []
    picks = {}
    for request in range(3):
        for k in range(3):
            positions = sorted(rng.choice(40 + k, size=6, replace=False).tolist())
            picks[(request, k)] = positions
            records.append(seed_record(request, 0, 39 + k, positions))
    ingest(warehouse, [str(write_jsonl(tmp_path / "dsa.jsonl", records))])
    ingest(
        warehouse,
        [str(_arrivals_csv(tmp_path / "arrivals.csv", [0.0, 0.05, 0.2]))],
        run_name="arrivals",
    )
    ticks = {(0, k): k for k in range(3)} | {(1, k): 2 + k for k in range(3)}
    ticks |= {(2, k): 7 + k for k in range(3)}
    order = sorted(ticks, key=lambda rk: (ticks[rk], rk[0]))
    stream = [(r, b) for r, k in order for b in sorted({p // 8 for p in picks[(r, k)]})]
    con = connect(warehouse)
    (dsa_run,) = con.execute("SELECT run_id FROM runs WHERE kind = 'dsa'").fetchall()[0]
    result = whatif(
        con,
        WhatIfSpec(
            block_sizes=(8,),
            tiers=(Tier.parse("hbm:4:100:1"), Tier.parse("remote:inf:1:10")),
            scope="run",
            arrivals="arrivals",
            runs=(dsa_run,),
        ),
    )
    hbm = result.tiers.to_pylist()[0]
    assert hbm["accesses_served"] == sum(cache_models.lru_hits(stream, 4))
    run = result.runs.to_pylist()[0]
    assert run["stream_order"] == "arrivals of arrivals, 30 ms per decode step"
    assert run["steps"] == 8  # ticks 0-4 and 7-9; tick 2 runs two requests
    arrivals = [row["arrival_s"] for row in result.requests.to_pylist()]
    assert arrivals == pytest.approx([0.0, 0.06, 0.21])


def test_replaying_a_run_without_arrival_times_is_one_sentence(together, cli, warehouse):
    status, _, err = cli("-w", warehouse.location, "whatif", "--arrivals", "shared")
    assert status != 0 and "has no arrival times to replay" in err


# -- tiers, replication, fetch or recompute -----------------------------------------------


@pytest.mark.parametrize("policy", ["fifo", "lru"])
def test_tiers_are_simulated_with_demotion_and_promotion(together, policy):
    con, picked = together
    stream = _stream(picked, 4, "layer_block", "content")
    items = [item for _, item in stream]
    levels = cache_models.tiered_levels(items, [3, 5], policy)
    result = whatif(
        con,
        WhatIfSpec(
            block_sizes=(4,),
            policy=policy,
            granularity="layer_block",
            scope="run",
            sharing="content",
            tiers=(
                Tier.parse("hbm:3:100:0"),
                Tier.parse("host:5:10:1"),
                Tier.parse("remote:inf:1:10"),
            ),
        ),
    )
    served = [row["accesses_served"] for row in result.tiers.to_pylist()]
    assert served == [levels.count(k) for k in range(3)]


def test_replication_moves_the_reads_of_blocks_read_at_least_k_times(together):
    con, picked = together
    stream = _stream(picked, 4, "block", "content")
    items = [item for _, item in stream]
    levels = cache_models.tiered_levels(items, [2], "lru")
    reads: dict = {}
    for item, level in zip(items, levels, strict=True):
        if level == 1:
            reads[item] = reads.get(item, 0) + 1
    hot = {item: n for item, n in reads.items() if n >= 3}
    assert hot  # the example has blocks the remote tier serves three times or more
    result = whatif(
        con,
        WhatIfSpec(
            block_sizes=(4,),
            scope="run",
            sharing="content",
            bytes_per_token=10,
            tiers=(Tier.parse("hbm:2:100:0"), Tier.parse("remote:inf:1:10")),
            replicas=(("remote", 3),),
        ),
    )
    (row,) = result.replicas.to_pylist()
    item_bytes = 4 * 10 * 2  # block size x bytes per token x traced layers
    assert row["replicated_blocks"] == len(hot)
    assert row["reads_moved"] == sum(hot.values())
    assert row["bytes_saved"] == sum(hot.values()) * item_bytes
    assert row["copy_bytes"] == 3 * len(hot) * item_bytes
    assert row["net_bytes_saved"] == row["bytes_saved"] - row["copy_bytes"]


def test_the_fetch_or_recompute_boundary_by_hand(together):
    con, _ = together
    # 1,000 bytes per token and layer x 2 layers = 2,000 bytes per token.  A prefill of
    # 10,000 tokens/s costs 100 µs a token.  host: 2,000 B at 1 GB/s = 2 µs a token, a
    # 50 µs read: floor(50 / 98) + 1 = 1 token.  remote: 2,000 B at 0.01 GB/s = 200 µs a
    # token, more than computing it: never.  slow: 20 µs a token, 1 ms a read:
    # floor(1000 / 80) + 1 = 13 tokens.
    result = whatif(
        con,
        WhatIfSpec(
            block_sizes=(4,),
            bytes_per_token=1000,
            tiers=(
                Tier.parse("host:8:1:50"),
                Tier.parse("slow:8:0.1:1000"),
                Tier.parse("remote:inf:0.01:10"),
            ),
            prefill_tok_s=10_000,
        ),
    )
    boundary = {row["tier"]: row["recompute_boundary_tokens"] for row in result.tiers.to_pylist()}
    assert boundary == {"host": 1, "slow": 13, "remote": None}
    assert result.runs.to_pylist()[0]["prefill_source"] == "--prefill-tok-s 10000"


def test_a_late_request_s_ttft_saving_by_hand(warehouse):
    # Request 0 runs two steps alone; request 1 (same 40-token document) joins at the
    # third.  At B = 8 its prompt blocks 0-4 (the document) were written when request 0
    # arrived: 40 reusable tokens.  Each block item sits where the LRU hierarchy of
    # request 0's accesses left it (hbm 2 items, then remote).
    rng = np.random.default_rng(6)
    tracer = DsaTracer(warehouse, run_name="late", dataset="unit", block_sizes=(8,))
    tracer.begin_request(0, PROMPTS[0])
    accesses = []
    for step in range(3):
        batch = {0: 48 + step} if step < 2 else {0: 48 + step, 1: 48}
        if step == 2:
            tracer.begin_request(1, PROMPTS[1])
        picks = [
            sorted(rng.choice(position + 1, size=5, replace=False).tolist())
            for position in batch.values()
        ]
        with tracer.step(batch):
            tracer.record_topk(0, np.array(picks))
        if step < 2:
            accesses += [_content(0, b, 8) for b in sorted({p // 8 for p in picks[0]})]
    tracer.end_request(0, token_ids=GENERATED[0])
    tracer.end_request(1, token_ids=GENERATED[1])
    tracer.close()
    result = whatif(
        connect(warehouse),
        WhatIfSpec(
            block_sizes=(8,),
            scope="run",
            sharing="content",
            bytes_per_token=100,
            tiers=(Tier.parse("hbm:2:1:5"), Tier.parse("remote:inf:0.1:40")),
            prefill_tok_s=1000,
        ),
    )
    late = result.requests.to_pylist()[1]
    assert late["reused_tokens"] == 40
    # each prompt block's tier at the arrival, from request 0's accesses before it
    tiers = [0, 0]
    for block in range(5):
        distance = cache_models.stack_distance([*accesses, _content(1, block, 8)])[-1]
        tiers[0 if 0 <= distance < 2 else 1] += 1
    item_bytes = 8 * 100  # block size x bytes per token x 1 traced layer
    fetch = max(
        [5 + tiers[0] * item_bytes / 1e3] * (tiers[0] > 0)
        + [40 + tiers[1] * item_bytes / 1e2] * (tiers[1] > 0)
    )
    assert late["fetch_us"] == pytest.approx(fetch)
    assert late["recompute_us"] == pytest.approx(40 / 1000 * 1e6)
    assert late["ttft_saved_us"] == pytest.approx(40_000 - fetch)
    assert result.requests.to_pylist()[0]["reused_tokens"] == 0


def test_the_per_second_table_counts_the_pool_s_working_set(together):
    con, picked = together
    result = whatif(
        con,
        WhatIfSpec(
            block_sizes=(4,),
            scope="run",
            sharing="content",
            tiers=(Tier.parse("remote:inf:1:10"),),
        ),
    )
    rows = result.seconds.to_pylist()
    # the clock puts steps 0.4 s apart: steps 0-2 in second 0 (0, 0.4, 0.8), step 3 in 1
    by_second: dict[int, set] = {}
    accesses = 0
    for step, request in itertools.product(range(STEPS), sorted(PROMPTS)):
        blocks = {p // 4 for layer in range(2) for p in picked[(request, step, layer)]}
        by_second.setdefault(math.floor(step * 0.4), set()).update(
            _content(request, b, 4) for b in blocks
        )
        accesses += len(blocks)
    assert [(row["second"], row["working_set"]) for row in rows] == [
        (second, len(items)) for second, items in sorted(by_second.items())
    ]
    assert [row["steps"] for row in rows] == [3, 1]
    assert sum(row["accesses_served"] for row in rows) == accesses


def test_bad_replica_settings_are_one_sentence():
    from kvtrace.analysis.kv_access.whatif import parse_replicas

    with pytest.raises(InputError, match="is not NAME=K"):
        parse_replicas(["remote=1"])
    spec = WhatIfSpec(replicas=(("hbm", 2),))
    with pytest.raises(KvtraceError, match="fastest"):
        spec.check()


def test_the_table_asked_for_is_printed_on_a_terminal_too(together, cli, warehouse):
    status, out, err = cli(
        "-w", warehouse.location, "whatif", "--sharing", "content", "--table", "requests"
    )
    assert status == 0, err
    assert out.splitlines()[0].split()[-3:] == ["fetch_us", "recompute_us", "ttft_saved_us"]
    assert len(out.splitlines()) == 2 + len(PROMPTS) + 1  # header, rule, rows, count
