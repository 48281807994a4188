"""The cache kernels against brute-force simulations, for every capacity."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace.kernels.cache_sim import ItemIds, LruStack, TierCache, dense_ids
from kvtrace.kernels.capacity_sim import fifo_hits, opt_hits
from tests import cache_models

streams = st.lists(st.integers(min_value=0, max_value=12), min_size=1, max_size=80)


@settings(max_examples=150, deadline=None)
@given(streams, st.data())
def test_stack_distances_equal_the_definition_however_the_stream_is_cut(stream, data):
    keys = np.array(stream, dtype=np.int64) * 1_000_003  # sparse keys, not 0..n
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=3)))
    numbering, stack = ItemIds(), LruStack()
    parts = [stack.distances(numbering.ids(p)) for p in np.split(keys, cuts)]
    assert np.concatenate(parts).tolist() == cache_models.stack_distance(stream)
    assert stack.distinct == numbering.count == len(set(stream))


@settings(max_examples=100, deadline=None)
@given(streams, st.integers(0, 80))
def test_a_peek_reads_the_distance_an_access_would_have_and_changes_nothing(stream, at):
    ids = np.array(stream, dtype=np.int64)
    at = min(at, len(stream))
    stack = LruStack()
    stack.distances(ids[:at])
    peeked = stack.peek(np.arange(14))
    for item in range(14):
        expected = cache_models.stack_distance([*stream[:at], item])[-1]
        assert peeked[item] == expected
    assert stack.distances(ids[at:]).tolist() == cache_models.stack_distance(stream)[at:]


@settings(max_examples=150, deadline=None)
@given(streams)
def test_lru_fifo_and_opt_hits_equal_brute_force_at_every_capacity(stream):
    ids, distinct = dense_ids(np.array(stream) * 7919)
    distances = LruStack().distances(ids)
    assert distinct == len(set(stream))
    for capacity in range(1, distinct + 2):
        lru = (distances >= 0) & (distances < capacity)
        assert lru.tolist() == cache_models.lru_hits(stream, capacity)
        assert fifo_hits(ids, distinct, capacity).tolist() == cache_models.fifo_hits(
            stream, capacity
        )
        assert int(opt_hits(ids, distinct, capacity).sum()) == sum(
            cache_models.opt_hits(stream, capacity)
        )


@settings(max_examples=150, deadline=None)
@given(
    streams,
    st.lists(st.integers(1, 5), min_size=0, max_size=3),
    st.sampled_from(["fifo", "lru"]),
    st.data(),
)
def test_tiers_demote_and_promote_as_the_plain_simulation_does(stream, capacities, policy, data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=2)))
    cache = TierCache(capacities, lru=policy == "lru")
    ids = np.array(stream, dtype=np.int64)
    levels = np.concatenate([cache.access(part) for part in np.split(ids, cuts)])
    first = [i == stream.index(x) for i, x in enumerate(stream)]
    assert (levels < 0).tolist() == first
    served = np.where(levels < 0, len(capacities), levels)
    assert served.tolist() == cache_models.tiered_levels(stream, capacities, policy)
    # a peek says where each item is now: the level its next access would be served from
    expected = [
        cache_models.tiered_levels([*stream, item], capacities, policy)[-1]
        if item in stream
        else -1
        for item in range(14)
    ]
    assert cache.peek(np.arange(14)).tolist() == expected


def test_lru_tiers_simulated_live_are_the_stack_distance_tiers():
    rng = np.random.default_rng(5)
    stream = (rng.zipf(1.3, size=50_000) % 700).astype(np.int64)
    capacities = [16, 48, 100]
    live = TierCache(capacities, lru=True).access(stream)
    live[live < 0] = 3
    distances = LruStack().distances(stream)
    limits = np.cumsum(capacities)
    from_stack = np.where(distances < 0, 3, np.searchsorted(limits, distances, side="right"))
    assert (live == from_stack).all()


def test_long_streams_renumber_the_time_window_without_changing_a_distance():
    rng = np.random.default_rng(7)
    stream = rng.integers(0, 3000, size=300_000)  # several time windows
    stack = LruStack()
    distances = np.concatenate([stack.distances(part) for part in np.array_split(stream, 7)])
    for capacity in (1, 64, 1000, 2999, 3000):
        expected = cache_models.lru_hits(stream.tolist(), capacity)
        assert ((distances >= 0) & (distances < capacity)).tolist() == expected


def test_numbering_keeps_ids_across_calls_and_grows():
    numbering = ItemIds()
    keys = np.arange(100_000, dtype=np.int64) * 2**40 + 3
    first = numbering.ids(keys[::-1])
    assert first.tolist() == list(range(100_000))
    assert numbering.ids(keys[:3]).tolist() == [99_999, 99_998, 99_997]


def test_opt_never_hits_less_than_lru_or_fifo():
    rng = np.random.default_rng(3)
    stream = rng.zipf(1.5, size=20_000) % 500
    ids, distinct = dense_ids(stream)
    distances = LruStack().distances(ids)
    for capacity in (4, 32, 128):
        opt = opt_hits(ids, distinct, capacity).sum()
        assert opt >= ((distances >= 0) & (distances < capacity)).sum()
        assert opt >= fifo_hits(ids, distinct, capacity).sum()
