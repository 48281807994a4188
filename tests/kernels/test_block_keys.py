"""Content keys: equal exactly when the content up to the block's end is equal."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace.kernels.block_keys import (
    CONTENT_BIT,
    chained_block_keys,
    layer_item_keys,
    prefix_block_keys,
)


def _flat(requests: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.concatenate(([0], np.cumsum([len(r) for r in requests])))
    tokens = np.array([t for r in requests for t in r], dtype=np.int64)
    return tokens, offsets


# Requests built from a few shared stems, so that prefixes agree often.
_requests = st.lists(
    st.tuples(st.integers(0, 2), st.lists(st.integers(0, 3), max_size=24)),
    min_size=1,
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(_requests, st.sampled_from([1, 2, 4, 16]))
def test_keys_are_equal_exactly_when_the_tokens_up_to_the_block_end_are(stems, block_size):
    stem_tokens = {0: [7] * 8, 1: [7] * 4 + [9] * 4, 2: []}
    requests = [stem_tokens[stem] + tail for stem, tail in stems]
    keys, offsets = chained_block_keys(*_flat(requests), block_size)
    named = {}
    for r, tokens in enumerate(requests):
        full = len(tokens) // block_size
        assert offsets[r + 1] - offsets[r] == full
        for j in range(full):
            content = tuple(tokens[: (j + 1) * block_size])
            key = int(keys[offsets[r] + j])
            assert key & int(CONTENT_BIT) and key >= 0
            named.setdefault(content, set()).add(key)
    # one key per content, and different contents never share one
    assert all(len(k) == 1 for k in named.values())
    assert len({next(iter(k)) for k in named.values()}) == len(named)


def test_the_same_block_content_after_different_parents_is_another_block():
    keys, _ = chained_block_keys(*_flat([[1, 2, 5, 6], [3, 4, 5, 6]]), 2)
    assert keys[1] != keys[3]


def test_prefix_keys_name_the_prefix_key_and_block_index():
    keys = prefix_block_keys(["a", None, "a", "b"], np.array([2, 5, 3, 1]))
    a0, a1, a0_again, a1_again, a2, b0 = keys.tolist()
    assert (a0, a1) == (a0_again, a1_again) and len({a0, a1, a2, b0}) == 4
    layered = layer_item_keys(np.array([a0, a0, a1]), np.array([0, 1, 0]))
    assert len(set(layered.tolist())) == 3 and all(k & int(CONTENT_BIT) for k in layered)
