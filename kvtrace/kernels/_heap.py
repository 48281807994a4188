"""A binary min-heap of (key, item) pairs in two preallocated arrays, for the kernels
that evict by a key (Belady's next use, the radix tree's leaf order).  Stale entries are
the caller's to skip."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def heap_push(  # pragma: no cover
    keys: np.ndarray, items: np.ndarray, size: int, key: int, item: int
) -> int:
    """Push (key, item) onto the heap of ``size`` entries; the new size."""
    at = size
    keys[at], items[at] = key, item
    while at > 0:
        up = (at - 1) >> 1
        if keys[up] <= keys[at]:
            break
        keys[up], keys[at] = keys[at], keys[up]
        items[up], items[at] = items[at], items[up]
        at = up
    return size + 1


@njit(nogil=True, cache=True)
def heap_pop(  # pragma: no cover
    keys: np.ndarray, items: np.ndarray, size: int
) -> tuple[int, int, int]:
    """Pop the smallest key: (key, item, new size)."""
    key, item = keys[0], items[0]
    size -= 1
    keys[0], items[0] = keys[size], items[size]
    at = 0
    while True:
        low = 2 * at + 1
        if low >= size:
            break
        if low + 1 < size and keys[low + 1] < keys[low]:
            low += 1
        if keys[at] <= keys[low]:
            break
        keys[low], keys[at] = keys[at], keys[low]
        items[low], items[at] = items[at], items[low]
        at = low
    return key, item, size
