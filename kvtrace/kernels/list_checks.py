"""One compiled pass over a batch of position lists: range, order and repeats per row.

Ingest checks every row of every batch; NumPy needs several full-size temporaries for
this (row ids, repeated sequence lengths, neighbour comparisons), while one loop reads
each position once.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def scan_rows(
    values: np.ndarray, offsets: np.ndarray, seq_len: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each row: a position outside ``[0, seq_len)``; not ascending; a position
    equal to its neighbour (a repeat, exact for ascending rows)."""
    rows = len(offsets) - 1
    outside = np.zeros(rows, dtype=np.bool_)
    unsorted = np.zeros(rows, dtype=np.bool_)
    repeated = np.zeros(rows, dtype=np.bool_)
    for row in range(rows):
        start, stop = offsets[row], offsets[row + 1]
        if start == stop:
            continue
        low = high = previous = int(values[start])
        descents = 0
        repeats = 0
        for i in range(start + 1, stop):
            value = int(values[i])
            descents += value < previous
            repeats += value == previous
            low = min(low, value)
            high = max(high, value)
            previous = value
        outside[row] = low < 0 or high >= seq_len[row]
        unsorted[row] = descents > 0
        repeated[row] = repeats > 0
    return outside, unsorted, repeated
