"""The offset histogram's compiled pass against counting each row in plain Python."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace.kernels.offset_counts import offset_counts

rows_with_lengths = st.lists(
    st.integers(1, 3_000).flatmap(
        lambda seq_len: st.tuples(
            st.just(seq_len), st.lists(st.integers(0, seq_len - 1), max_size=30, unique=True)
        )
    ),
    max_size=10,
)


@settings(deadline=None)  # the first example loads the compiled pass
@given(rows_with_lengths)
def test_offsets_are_counted_as_each_row_counts_them(rows):
    values = np.array([p for _, positions in rows for p in positions], dtype=np.int32)
    offsets = np.cumsum([0, *(len(positions) for _, positions in rows)]).astype(np.int64)
    seq_len = np.array([seq_len for seq_len, _ in rows], dtype=np.int64)
    expected = Counter(s - 1 - p for s, positions in rows for p in positions)
    counts = offset_counts(values, offsets, seq_len)
    assert len(counts) == (max(expected) + 1 if expected else 0)
    assert {o: int(n) for o, n in enumerate(counts) if n} == dict(expected)


def test_a_position_past_its_sequence_is_refused():
    with pytest.raises(ValueError, match="sequence length"):
        offset_counts(np.array([5], np.int32), np.array([0, 1]), np.array([5]))
