"""The compiled row scan against a plain per-row reading of the same lists."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace.kernels.block_stats import PositionLists, sort_lists
from kvtrace.kernels.list_checks import scan_rows

rows_strategy = st.lists(
    st.tuples(st.lists(st.integers(-3, 40), max_size=12), st.integers(1, 40)), max_size=8
)


def _lists(rows: list[tuple[list[int], int]]) -> tuple[PositionLists, np.ndarray]:
    values = np.array([v for positions, _ in rows for v in positions], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum([len(p) for p, _ in rows]))).astype(np.int64)
    seq_len = np.array([s for _, s in rows], dtype=np.int64)
    return PositionLists(values, offsets), seq_len


@settings(max_examples=200, deadline=None)
@given(rows_strategy)
def test_scan_matches_a_per_row_reading(rows):
    lists, seq_len = _lists(rows)
    outside, unsorted, repeated = scan_rows(lists.values, lists.offsets, seq_len)
    for i, (positions, limit) in enumerate(rows):
        assert outside[i] == any(p < 0 or p >= limit for p in positions)
        assert unsorted[i] == any(b < a for a, b in pairwise(positions))
        if not unsorted[i]:
            assert repeated[i] == (len(set(positions)) < len(positions))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 40), max_size=12), max_size=8))
def test_sorting_flags_every_row_with_a_repeat(rows):
    lists, _ = _lists([(r, 41) for r in rows])
    lists = PositionLists(lists.values.astype(np.int32), lists.offsets)
    scores = np.arange(len(lists.values), dtype=np.float64)
    ordered, permuted, repeated = sort_lists(lists, scores)
    for i, positions in enumerate(rows):
        start, stop = ordered.offsets[i], ordered.offsets[i + 1]
        assert ordered.values[start:stop].tolist() == sorted(positions)
        assert repeated[i] == (len(set(positions)) < len(positions))
        originals = permuted[start:stop].astype(int)  # scores follow their positions
        assert [lists.values[j] for j in originals] == sorted(positions)
