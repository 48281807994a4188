"""Each access's score and sub-block tokens against a plain reading of the definitions,
in the order the access stream emits the accesses."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace.kernels.access_values import access_scores, access_subblock_tokens

SIZES = np.array([1, 3, 4, 8, 32], dtype=np.int64)


def _flat(rows: list[list], dtype=np.int64) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.concatenate(([0], np.cumsum([len(r) for r in rows]))).astype(np.int64)
    values = np.array([v for r in rows for v in r], dtype=dtype)
    return values, offsets


def _groups(rows, group_start, merge):
    """The ordered rows' groups: a step's rows merged, or each row alone."""
    groups: list[list[int]] = []
    for k in range(len(rows)):
        if not groups or group_start[k] or not merge:
            groups.append([])
        groups[-1].append(k)
    return groups


def _expected(rows, scores, group_start, merge, block_size):
    found_scores, found_tokens = [], []
    for group in _groups(rows, group_start, merge):
        blocks = sorted({p // block_size for k in group for p in rows[k]})
        for block in blocks:
            found_scores.append(
                max(
                    s
                    for k in group
                    for p, s in zip(rows[k], scores[k], strict=True)
                    if p // block_size == block
                )
            )
            tokens = []
            for size in SIZES.tolist():
                moved = 0
                for k in group:
                    subs = {
                        (p - block * block_size) // size
                        for p in rows[k]
                        if p // block_size == block
                    }
                    moved += sum(min(size, block_size - s * size) for s in subs)
                tokens.append(moved)
            found_tokens.append(tokens)
    return found_scores, found_tokens


@st.composite
def steps(draw):
    rows = [
        sorted(draw(st.sets(st.integers(0, 63), min_size=1, max_size=9)))
        for _ in range(draw(st.integers(1, 6)))
    ]
    scores = [[draw(st.sampled_from([-1.0, 0.0, 0.5, 2.0])) for _ in r] for r in rows]
    group_start = [True] + [draw(st.booleans()) for _ in rows[1:]]
    return rows, scores, group_start, draw(st.booleans()), draw(st.sampled_from([4, 6, 16]))


@settings(max_examples=200, deadline=None)
@given(steps())
def test_scores_and_subblock_tokens_by_the_definitions(case):
    rows, scores, group_start, merge, block_size = case
    values, offsets = _flat(rows)
    score_values, _ = _flat(scores, np.float64)
    order = np.arange(len(rows), dtype=np.int64)
    starts = np.array(group_start, dtype=np.bool_)
    widest = 64 // block_size + 1
    out = np.empty(len(values))
    n = access_scores(
        values,
        score_values,
        offsets,
        order,
        starts,
        block_size,
        widest,
        merge,
        out,
    )
    tokens = np.empty((len(values), len(SIZES)), dtype=np.int64)
    m = access_subblock_tokens(
        values, offsets, order, starts, block_size, widest, merge, SIZES, tokens
    )
    want_scores, want_tokens = _expected(rows, scores, group_start, merge, block_size)
    assert n == m == len(want_scores)
    assert out[:n].tolist() == want_scores
    assert tokens[:m].tolist() == want_tokens


def test_the_guides_worked_example():
    # B = 16; layer 0 selects {3, 5, 20, 21, 22}, layer 1 {40}: blocks 0, 1, 2
    values, offsets = _flat([[3, 5, 20, 21, 22], [40]])
    tokens = np.empty((3, 3), dtype=np.int64)
    sizes = np.array([1, 4, 8], dtype=np.int64)
    n = access_subblock_tokens(
        values, offsets, np.arange(2), np.array([True, False]), 16, 4, True, sizes, tokens
    )
    assert n == 3
    assert tokens.sum(axis=0).tolist() == [6, 16, 24]
