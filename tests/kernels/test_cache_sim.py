"""The cache kernels against brute-force simulations, for every capacity."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace.kernels.cache_sim import LruStack, dense_ids, fifo_hits, opt_hits
from tests import cache_models

streams = st.lists(st.integers(min_value=0, max_value=12), min_size=1, max_size=80)


@settings(max_examples=150, deadline=None)
@given(streams, st.data())
def test_stack_distances_equal_the_definition_however_the_stream_is_cut(stream, data):
    keys = np.array(stream, dtype=np.int64) * 1_000_003  # sparse keys, not 0..n
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=3)))
    stack = LruStack()
    got = np.concatenate([stack.distances(part) for part in np.split(keys, cuts)])
    assert got.tolist() == cache_models.stack_distance(stream)
    assert stack.distinct == len(set(stream))


@settings(max_examples=150, deadline=None)
@given(streams)
def test_lru_fifo_and_opt_hits_equal_brute_force_at_every_capacity(stream):
    distances = LruStack().distances(np.array(stream))
    ids, distinct = dense_ids(np.array(stream))
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


def test_long_streams_renumber_the_time_window_without_changing_a_distance():
    rng = np.random.default_rng(7)
    stream = rng.integers(0, 3000, size=300_000)  # several windows, a growing hash table
    stack = LruStack()
    distances = np.concatenate([stack.distances(part) for part in np.array_split(stream, 7)])
    for capacity in (1, 64, 1000, 2999, 3000):
        expected = cache_models.lru_hits(stream.tolist(), capacity)
        assert ((distances >= 0) & (distances < capacity)).tolist() == expected


def test_opt_never_hits_less_than_lru_or_fifo():
    rng = np.random.default_rng(3)
    stream = rng.zipf(1.5, size=20_000) % 500
    ids, distinct = dense_ids(stream)
    distances = LruStack().distances(stream)
    for capacity in (4, 32, 128):
        opt = opt_hits(ids, distinct, capacity).sum()
        assert opt >= ((distances >= 0) & (distances < capacity)).sum()
        assert opt >= fifo_hits(ids, distinct, capacity).sum()
