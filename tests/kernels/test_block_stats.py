"""Per-row block statistics against a row-at-a-time computation in plain Python."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kvtrace.kernels.block_stats import (
    PositionLists,
    block_stats,
    blocks_below,
    prefix_block_lists,
    touched_blocks,
)

rows_of_positions = st.lists(
    st.lists(st.integers(0, 5_000), max_size=40, unique=True).map(sorted), max_size=12
)


def _lists(rows: list[list[int]]) -> PositionLists:
    offsets = np.cumsum([0, *map(len, rows)]).astype(np.int64)
    return PositionLists(np.array([p for row in rows for p in row], dtype=np.int64), offsets)


def _linear_quantile(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    h = (len(values) - 1) * q
    low = int(h)
    high = min(low + 1, len(values) - 1)
    return values[low] + (h - low) * (values[high] - values[low])


@given(rows_of_positions, st.sampled_from([1, 4, 16, 64, 1024]))
def test_tokens_per_block_match_counting_each_row(rows, block_size):
    # block size 1 and 4 keep the counts small (counted per row); 1024 over few positions
    # makes the table of counts larger than the runs (sorted instead): both ways are met
    stats = block_stats(_lists(rows), np.full(len(rows), 5_001), block_size)
    for i, row in enumerate(rows):
        tokens = sorted(Counter(p // block_size for p in row).values())
        start = stats.run_offsets[i]
        assert stats.tokens_by_row[start : start + len(tokens)].tolist() == tokens
        assert stats.unique_blocks[i] == len(tokens)
        for q, found in ((0.5, stats.tokens_per_block_p50), (0.95, stats.tokens_per_block_p95)):
            np.testing.assert_allclose(found[i], _linear_quantile(tokens, q), equal_nan=True)


def test_counts_too_large_to_tabulate_are_sorted_the_same():
    # 6,000 positions in one block of 8,192 beside small rows: a table of counts per row
    # would hold 6,001 entries a row, so the runs are sorted instead
    rows = [list(range(6_000)), [], [3, 9_000], [8_191, 8_192, 8_193]]
    stats = block_stats(_lists(rows), np.full(len(rows), 20_000), 8_192)
    assert stats.tokens_by_row.tolist() == [6_000, 1, 1, 1, 2]
    assert stats.run_offsets.tolist() == [0, 1, 1, 3]
    np.testing.assert_allclose(stats.tokens_per_block_p50, [6_000, np.nan, 1, 1.5])


@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 5_000), max_size=40, unique=True).map(sorted),
            st.sampled_from([1, 3, 16, 64]),  # a block size per row
            st.none() | st.integers(-2, 200),  # the prefix region in blocks (None: NaN)
        ),
        max_size=12,
    )
)
def test_prefix_blocks_from_the_touched_blocks_are_those_from_the_positions(rows):
    lists = _lists([positions for positions, _, _ in rows])
    size = np.array([size for _, size, _ in rows], dtype=np.int64)
    region = np.array([np.nan if r is None else r for _, _, r in rows], dtype=np.float64)
    expected = [
        [] if r is None else sorted({p // s for p in positions if p // s < r})
        for positions, s, r in rows
    ]
    for found in (
        blocks_below(touched_blocks(lists, size), region),
        prefix_block_lists(lists, region, size),
    ):
        pairs = pairwise(found.offsets)
        assert [found.values[a:b].tolist() for a, b in pairs] == expected
