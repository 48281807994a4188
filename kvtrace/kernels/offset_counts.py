"""One compiled pass that counts the offsets of a batch of position lists.

The offset histogram of DSA ingest counts, over every selected position, how far it lies
behind the current token: ``seq_len - 1 - position``.  NumPy needs two full-size
temporaries for this (each row's ``seq_len`` repeated, then the differences) before
counting; the loop reads each position once and counts it at once.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def offset_counts(values: np.ndarray, offsets: np.ndarray, seq_len: np.ndarray) -> np.ndarray:
    """Counts of ``seq_len[row] - 1 - position`` over every position of every row
    (index: the offset; as long as the largest offset + 1, empty when there is no
    position).  Positions must lie in ``[0, seq_len[row])``."""
    rows = len(offsets) - 1
    largest = -1
    for row in range(rows):
        last = seq_len[row] - 1
        for i in range(offsets[row], offsets[row + 1]):
            offset = last - values[i]
            if offset < 0:
                raise ValueError("a position at or after its row's sequence length")
            largest = max(largest, offset)
    counts = np.zeros(largest + 1, dtype=np.int64)
    for row in range(rows):
        last = seq_len[row] - 1
        for i in range(offsets[row], offsets[row + 1]):
            counts[last - values[i]] += 1
    return counts
