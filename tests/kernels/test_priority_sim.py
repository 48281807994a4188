"""The priority caches against plain simulations written from the policies' definitions,
one capacity at a time, on hand-made and generated streams."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace.kernels.priority_sim import (
    MODE_FREQUENCY,
    MODE_RECENCY,
    MODE_SCORE,
    MODE_WINDOW,
    PriorityCaches,
    Windows,
    priority_hits,
)
from tests import cache_models


def latest(stream: list[int], item: int, time: int) -> int:
    return max(t for t in range(time) if stream[t] == item)


def lfu(stream: list[int], capacity: int) -> list[bool]:
    """Fewest accesses since the start of the stream, then least recently used."""
    return cache_models.evicting(
        stream,
        capacity,
        lambda y, now: (stream[:now].count(y), latest(stream, y, now)),
    )


def lowest_score(stream: list[int], scores: list[float], capacity: int) -> list[bool]:
    """Lowest score at the item's latest access, then least recently used."""

    def rank(y: int, now: int) -> tuple[float, int]:
        at = latest(stream, y, now)
        return scores[at], at

    return cache_models.evicting(stream, capacity, rank)


def windowed(
    stream: list[int],
    steps: list[int],
    slots: list[int],
    windows: Windows,
    capacity: int,
) -> list[bool]:
    """Items in an active request's window (the window of its latest step so far, until
    a slot after its last) rank above the rest; then least recently used."""

    def protected(y: int, now: int) -> bool:
        newest: dict[int, int] = {}
        for t in range(now + 1):
            newest[int(windows.step_request[steps[t]])] = steps[t]
        for request, step in newest.items():
            if windows.end_slot[request] < slots[now] and len(windows.release_order):
                continue
            for block in range(windows.step_first[step], windows.step_last[step] + 1):
                block_item = windows.block_items[windows.offsets[request] + block]
                if block_item * windows.layers <= y < (block_item + 1) * windows.layers:
                    return True
        return False

    return cache_models.evicting(
        stream, capacity, lambda y, now: (protected(y, now), latest(stream, y, now))
    )


def all_capacities(caches: PriorityCaches, levels: np.ndarray, capacities: list[int]):
    """Hits at each capacity from the levels the caches returned."""
    return {c: ((levels >= 0) & (levels <= k)).tolist() for k, c in enumerate(capacities)}


streams = st.lists(st.integers(0, 7), min_size=0, max_size=60)


def test_hand_worked_lfu():
    # capacity 2: 0 0 1 fill it; 2 evicts 1 (one access against 0's two); 1 evicts 2
    # (one access against 0's two); 0 hits
    stream = [0, 0, 1, 2, 1, 0]
    assert priority_hits(np.array(stream), 3, 2, MODE_FREQUENCY).tolist() == lfu(stream, 2)
    assert lfu(stream, 2) == [False, True, False, False, False, True]


@settings(max_examples=150, deadline=None)
@given(streams, st.integers(0, 10))
def test_recency_is_lru(stream, capacity):
    ids = np.array(stream, dtype=np.int64)
    assert priority_hits(ids, 8, capacity, MODE_RECENCY).tolist() == cache_models.lru_hits(
        stream, capacity
    )


@settings(max_examples=150, deadline=None)
@given(streams)
def test_frequency_at_every_capacity_at_once(stream):
    capacities = [1, 2, 3, 5, 8, 9]
    caches = PriorityCaches(8, np.array(capacities), MODE_FREQUENCY)
    half = len(stream) // 2  # fed in two pieces
    levels = np.concatenate(
        [caches.access(np.array(stream[:half])), caches.access(np.array(stream[half:]))]
    )
    for capacity, hits in all_capacities(caches, levels, capacities).items():
        assert hits == lfu(stream, capacity), capacity


@settings(max_examples=150, deadline=None)
@given(streams.flatmap(lambda s: st.tuples(st.just(s), st.lists(
    st.sampled_from([0.0, 0.5, 1.0, -2.0]), min_size=len(s), max_size=len(s)))))  # fmt: skip
def test_lowest_score_at_every_capacity(pair):
    stream, scores = pair
    capacities = [1, 2, 4, 7]
    caches = PriorityCaches(8, np.array(capacities), MODE_SCORE)
    levels = caches.access(np.array(stream, dtype=np.int64), np.array(scores))
    for capacity, hits in all_capacities(caches, levels, capacities).items():
        assert hits == lowest_score(stream, scores, capacity), capacity
    assert priority_hits(np.array(stream), 8, 0, MODE_SCORE, np.array(scores)).sum() == 0


@st.composite
def windowed_streams(draw):
    """Two or three requests of a few steps each, their blocks named in a pool (shared
    by some), interleaved by slot; each step reads some of its request's blocks."""
    requests = draw(st.integers(1, 3))
    blocks = [draw(st.integers(1, 4)) for _ in range(requests)]
    offsets = np.concatenate(([0], np.cumsum(blocks))).astype(np.int64)
    pool = draw(st.integers(2, 6))
    block_items = np.array(
        [draw(st.integers(0, pool - 1)) for _ in range(int(offsets[-1]))], dtype=np.int64
    )
    layers = draw(st.integers(1, 2))
    step_request, step_first, step_last, step_slot = [], [], [], []
    for r in range(requests):
        start = draw(st.integers(0, 3))
        for k in range(draw(st.integers(1, 3))):
            last = draw(st.integers(0, blocks[r] - 1))
            step_request.append(r)
            step_first.append(draw(st.integers(0, last + 1)))  # last + 1: no window
            step_last.append(last)
            step_slot.append(start + k)
    order = sorted(range(len(step_request)), key=lambda s: (step_slot[s], step_request[s]))
    stream, steps, slots = [], [], []
    for s in order:
        r = step_request[s]
        for block in sorted(draw(st.sets(st.integers(0, blocks[r] - 1), max_size=3))):
            for layer in range(layers):
                stream.append(int(block_items[offsets[r] + block]) * layers + layer)
                steps.append(s)
                slots.append(step_slot[s])
    end_slot = np.zeros(requests, dtype=np.int64)
    for s, r in enumerate(step_request):
        end_slot[r] = max(end_slot[r], step_slot[s])
    windows = Windows(
        np.array(step_request, dtype=np.int64),
        np.array(step_first, dtype=np.int64),
        np.array(step_last, dtype=np.int64),
        offsets,
        block_items,
        layers,
        end_slot,
        np.argsort(end_slot, kind="stable"),
    )
    return stream, steps, slots, windows, pool * layers


@settings(max_examples=200, deadline=None)
@given(windowed_streams())
def test_the_window_at_every_capacity(case):
    stream, steps, slots, windows, n_items = case
    capacities = [1, 2, 3, 5, 12]
    caches = PriorityCaches(n_items, np.array(capacities), MODE_WINDOW, windows)
    levels = caches.access(np.array(stream, np.int64), None, np.array(steps), np.array(slots))
    ceiling = len(stream) - len(set(stream))
    for capacity, hits in all_capacities(caches, levels, capacities).items():
        assert hits == windowed(stream, steps, slots, windows, capacity), capacity
        assert sum(hits) <= sum(cache_models.opt_hits(stream, capacity)) <= ceiling


def test_a_window_larger_than_the_cache_keeps_its_most_recent_blocks():
    # one request, window = blocks 0..3 at every step, capacity 2: the window alone
    # exceeds the cache, so its blocks are evicted least recently used first, as LRU
    windows = Windows(
        np.zeros(4, np.int64),
        np.zeros(4, np.int64),
        np.full(4, 3, np.int64),
        np.zeros(1, np.int64),
        np.arange(4, dtype=np.int64),
        1,
        np.full(1, 3, np.int64),
        np.zeros(0, np.int64),
    )
    stream = [0, 1, 2, 0, 1, 3]
    steps = [0, 0, 1, 2, 2, 3]
    caches = PriorityCaches(4, np.array([2]), MODE_WINDOW, windows)
    levels = caches.access(np.array(stream), None, np.array(steps), np.array(steps))
    assert (levels == 0).tolist() == cache_models.lru_hits(stream, 2)


@pytest.mark.parametrize("mode", [MODE_RECENCY, MODE_FREQUENCY, MODE_SCORE])
def test_a_capacity_past_the_stream_misses_first_touches_only(mode):
    stream = np.array([3, 1, 3, 2, 1, 0, 3], dtype=np.int64)
    hits = priority_hits(stream, 4, 10, mode, np.ones(len(stream)))
    assert hits.tolist() == [False, False, True, False, True, False, True]


@settings(max_examples=100, deadline=None)
@given(streams, st.integers(1, 9))
def test_opt_bounds_every_policy(stream, capacity):
    ids = np.array(stream, dtype=np.int64)
    best = sum(cache_models.opt_hits(stream, capacity))
    ceiling = len(stream) - len(set(stream))
    for mode in (MODE_RECENCY, MODE_FREQUENCY, MODE_SCORE):
        found = int(priority_hits(ids, 8, capacity, mode, np.arange(len(ids)) % 3).sum())
        assert found <= best <= ceiling
