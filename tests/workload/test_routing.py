"""The routing what-if (workload_routing, workload_routing_requests) against a fleet
simulated here in plain Python from the definitions in workload_routing.sql's header:
every policy and both caches on a random trace of 300 requests over 4 workers, the
header's worked example, capacities 0 and 1, and one worker against the single-cache
prefix hit curve.

Upstream scores the prefix-aware policies follow: llm-d-inference-scheduler 520af47
(pkg/epp/framework/plugins/scheduling/scorer/prefix/README.md: matched / total blocks;
scorer/loadaware/load_aware.go: 0.5 x (1 - min(queue, threshold) / threshold), threshold
128; deploy/config/epp-estimate-prefix-cache-config.yaml: weights 1 and 1) and ai-dynamo/
dynamo db19bd2 (lib/llm/src/kv_router/scheduler.rs, DefaultWorkerSelector: logit =
overlap_score_weight x prefill blocks + decode blocks, the smallest chosen)."""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.errors import QueryError
from kvtrace.ingest import ingest
from kvtrace.sql.query import run_query

BLOCK = 512  # tokens per block of a Mooncake-format trace
POLICIES = ["round_robin", "least_loaded", "session_hash", "prefix_aware", "prefix_cost"]
MASK = (1 << 64) - 1


# -- the fleet, simulated from the definitions ----------------------------------------------


def _splitmix(value: int) -> int:
    z = (value + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def _blake(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _ring_owner(key: int, workers: int) -> int:
    """The first of 100 points per worker at or after the key, wrapping around."""
    points = sorted((_blake(f"worker-{w}-{v}"), w) for w in range(workers) for v in range(100))
    for point, worker in points:
        if point >= key:
            return worker
    return points[0][1]


class Pool:
    """vLLM's pool: the leading run, then every block touched, LRU evicted."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.blocks = capacity, OrderedDict()

    def cached_run(self, path: list[tuple]) -> int:
        run = 0
        while run < len(path) and path[run] in self.blocks:
            run += 1
        return run

    def serve(self, path: list[tuple]) -> int:
        run = self.cached_run(path)
        for block in path:
            if block in self.blocks:
                self.blocks.move_to_end(block)
                continue
            self.blocks[block] = None
            if len(self.blocks) > self.capacity:
                self.blocks.popitem(last=False)
        return run


class Radix:
    """SGLang's tree: the hit run refreshed; each miss inserted under a cached parent
    after evicting, when full, the least recently used leaf other than the last node of
    the hit run; no leaf to evict, or the parent gone, ends the request."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.last_use, self.clock = capacity, {}, 0

    def cached_run(self, path: list[tuple]) -> int:
        run = 0
        while run < len(path) and path[run] in self.last_use:
            run += 1
        return run

    def _tick(self, node: tuple) -> None:
        self.clock += 1
        self.last_use[node] = self.clock

    def serve(self, path: list[tuple]) -> int:
        run = self.cached_run(path)
        for node in path[:run]:
            self._tick(node)
        guard = path[run - 1] if run else ()
        for node in path[run:]:
            if len(self.last_use) >= self.capacity:
                parents = {n[:-1] for n in self.last_use}
                leaves = [n for n in self.last_use if n not in parents and n != guard]
                if not leaves:
                    break
                del self.last_use[min(leaves, key=self.last_use.__getitem__)]
            if node[:-1] and node[:-1] not in self.last_use:
                break
            self._tick(node)
        return run


def simulate(trace, workers, capacity, policy, cache, tpot_ms=30.0, threshold=128.0, weight=1.0):
    """Per request in arrival order: (request_idx, worker, load, hit blocks)."""
    caches = [(Pool if cache == "lru" else Radix)(capacity) for _ in range(workers)]
    order = sorted(range(len(trace)), key=lambda i: (trace[i]["arrival"], i))
    running: list[tuple[float, int, int]] = []  # (end, worker, blocks) of routed requests
    last_chosen = [-1] * workers
    out = []
    for k, i in enumerate(order):
        request = trace[i]
        now, blocks = request["arrival"], len(request["hash_ids"])
        path = [tuple(request["hash_ids"][: j + 1]) for j in range(blocks)]
        load = [sum(1 for end, w, _ in running if w == x and end > now) for x in range(workers)]
        held = [sum(b for end, w, b in running if w == x and end > now) for x in range(workers)]

        runs = [c.cached_run(path) for c in caches]
        value = [0.0] * workers
        for x in range(workers):
            if policy == "prefix_aware":
                queued = min(load[x], threshold)
                value[x] = runs[x] / max(blocks, 1) + 0.5 * (1.0 - queued / threshold)
            elif policy == "prefix_cost":
                value[x] = -(weight * (blocks - runs[x]) + held[x] + blocks)

        if policy == "round_robin":
            worker = k % workers
        elif policy == "session_hash":
            session = request.get("session_id")
            key = _blake(session) if session is not None else _splitmix(i)
            worker = _ring_owner(key, workers)
        else:  # the largest value, then the smaller load, least recently chosen, lower index
            worker = min(range(workers), key=lambda x: (-value[x], load[x], last_chosen[x], x))
        last_chosen[worker] = k
        end = now + request["output"] * tpot_ms / 1e3
        running.append((end, worker, blocks))
        out.append((i, worker, load[worker], caches[worker].serve(path)))
    return out


# -- traces ----------------------------------------------------------------------------------


def _store(warehouse, tmp_path, trace) -> None:
    path = tmp_path / "trace.jsonl"
    lines = []
    for r in trace:
        record = {
            "timestamp": round(r["arrival"] * 1000),
            "input_length": r["input"],
            "output_length": r["output"],
            "hash_ids": r["hash_ids"],
        }
        if r.get("session_id") is not None:
            record["session_id"] = r["session_id"]
        lines.append(json.dumps(record) + "\n")
    path.write_text("".join(lines))
    ingest(warehouse, [str(path)])


def _random_trace(seed: int, requests: int = 300) -> list[dict]:
    """Conversations over a few shared system prompts: a turn re-reads its conversation
    and adds blocks; arrivals ~0.4 s apart, so a few requests run on a worker at once."""
    rng = np.random.default_rng(seed)
    conversations: list[tuple[str | None, list[int]]] = []
    fresh, clock, trace = 100, 0.0, []
    for _ in range(requests):
        clock += float(rng.exponential(0.4))
        if conversations and rng.random() < 0.6:
            session, blocks = conversations[int(rng.integers(len(conversations)))]
        else:
            session = None if rng.random() < 0.3 else f"s{len(conversations)}"
            blocks = [int(rng.integers(0, 3))]  # one of three system prompts
            conversations.append((session, blocks))
        for _ in range(int(rng.integers(1, 4))):
            blocks.append(fresh)
            fresh += 1
        trace.append(
            {
                "arrival": round(clock, 3),
                "input": len(blocks) * BLOCK - int(rng.integers(0, BLOCK)),
                "output": int(rng.integers(10, 800)),
                "hash_ids": list(blocks),
                "session_id": session,
            }
        )
    return trace


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    from kvtrace.warehouse import Warehouse
    from tests.conftest import warehouse_at

    folder = tmp_path_factory.mktemp("routing")
    warehouse = Warehouse(warehouse_at(folder / "wh"), create=True)
    trace = _random_trace(7)
    _store(warehouse, folder, trace)
    return connect(warehouse), trace


def _tokens(request: dict, hit: int) -> int:
    return sum(min(BLOCK, max(request["input"] - j * BLOCK, 0)) for j in range(hit))


# -- tests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cache", ["lru", "radix"])
@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_and_cache_equals_the_simulation(fleet, policy, cache):
    con, trace = fleet
    capacity = 12
    expected = simulate(trace, 4, capacity, policy, cache)
    got = con.sql(
        "SELECT request_idx, worker, load, hit_blocks, hit_tokens FROM "
        f"workload_routing_requests(4, {capacity}, '{policy}', '{cache}')"
    ).fetchall()
    assert [row[:4] for row in got] == expected
    assert [row[4] for row in got] == [_tokens(trace[i], hit) for i, _, _, hit in expected]
    # the per-worker rows add the requests up
    rows = con.sql(
        "SELECT worker, requests, hit_blocks, prefill_tokens_saved, peak_load FROM "
        f"workload_routing(4, {capacity}, '{policy}', '{cache}') ORDER BY worker NULLS FIRST"
    ).fetchall()
    fleet_row, per_worker = rows[0], rows[1:]
    assert fleet_row[0] is None and [r[0] for r in per_worker] == [0, 1, 2, 3]
    for worker, requests, hits, saved, peak in per_worker:
        mine = [e for e in expected if e[1] == worker]
        assert requests == len(mine)
        assert hits == sum(e[3] for e in mine)
        assert saved == sum(_tokens(trace[e[0]], e[3]) for e in mine)
        assert peak == (max(e[2] for e in mine) if mine else None)
    assert fleet_row[1:4] == (
        len(trace),
        sum(e[3] for e in expected),
        sum(_tokens(trace[e[0]], e[3]) for e in expected),
    )


def test_the_simulation_is_not_blind_to_the_policy(fleet):
    """The policies differ on this trace, so the comparison above can tell them apart,
    and routing by prefix saves more than round robin."""
    con, _ = fleet
    saved = dict(
        con.sql(
            "SELECT policy, prefill_tokens_saved FROM workload_routing(4, 12, 'all') "
            "WHERE worker IS NULL"
        ).fetchall()
    )
    assert len(set(saved.values())) >= 3
    assert saved["prefix_aware"] > saved["round_robin"]
    assert saved["session_hash"] > saved["round_robin"]  # a conversation stays on its worker


def test_the_worked_example_of_the_sql_header(warehouse, tmp_path):
    a, b, c, d = 1, 2, 3, 4
    trace = [
        {"arrival": i / 1000, "input": len(h) * BLOCK, "output": 1000, "hash_ids": h}
        for i, h in enumerate([[a, b], [a, b, c], [d], [a, b]])
    ]
    _store(warehouse, tmp_path, trace)
    con = connect(warehouse)

    def replay(policy: str) -> list[tuple]:
        return con.sql(
            "SELECT worker, hit_blocks FROM workload_routing_requests(2, 4, "
            f"'{policy}', tpot_ms := 1e6)"
        ).fetchall()

    assert replay("round_robin") == [(0, 0), (1, 0), (0, 0), (1, 2)]
    assert replay("prefix_aware") == [(0, 0), (0, 2), (1, 0), (0, 2)]
    fleet_row = con.sql(
        "SELECT hit_blocks, blocks FROM workload_routing(2, 4, 'prefix_aware', "
        "tpot_ms := 1e6) WHERE worker IS NULL"
    ).fetchall()
    assert fleet_row == [(4, 8)]


def test_ties_go_to_the_smaller_load_then_the_least_recently_chosen(warehouse, tmp_path):
    """Three cold requests, each a block of its own, over 3 workers: no hit anywhere, so
    prefix_aware scores them by load; the first goes to worker 0 (all tie: the lower
    index), the second to worker 1 (worker 0 is busy), the third, after both end, to
    worker 2 (all idle again: the one never chosen)."""
    trace = [
        {"arrival": t, "input": BLOCK, "output": 10, "hash_ids": [h]}
        for t, h in [(0.0, 1), (0.0, 2), (5.0, 3)]
    ]
    _store(warehouse, tmp_path, trace)
    got = (
        connect(warehouse)
        .sql("SELECT worker, load FROM workload_routing_requests(3, 8, 'prefix_aware')")
        .fetchall()
    )
    assert got == [(0, 0), (1, 0), (2, 0)]


@pytest.mark.parametrize("cache", ["lru", "radix"])
def test_capacity_zero_serves_nothing_and_one_serves_a_first_block(warehouse, tmp_path, cache):
    """[a], [a], [a, b], [a]: with one block, the pool holds a, then a (touched), then b
    (a evicted by b after the hit on a); the tree keeps a (its leaf, on the request's
    path, is guarded, so b is not inserted).  Hits 0, 1, 1, then 0 (pool) or 1 (tree)."""
    trace = [
        {"arrival": float(i), "input": len(h) * BLOCK, "output": 1, "hash_ids": h}
        for i, h in enumerate([[1], [1], [1, 2], [1]])
    ]
    _store(warehouse, tmp_path, trace)
    con = connect(warehouse)

    def hits(capacity: int) -> list[int]:
        return [
            row[0]
            for row in con.sql(
                "SELECT hit_blocks FROM workload_routing_requests(1, "
                f"{capacity}, 'round_robin', '{cache}')"
            ).fetchall()
        ]

    assert hits(0) == [0, 0, 0, 0]
    assert hits(1) == ([0, 1, 1, 0] if cache == "lru" else [0, 1, 1, 1])


@pytest.mark.parametrize(("cache", "curve"), [("lru", "lru"), ("radix", "radix_lru")])
def test_one_worker_is_the_single_cache_hit_curve(fleet, cache, curve):
    con, _ = fleet
    for capacity in (1, 5, 12, 40):
        routed = con.sql(
            "SELECT hit_rate, prefill_tokens_saved FROM workload_routing(1, "
            f"{capacity}, 'least_loaded', '{cache}') WHERE worker IS NULL"
        ).fetchall()
        single = con.sql(
            f"SELECT hit_rate, hit_tokens FROM workload_prefix_hit_curve('{curve}', "
            f"[{capacity}], 'prefix', 'tokens') WHERE capacity_blocks = {capacity}"
        ).fetchall()
        assert routed[0][1] == single[0][1]
        assert routed[0][0] == pytest.approx(single[0][0])


def test_a_byte_budget_is_the_blocks_it_holds(fleet):
    con, _ = fleet
    # 1,000 bytes a token: a 512-token block takes 512,000 bytes; 6.5 blocks hold 6
    got = con.sql(
        "SELECT capacity_blocks, prefill_tokens_saved FROM workload_routing(4, "
        "capacity_bytes := 3328000, bytes_per_token := 1000, policy := 'round_robin') "
        "WHERE worker IS NULL"
    ).fetchall()
    blocks = con.sql(
        "SELECT capacity_blocks, prefill_tokens_saved FROM workload_routing(4, 6, "
        "'round_robin') WHERE worker IS NULL"
    ).fetchall()
    assert got == blocks and got[0][0] == 6


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("4, 8, 'random'", "expected one of round_robin"),
        ("4, 8, cache := 'fifo'", "expected one of lru, radix for the cache"),
        ("0, 8", "workers must lie in"),
        ("4", "name each worker's capacity"),
        ("4, -1", "a capacity cannot be negative"),
        ("4, capacity_bytes := 1000", "needs bytes_per_token or a model"),
        ("4, 8, threshold := 0", "threshold must be a finite positive number"),
        ("4, 8, tpot_ms := -1", "tpot_ms must be a finite number of at least 0"),
        ("4, capacity_bytes := 1000, model := 'gpt-5'", "no KV layout is known for 'gpt-5'"),
    ],
)
def test_bad_arguments_are_one_sentence(fleet, arguments, message):
    con, _ = fleet
    with pytest.raises(QueryError, match=re.escape(message)):
        run_query(con, f"FROM workload_routing({arguments})")


# -- scored on KV events -----------------------------------------------------------------------


def test_kv_routing_score_replays_every_workers_cache(warehouse, tmp_path):
    """Workers A and B publish events (vLLM's KVEventBatch lines, a worker each):
    t 0  A stores [1, 2]            chain [1, 2]: nobody holds any       -> agrees
    t 1  B stores [3] under 2       chain [1, 2, 3]: A holds 2, B none   -> A was best
    t 2  A removes 2
    t 3  B stores [4] under 3       chain [1, 2, 3, 4]: A holds 1, B none (1 is missing)
    t 4  A stores [5] under 1       chain [1, 5]: A holds 1              -> agrees
    t 5  A clears its pool
    t 6  B stores [6] under 1       chain [1, 6]: A holds nothing now    -> agrees"""

    def stored(hashes, parent):
        return ["BlockStored", hashes, parent, None, 16, None, "GPU"]

    batches = [
        ("A", 0, [stored([1, 2], None)]),
        ("B", 1, [stored([3], 2)]),
        ("A", 2, [["BlockRemoved", [2], "GPU"]]),
        ("B", 3, [stored([4], 3)]),
        ("A", 4, [stored([5], 1)]),
        ("A", 5, [["AllBlocksCleared"]]),
        ("B", 6, [stored([6], 1)]),
    ]
    seqs: dict[str, int] = {}
    lines = []
    for worker, ts, events in batches:
        seq = seqs[worker] = seqs.get(worker, -1) + 1
        record = {"seq": seq, "ts": 1_764_000_000.0 + ts, "worker": worker, "events": events}
        lines.append(json.dumps(record) + "\n")
    path = tmp_path / "kv_events_two_workers.jsonl"
    path.write_text("".join(lines))
    ingest(warehouse, [str(path)])
    got = (
        connect(warehouse)
        .sql(
            "SELECT request_idx, t_s, worker, blocks, hit_blocks, best_worker, "
            "best_hit_blocks, agrees, workers_seen FROM kv_routing_score() ORDER BY request_idx"
        )
        .fetchall()
    )
    assert got == [
        (0, 0.0, "A", 2, 0, "A", 0, True, 2),
        (1, 1.0, "B", 3, 0, "A", 2, False, 2),
        (2, 3.0, "B", 4, 0, "A", 1, False, 2),
        (3, 4.0, "A", 2, 1, "A", 1, True, 2),
        (4, 6.0, "B", 2, 0, "B", 0, True, 2),
    ]
    workload = (
        connect(warehouse)
        .sql("SELECT request_idx, worker FROM kv_events_as_workload ORDER BY request_idx")
        .fetchall()
    )
    assert workload == [(i, w) for i, _, w, *_ in got]  # the same requests, numbered alike
