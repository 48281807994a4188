"""One cache capacity over a whole stream of dense item ids (`kvtrace.kernels.cache_sim`
numbers them): which accesses FIFO and OPT hit.

OPT (Belady's MIN) evicts the cached item whose next use lies furthest ahead: no online
policy hits more.  Next uses are computed once per stream, int32 below a billion
accesses, and the eviction heap keeps them alone (minus each cached item's next use),
with room for twice the cached items.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["fifo_hits", "opt_hits", "sift_down", "sift_up"]


@njit(nogil=True, cache=True)
def _fifo(  # pragma: no cover
    ids: np.ndarray, n_items: int, capacity: int, ring: np.ndarray
) -> np.ndarray:
    """``ring`` holds ``min(capacity, n_items)`` items: a cache larger than every item
    never evicts, so its ring never wraps."""
    hits = np.zeros(len(ids), dtype=np.bool_)
    cached = np.zeros(n_items, dtype=np.bool_)
    head = 0
    size = 0
    for i in range(len(ids)):
        x = ids[i]
        if cached[x]:
            hits[i] = True
            continue
        if size == capacity:
            cached[ring[head]] = False
            ring[head] = x
            head = (head + 1) % capacity
        else:
            ring[(head + size) % capacity] = x
            size += 1
        cached[x] = True
    return hits


def fifo_hits(ids: np.ndarray, n_items: int, capacity: int) -> np.ndarray:
    """Which accesses of dense ``ids`` (any integer type) a FIFO cache of ``capacity``
    items hits."""
    ids = np.ascontiguousarray(ids)
    ring = np.empty(min(capacity, n_items), dtype=ids.dtype)
    hits: np.ndarray = _fifo(ids, n_items, capacity, ring)
    return hits


@njit(nogil=True, cache=True)
def _next_uses(  # pragma: no cover
    ids: np.ndarray, seen: np.ndarray, following: np.ndarray
) -> None:
    """Each access's next use of its item (its index), ``n + i`` when there is none, so
    that no two accesses share one; ``seen`` (one per item) comes filled with -1."""
    n = len(ids)
    for i in range(n - 1, -1, -1):
        x = ids[i]
        following[i] = seen[x] if seen[x] >= 0 else n + i
        seen[x] = i


@njit(inline="always", cache=True)
def sift_up(heap: np.ndarray, at: int, key: int) -> None:  # pragma: no cover
    """Place ``key`` at or above position ``at`` of a min-heap."""
    while at > 0:
        up = (at - 1) >> 1
        if heap[up] <= key:
            break
        heap[at] = heap[up]
        at = up
    heap[at] = key


@njit(inline="always", cache=True)
def sift_down(heap: np.ndarray, size: int, at: int, key: int) -> None:  # pragma: no cover
    """Place ``key`` at or below position ``at`` of a min-heap of ``size`` keys."""
    while True:
        low = 2 * at + 1
        if low >= size:
            break
        if low + 1 < size and heap[low + 1] < heap[low]:
            low += 1
        if key <= heap[low]:
            break
        heap[at] = heap[low]
        at = low
    heap[at] = key


@njit(inline="always", cache=True)
def _item_of(key: int, ids: np.ndarray) -> int:  # pragma: no cover
    """The item of an OPT heap key: minus the access that uses it next (``n + i`` for
    access i when none does)."""
    use = -key
    item: int = ids[use - len(ids)] if use >= len(ids) else ids[use]
    return item


@njit(inline="always", cache=True)
def _evict_furthest(  # pragma: no cover
    heap: np.ndarray, heaped: int, now: int, ids: np.ndarray, cached: np.ndarray
) -> int:
    """Uncache the item of the first current entry popped; the heap's new size."""
    while True:
        top = heap[0]
        heaped -= 1
        sift_down(heap, heaped, 0, heap[heaped])
        if -top > now and cached[_item_of(top, ids)]:
            cached[_item_of(top, ids)] = False
            return heaped


@njit(inline="always", cache=True)
def _drop_stale(  # pragma: no cover
    heap: np.ndarray, heaped: int, now: int, ids: np.ndarray, cached: np.ndarray
) -> int:
    """Keep the current entries, heaped again in place; their number."""
    kept = 0
    for k in range(heaped):
        key = heap[k]
        if -key > now and cached[_item_of(key, ids)]:
            heap[kept] = key
            kept += 1
    for k in range((kept >> 1) - 1, -1, -1):
        sift_down(heap, kept, k, heap[k])
    return kept


@njit(nogil=True, cache=True)
def _opt(  # pragma: no cover
    ids: np.ndarray, following: np.ndarray, n_items: int, capacity: int, heap: np.ndarray
) -> np.ndarray:
    """The heap holds minus the next use of cached items (the one used again last on
    top).  An entry is current while its next use lies ahead and its item is cached (an
    item is not cached again before its next use), so no per-item state is kept; when
    the heap fills, the stale entries are dropped (each item has one current entry)."""
    hits = np.zeros(len(ids), dtype=np.bool_)
    cached = np.zeros(n_items, dtype=np.bool_)
    heaped = 0
    size = 0
    for i in range(len(ids)):
        x = ids[i]
        if cached[x]:
            hits[i] = True
        elif size == capacity:
            heaped = _evict_furthest(heap, heaped, i, ids, cached)
        else:
            size += 1
        cached[x] = True
        if heaped == len(heap):
            heaped = _drop_stale(heap, heaped, i, ids, cached)
        sift_up(heap, heaped, -following[i])
        heaped += 1
    return hits


def opt_hits(ids: np.ndarray, n_items: int, capacity: int) -> np.ndarray:
    """Which accesses of dense ``ids`` (any integer type) Belady's OPT hits with
    ``capacity`` items.  Next uses and heap keys are int32 below a billion accesses."""
    ids = np.ascontiguousarray(ids)
    wide = np.int32 if 2 * len(ids) < 2**31 else np.int64
    following = np.empty(len(ids), dtype=wide)
    _next_uses(ids, np.full(n_items, -1, dtype=wide), following)
    heap = np.empty(2 * min(capacity, n_items) + 1, dtype=wide)
    hits: np.ndarray = _opt(ids, following, n_items, capacity, heap)
    return hits
