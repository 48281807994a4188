"""The sliding-window, LFU and score policies of the block what-if, and its sub-block
packing, against plain simulations written from their definitions over the access
stream of a small shared trace (three requests decoding together, two of them sharing
a 40-token document), in private caches and in a pool shared by content."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.analysis.kv_access.curves import run_curves
from kvtrace.analysis.kv_access.plan import StreamSpec
from kvtrace.analysis.kv_access.whatif import Tier, WhatIfSpec, whatif
from kvtrace.collectors.dsa_tracer import DsaTracer
from kvtrace.errors import InputError, QueryError
from tests import cache_models
from tests.analysis.test_shared_pool import (
    GENERATED,
    PROMPTS,
    STEPS,
    _Clock,
    _content,
    _selections,
    _shared_hits,
    _trace_together,
)

LAYERS = 2
WINDOW = 8  # tokens: the window covers 2 or 3 blocks of 4


def _score(request: int, step: int, layer: int, position: int) -> float:
    """A score exact in float32, with ties."""
    return ((position * 7 + layer * 3 + step + request) % 5) / 2


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """The shared trace with the indexer's scores recorded beside each top-k."""
    picked = _selections()
    warehouse = tmp_path_factory.mktemp("scored") / "wh"
    from kvtrace.warehouse import Warehouse

    tracer = DsaTracer(
        Warehouse(warehouse, create=True),
        run_name="scored",
        dataset="unit",
        block_sizes=(4,),
        clock=_Clock(),
        scores="full",
    )
    for request, prompt in PROMPTS.items():
        tracer.begin_request(request, prompt)
    for step in range(STEPS):
        with tracer.step({r: 48 + step for r in PROMPTS}):
            for layer in range(LAYERS):
                rows = [picked[(r, step, layer)] for r in PROMPTS]
                scores = [
                    [_score(r, step, layer, p) for p in picked[(r, step, layer)]] for r in PROMPTS
                ]
                tracer.record_topk(layer, np.array(rows), np.array(scores, dtype=np.float32))
    for request in PROMPTS:
        tracer.end_request(request, token_ids=GENERATED[request])
    tracer.close()
    return connect(warehouse), picked, str(warehouse)


def _accesses(picked, block_size: int, granularity: str, scope: str, sharing: str):
    """The stream by the definition, one dict per access: its request, step, item and
    score (the largest of the positions its step selected in the block, over the layers
    at granularity block), in the order of the scope."""
    steps = range(STEPS)
    requests = sorted(PROMPTS)
    order = (
        [(s, r) for s in steps for r in requests]
        if scope == "run"
        else [(s, r) for r in requests for s in steps]
    )
    stream = []
    for step, request in order:
        layers = [[layer] for layer in range(LAYERS)] if granularity == "layer_block" else [[0, 1]]
        for group in layers:
            best: dict[int, float] = {}
            for layer in group:
                for position in picked[(request, step, layer)]:
                    block = position // block_size
                    score = _score(request, step, layer, position)
                    best[block] = max(best.get(block, -np.inf), score)
            for block in sorted(best):
                layer = group[0] if granularity == "layer_block" else None
                stream.append(
                    {
                        "request": request,
                        "step": step,
                        "item": (layer, _name(request, block, block_size, sharing)),
                        "score": best[block],
                    }
                )
    return stream


def _name(request: int, block: int, block_size: int, sharing: str) -> tuple:
    return (
        _content(request, block, block_size)
        if sharing == "content"
        else ("private", request, block)
    )


def _latest(items: list, item, now: int) -> int:
    return max(t for t in range(now) if items[t] == item)


def _brute(policy: str, stream: list[dict], capacity: int, block_size: int, granularity: str,
           sharing: str) -> list[bool]:  # fmt: skip
    """Each policy by its definition, one unit's stream (a request, or the pool)."""
    items = [access["item"] for access in stream]
    if policy == "lfu":
        return cache_models.evicting(
            items, capacity, lambda y, now: (items[:now].count(y), _latest(items, y, now))
        )
    if policy == "score":

        def by_score(y, now):
            at = _latest(items, y, now)
            return stream[at]["score"], at

        return cache_models.evicting(items, capacity, by_score)

    def windowed(y, now):
        newest = {}  # each request's latest step so far (all end at the last step)
        for access in stream[: now + 1]:
            newest[access["request"]] = access["step"]
        kept = set()
        for request, step in newest.items():
            tokens = 48 + step + 1
            first, last = max(tokens - WINDOW, 0) // block_size, (tokens - 1) // block_size
            for block in range(first, last + 1):
                layers = [None] if granularity == "block" else range(LAYERS)
                for layer in layers:
                    kept.add((layer, _name(request, block, block_size, sharing)))
        return y in kept, _latest(items, y, now)

    return cache_models.evicting(items, capacity, windowed)


POOLS = [("request", "private"), ("run", "private"), ("run", "content")]


@pytest.mark.parametrize("granularity", ["block", "layer_block"])
@pytest.mark.parametrize(("scope", "sharing"), POOLS)
@pytest.mark.parametrize("policy", ["sliding_window", "lfu", "score"])
def test_hit_curves_as_the_definitions_give(scored, policy, scope, sharing, granularity):
    con, picked, _ = scored
    block_size = 4
    spec = StreamSpec(block_size, granularity, scope, sharing)
    (curve,) = run_curves(con, spec, policy, [3, 5, 7], window_tokens=WINDOW)
    stream = _accesses(picked, block_size, granularity, scope, sharing)
    units = (
        [[a for a in stream if a["request"] == r] for r in sorted(PROMPTS)]
        if scope == "request"
        else [stream]
    )
    assert curve.accesses == len(stream)
    largest = max(len({a["item"] for a in unit}) for unit in units)
    assert curve.capacities[-1] >= largest  # the curve reaches past every unit's stream
    for capacity, hits, shared in zip(
        curve.capacities.tolist(), curve.hits.tolist(), curve.shared_hits.tolist(), strict=True
    ):
        found = [_brute(policy, u, capacity, block_size, granularity, sharing) for u in units]
        assert hits == sum(sum(f) for f in found), capacity
        pairs = [(a["request"], a["item"]) for u in units for a in u]
        assert shared == _shared_hits(pairs, [h for f in found for h in f]), capacity


@pytest.mark.parametrize("policy", ["sliding_window", "lfu", "score", "lru", "opt"])
def test_the_tiers_are_the_caches_at_the_cumulative_capacities(scored, policy):
    con, picked, _ = scored
    result = whatif(
        con,
        WhatIfSpec(
            block_sizes=(4,),
            tiers=(Tier.parse("hbm:2:100:0"), Tier.parse("host:3:10:1"), Tier.parse("far:inf:1:5")),
            policy=policy,
            scope="run",
            sharing="content",
            window_tokens=WINDOW,
            subblocks=(1, 3, 8),
        ),
    )
    stream = _accesses(picked, 4, "block", "run", "content")
    items = [a["item"] for a in stream]

    def hits(capacity: int) -> list[bool]:
        if policy == "lru":
            return cache_models.lru_hits(items, capacity)
        if policy == "opt":
            return cache_models.opt_hits(items, capacity)
        return _brute(policy, stream, capacity, 4, "block", "content")

    near, middle = hits(2), hits(5)
    tiers = [0 if a else 1 if b else 2 for a, b in zip(near, middle, strict=True)]
    served = {row["tier"]: row["accesses_served"] for row in result.tiers.to_pylist()}
    assert served == {"hbm": tiers.count(0), "host": tiers.count(1), "far": tiers.count(2)}
    # packing: each layer fetches the sub-blocks it touched in the block, per tier
    tokens = {1: [0, 0, 0], 3: [0, 0, 0], 8: [0, 0, 0]}
    ordered = [(s, r) for s in range(STEPS) for r in sorted(PROMPTS)]
    at = 0
    for step, request in ordered:
        blocks = sorted({p // 4 for layer in range(LAYERS) for p in picked[(request, step, layer)]})
        for block in blocks:
            for size in tokens:
                for layer in range(LAYERS):
                    touched = {
                        (p - block * 4) // size
                        for p in picked[(request, step, layer)]
                        if p // 4 == block
                    }
                    moved = sum(min(size, 4 - sub * size) for sub in touched)
                    tokens[size][tiers[at]] += moved
            at += 1
    assert at == len(stream)
    rows = result.packing.to_pylist()
    assert len(rows) == 9
    names = ["hbm", "host", "far"]
    for row in rows:
        index = names.index(row["tier"])
        assert row["bytes_subblocks"] == tokens[row["subblock_tokens"]][index] * 656
        assert row["bytes_whole_blocks"] == tiers.count(index) * 4 * 656 * LAYERS
    eight = [r for r in rows if r["subblock_tokens"] == 8]
    assert all(r["bytes_subblocks"] <= r["bytes_whole_blocks"] for r in eight)


def test_a_window_of_no_tokens_is_lru(scored):
    con, _, _ = scored
    spec = StreamSpec(4, "layer_block", "run", "content")
    (window,) = run_curves(con, spec, "sliding_window", window_tokens=0)
    (lru,) = run_curves(con, spec, "lru")
    assert window.hits.tolist() == lru.hits.tolist()


def test_opt_bounds_every_policy_and_hits_stay_below_the_ceiling(scored):
    con, _, _ = scored
    spec = StreamSpec(4, "block", "run", "content")
    (opt,) = run_curves(con, spec, "opt")
    for policy, window in itertools.product(["sliding_window", "lfu", "score"], [0, 8, 2048]):
        (curve,) = run_curves(con, spec, policy, window_tokens=window)
        assert curve.capacities.tolist() == opt.capacities.tolist()
        assert (curve.hits <= opt.hits).all(), policy
        assert (curve.hits <= curve.accesses - curve.first_touches).all()
        assert (np.diff(curve.hits) >= 0).all()  # the caches nest


def test_rows_without_scores_give_one_sentence(warehouse):
    _trace_together(warehouse)
    con = connect(warehouse)
    with pytest.raises(InputError, match="has DSA rows without scores"):
        list(run_curves(con, StreamSpec(4), "score"))
    with pytest.raises(InputError, match="has DSA rows without scores"):
        whatif(con, WhatIfSpec(block_sizes=(4,), policy="score"))


def test_bad_settings_give_one_sentence(scored):
    con, _, _ = scored
    with pytest.raises(QueryError, match="the window must be 0 or more tokens"):
        list(run_curves(con, StreamSpec(4), "sliding_window", window_tokens=-1))
    with pytest.raises(InputError, match="a sub-block must be at least 1 token"):
        whatif(con, WhatIfSpec(block_sizes=(4,), subblocks=(0,)))
    with pytest.raises(QueryError, match=r"sampling \(SHARDS\) estimates LRU hit curves only"):
        list(run_curves(con, StreamSpec(4, sample=0.5), "lfu"))


def test_the_command_takes_the_policies_window_and_subblocks(scored, cli):
    _, _, location = scored
    args = ["-w", location, "whatif", "--block-size", "4", "--tier", "hbm:2:1:0"]
    args += ["--tier", "remote:inf:1:10", "--window-tokens", "8", "--subblock", "2"]
    for policy in ("sliding_window", "lfu", "score"):
        status, out, err = cli(*args, "--policy", policy)
        assert status == 0, err
        assert "bytes_subblocks" in out and policy in out
    status, out, err = cli(*args[:-4], "--window-tokens", "-1", "--policy", "sliding_window")
    assert status != 0 and "the window must be 0 or more tokens" in err
    assert "Traceback" not in out + err
    status, out, err = cli("-w", location, "hit-curve", "--block-size", "4", "--policy", "lfu")
    assert status == 0, err
    assert "lfu" in out
