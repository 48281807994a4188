"""Repeatable options take every value: ``--policy`` of prefix-curve, hit-curve and
whatif computes each policy given (one curve or set of rows each), and ``--capacity``
of prefix-curve replaces the default capacities under either semantics."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_kvtrace, warehouse_at

BLOCK_TOKENS = 512  # what Mooncake's hash ids cover


def _rows(*args: str) -> list[dict]:
    result = run_kvtrace(*args, "-f", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def mooncake(tmp_path):
    """Three requests of Mooncake's format reading blocks [1, 2], [1, 3], [1, 2]."""
    path = tmp_path / "hand.jsonl"
    requests = [[1, 2], [1, 3], [1, 2]]
    path.write_text(
        "".join(
            json.dumps(
                {
                    "timestamp": 1000 * i,
                    "input_length": BLOCK_TOKENS * len(ids),
                    "output_length": 1,
                    "hash_ids": ids,
                }
            )
            + "\n"
            for i, ids in enumerate(requests)
        )
    )
    root = warehouse_at(tmp_path / "wh")
    assert run_kvtrace("-w", root, "-q", "ingest", str(path)).returncode == 0
    return root


def test_prefix_curve_computes_every_policy_given(mooncake):
    both = _rows("-w", mooncake, "prefix-curve", "--policy", "lru", "--policy", "radix_lru")
    assert {row["policy"] for row in both} == {"lru", "radix_lru"}
    for policy in ("lru", "radix_lru"):
        alone = _rows("-w", mooncake, "prefix-curve", "--policy", policy)
        assert [row for row in both if row["policy"] == policy] == alone


@pytest.mark.parametrize(
    "semantics, hits",
    [
        # block cache of 2, LRU: reads 1 2 | 1 3 | 1 2 -> miss miss | hit miss (evicts 2)
        # | hit miss: 2 hits
        ("block", 2),
        # leading run cached on arrival, a hash-chained pool of 2 (vLLM's): [1, 2] stored;
        # [1, 3] finds 1, stores 3 evicting 2; [1, 2] finds 1 only: 2 hits
        ("prefix", 2),
    ],
)
def test_a_named_capacity_replaces_the_defaults_under_either_semantics(mooncake, semantics, hits):
    rows = _rows("-w", mooncake, "prefix-curve", "--semantics", semantics, "--capacity", "2")
    assert [(row["capacity_blocks"], row["hits"], row["accesses"]) for row in rows] == [
        (2, hits, 6)
    ]
    defaults = _rows("-w", mooncake, "prefix-curve", "--semantics", semantics)
    # 3 distinct blocks: powers of two up to the first at or above them
    assert [row["capacity_blocks"] for row in defaults] == [1, 2, 4]


@pytest.fixture
def dsa(tmp_path, synthetic_trace):
    trace = synthetic_trace("rep", requests=2, steps=3, layers=2, prompt_tokens=400)
    root = warehouse_at(tmp_path / "dsa")
    assert run_kvtrace("-w", root, "-q", "ingest", str(trace)).returncode == 0
    return root


def test_hit_curve_computes_every_policy_given(dsa):
    both = _rows("-w", dsa, "hit-curve", "--policy", "lru", "--policy", "fifo", "--policy", "lru")
    assert {row["policy"] for row in both} == {"lru", "fifo"}  # lru twice: computed once
    for policy in ("lru", "fifo"):
        alone = _rows("-w", dsa, "hit-curve", "--policy", policy)
        assert [row for row in both if row["policy"] == policy] == alone


def test_whatif_computes_every_policy_given(dsa):
    args = ("--table", "tiers")
    both = _rows("-w", dsa, "whatif", "--policy", "lru", "--policy", "opt", *args)
    assert {row["policy"] for row in both} == {"lru", "opt"}
    for policy in ("lru", "opt"):
        alone = _rows("-w", dsa, "whatif", "--policy", policy, *args)
        assert [row for row in both if row["policy"] == policy] == alone


def test_a_policy_kvtrace_lacks_is_a_usage_error(dsa):
    result = run_kvtrace("-w", dsa, "hit-curve", "--policy", "lru", "--policy", "nope")
    assert result.returncode == 2
    assert "'nope' is not one of lru, opt, fifo" in result.stderr
