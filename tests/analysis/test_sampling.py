"""Hit curves from a spatial sample of the items (SHARDS): the estimate is the sampled
items' LRU curve scaled back as the method says, close to the exact curve on a long
stream, and bad settings are one sentence."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.analysis.kv_access._passes import Counts, LruPass
from kvtrace.errors import QueryError
from kvtrace.kernels.sampling import sampled
from kvtrace.sql.query import run_query
from tests import cache_models
from tests.analysis.test_shared_pool import _trace_together


def _estimate(items: np.ndarray, rate: float, capacities: np.ndarray) -> np.ndarray:
    """The simulation's hits at ``capacities``, the stream fed in chunks of 1,000."""
    lru = LruPass(np.zeros(0, np.int64), rate)
    counts = Counts(np.zeros((1, 1), np.int64), np.zeros(1, np.int64), None, None)
    for start in range(0, len(items), 1000):
        chunk = items[start : start + 1000]
        lru.feed(chunk, np.zeros(len(chunk), bool), np.zeros(len(chunk), np.int64), counts)
    return lru.finish(capacities).named_hits


def _zipf_stream(accesses: int, items: int, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, items + 1) ** 0.8
    return rng.choice(items, size=accesses, p=weights / weights.sum()).astype(np.int64)


def test_a_sampled_curve_is_the_sampled_items_curve_scaled_back():
    stream = _zipf_stream(20_000, 3_000)
    rate = 0.25
    kept = stream[sampled(stream, rate)]
    distances = np.array(cache_models.stack_distance(kept.tolist()))
    capacities = np.array([1, 10, 100, 400, 1000, 3000])
    # by hand: a sampled distance d stands for one spread evenly over [d, d + 1) / rate,
    # so it counts at capacity C by clip(C * rate - d, 0, 1); each sampled access stands
    # for 1 / rate, and the shortfall against the accesses seen goes to the distances
    # below 1 / rate (SHARDS-adj)
    shortfall = len(stream) - len(kept) / rate
    reused = distances[distances >= 0]
    expected = []
    for c in capacities:
        share = np.clip(c * rate - reused, 0, 1).sum()
        hits = round(share / rate + shortfall * min(1.0, c * rate))
        expected.append(min(len(stream), max(0, hits)))
    assert _estimate(stream, rate, capacities).tolist() == expected


def test_a_ten_percent_sample_of_a_long_stream_is_close_to_the_exact_curve():
    stream = _zipf_stream(400_000, 200_000)  # 118,000 distinct items: 11,800 sampled
    capacities = np.unique(np.linspace(1, 200_000, 50).astype(np.int64))
    exact = _estimate(stream, 1.0, capacities) / len(stream)
    estimate = _estimate(stream, 0.1, capacities) / len(stream)
    assert np.abs(exact - estimate).mean() < 0.005


def test_the_sample_is_the_same_items_whatever_the_chunks():
    stream = _zipf_stream(5_000, 500)
    whole = sampled(stream, 0.3)
    assert (
        np.concatenate([sampled(stream[:1234], 0.3), sampled(stream[1234:], 0.3)]) == whole
    ).all()
    assert set(stream[whole].tolist()).isdisjoint(stream[~whole].tolist())
    assert 0.2 < len(set(stream[whole].tolist())) / len(set(stream.tolist())) < 0.4


def test_sample_one_is_the_exact_curve(warehouse):
    _trace_together(warehouse)
    con = connect(warehouse)
    exact = con.sql("FROM dsa_hit_curve(4, 'lru', scope := 'run', sharing := 'content')").fetchall()
    same = con.sql(
        "FROM dsa_hit_curve(4, 'lru', scope := 'run', sharing := 'content', sample := 1)"
    ).fetchall()
    assert exact == same and exact


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("sample := 0", "the sample rate must lie in (0, 1], got 0.0"),
        ("sample := 1.5", "the sample rate must lie in (0, 1], got 1.5"),
        ("'fifo', sample := 0.5", "sampling (SHARDS) estimates LRU hit curves only"),
    ],
)
def test_bad_sample_settings_are_one_sentence(warehouse, arguments, message):
    _trace_together(warehouse)
    with pytest.raises(QueryError, match=re.escape(message)):
        run_query(connect(warehouse), f"FROM dsa_hit_curve(4, {arguments})")


def test_the_hit_curve_command_prints_the_rows_of_dsa_hit_curve(warehouse, cli):
    _trace_together(warehouse)
    status, out, err = cli(
        "-w",
        warehouse.location,
        "hit-curve",
        "--block-size",
        "4",
        "--sharing",
        "content",
        "--capacity",
        "5",
        "--format",
        "csv",
    )
    assert status == 0, err
    con = connect(warehouse)
    rows = con.sql(
        "SELECT capacity_blocks, hits, shared_hits FROM dsa_hit_curve(4, 'lru', "
        "scope := 'run', sharing := 'content', capacities := [5]) ORDER BY capacity_blocks"
    ).fetchall()
    printed = [line.split(",") for line in out.splitlines()[1:]]
    assert [(int(r[6]), int(r[8]), int(r[9])) for r in printed] == rows


@pytest.mark.parametrize("rate", ["0", "-0.5", "2"])
def test_a_sample_rate_outside_zero_to_one_exits_with_one_sentence(warehouse, cli, rate):
    _trace_together(warehouse)
    status, _, err = cli("-w", warehouse.location, "hit-curve", "--sample", rate)
    assert status != 0 and "the sample rate must lie in (0, 1]" in err
    assert "Traceback" not in err
