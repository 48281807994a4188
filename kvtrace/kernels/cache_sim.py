"""Cache simulation over a stream of item keys: LRU stack distances, FIFO and OPT hits.

An item key is any non-negative int64 (the callers pack request, layer and block into
one).  The stream is processed in order; the first access of an item is a cold miss.

- `LruStack` gives every access its LRU stack distance: the number of distinct other
  items touched since the item's last access, or -1 for a first touch.  An LRU cache of
  capacity C hits exactly the accesses with ``0 <= distance < C`` (Mattson et al., 1970),
  so one pass answers every capacity.  It keeps state between calls, so a long stream can
  be fed in pieces.
- `fifo_hits` and `opt_hits` simulate one capacity over a whole stream.  OPT (Belady's
  MIN) evicts the cached item whose next use lies furthest ahead: no online policy hits
  more.

How the stack distance is computed: a Fenwick tree over time holds a 1 at the time of
each item's most recent access.  The distance of an access whose item was last seen at
time p is the number of 1s after p.  Each access costs one prefix query and two updates,
O(log T).  The loop is inherently sequential (every answer depends on all updates before
it), which NumPy cannot vectorise, so it is compiled with numba.  The tree covers a window
of time slots; when the window is used up, the live marks are renumbered 1..D (D distinct
items) and the tree rebuilt, so memory grows with the distinct items, not the stream.
Last-access times live in an open-addressing hash table keyed by the item.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_EMPTY = -1
_MIN_SLOTS = 1 << 16


@njit(inline="always", cache=True)
def _hash_slot(key: int, mask: int) -> int:
    h = key ^ (key >> 31)
    h = h * 0x2545F4914F6CDD1D
    h ^= h >> 29
    return h & mask


@njit(inline="always", cache=True)
def _popcount(word: np.uint64) -> np.int64:
    x = np.uint64(word)
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(cache=True)
def _lru_pass(  # pragma: no cover
    keys: np.ndarray,
    start: int,
    out: np.ndarray,
    table: np.ndarray,
    bits: np.ndarray,
    tree: np.ndarray,
    state: np.ndarray,
) -> int:
    """Distances of ``keys[start:]`` until the time window or the hash table is full.

    ``table`` interleaves (key, last access time) pairs; ``bits`` has a bit per time slot
    (set: the last access of a live item) and ``tree`` is a Fenwick tree over the set
    bits of each *completed* 64-slot word (the word being filled is counted from its
    bits alone, and enters the tree when it is complete).  ``state`` holds [now, live];
    returns the index of the first access not processed.
    """
    now, live = state[0], state[1]
    slots = 64 * len(bits)
    words = len(tree) - 1
    mask = len(table) // 2 - 1
    max_live = len(table) // 4
    i = start
    n = len(keys)
    while i < n and now < slots and live < max_live:
        key = keys[i]
        s = _hash_slot(key, mask)
        while table[2 * s] != _EMPTY and table[2 * s] != key:
            s = (s + 1) & mask
        current = now >> 6
        if table[2 * s] == _EMPTY:
            table[2 * s] = key
            live += 1
            out[i] = -1
        else:
            p = table[2 * s + 1]
            word = p >> 6
            # marks after p: the rest of p's word, and every later word
            after = _popcount(bits[word] & (-1 << (p & 63))) - 1
            bits[word] &= ~(1 << (p & 63))
            if word != current:
                later = live  # minus the marks up to p's word = the marks after it
                j = word + 1
                while j > 0:
                    later -= tree[j]
                    j -= j & -j
                after += later  # the tree's marks after p's word, plus the current word's
                j = word + 1
                while j <= words:
                    tree[j] -= 1
                    j += j & -j
            out[i] = after
        table[2 * s + 1] = now
        bits[current] |= 1 << (now & 63)
        now += 1
        if now & 63 == 0:  # the word is complete: its marks enter the tree
            count = _popcount(bits[current])
            j = current + 1
            while j <= words:
                tree[j] += count
                j += j & -j
        i += 1
    state[0], state[1] = now, live
    return i


@njit(cache=True)
def _renumber(table: np.ndarray, bits: np.ndarray, tree: np.ndarray) -> int:  # pragma: no cover
    """Give the live marks times 0..D-1 in their order; rebuild ``bits`` and ``tree``
    (both zeros on entry) with the completed words in the tree.  Returns D."""
    used = np.flatnonzero(table[0::2] != _EMPTY)
    order = np.argsort(table[2 * used + 1])
    for rank in range(len(order)):
        table[2 * used[order[rank]] + 1] = rank
        bits[rank >> 6] |= 1 << (rank & 63)
    words = len(tree) - 1
    completed = len(used) >> 6
    for j in range(1, words + 1):
        if j - 1 < completed:
            tree[j] += _popcount(bits[j - 1])
        parent = j + (j & -j)
        if parent <= words:
            tree[parent] += tree[j]
    return len(used)


@njit(cache=True)
def _rehash(old: np.ndarray, new: np.ndarray) -> None:  # pragma: no cover
    mask = len(new) // 2 - 1
    for s in range(len(old) // 2):
        key = old[2 * s]
        if key == _EMPTY:
            continue
        t = _hash_slot(key, mask)
        while new[2 * t] != _EMPTY:
            t = (t + 1) & mask
        new[2 * t] = key
        new[2 * t + 1] = old[2 * s + 1]


def _next_power_of_two(n: int) -> int:
    return 1 << max(int(n) - 1, 1).bit_length()


class LruStack:
    """LRU stack distances of a stream fed in pieces (see the module docstring)."""

    def __init__(self) -> None:
        self._table = np.full(2 << 12, _EMPTY, dtype=np.int64)
        self._bits = np.zeros(_MIN_SLOTS // 64, dtype=np.int64)
        self._tree = np.zeros(_MIN_SLOTS // 64 + 1, dtype=np.int64)
        self._state = np.zeros(2, dtype=np.int64)  # now, live

    @property
    def distinct(self) -> int:
        """Distinct items seen so far."""
        return int(self._state[1])

    def distances(self, keys: np.ndarray) -> np.ndarray:
        """The stack distance of each access of ``keys`` (-1 for a first touch)."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        out = np.empty(len(keys), dtype=np.int64)
        done = 0
        while True:
            done = _lru_pass(keys, done, out, self._table, self._bits, self._tree, self._state)
            if done == len(keys):
                return out
            live = int(self._state[1])
            if live >= len(self._table) // 4:
                grown = np.full(4 * len(self._table), _EMPTY, dtype=np.int64)
                _rehash(self._table, grown)
                self._table = grown
            if self._state[0] >= 64 * len(self._bits):
                slots = max(_MIN_SLOTS, _next_power_of_two(4 * (live + 1)))
                self._bits = np.zeros(slots // 64, dtype=np.int64)
                self._tree = np.zeros(slots // 64 + 1, dtype=np.int64)
                self._state[0] = _renumber(self._table, self._bits, self._tree)


@njit(cache=True)
def _dense(  # pragma: no cover
    keys: np.ndarray, table_keys: np.ndarray, table_ids: np.ndarray
) -> tuple[np.ndarray, int]:
    mask = len(table_keys) - 1
    out = np.empty(len(keys), dtype=np.int64)
    count = 0
    for i in range(len(keys)):
        key = keys[i]
        s = _hash_slot(key, mask)
        while table_keys[s] != _EMPTY and table_keys[s] != key:
            s = (s + 1) & mask
        if table_keys[s] == _EMPTY:
            table_keys[s] = key
            table_ids[s] = count
            count += 1
        out[i] = table_ids[s]
    return out, count


def dense_ids(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Items numbered 0..D-1 in order of first appearance, and D."""
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    size = _next_power_of_two(2 * len(keys) + 2)
    ids, distinct = _dense(keys, np.full(size, _EMPTY, dtype=np.int64), np.zeros(size, np.int64))
    return ids, int(distinct)


@njit(cache=True)
def _fifo(ids: np.ndarray, n_items: int, capacity: int) -> np.ndarray:  # pragma: no cover
    hits = np.zeros(len(ids), dtype=np.bool_)
    cached = np.zeros(n_items, dtype=np.bool_)
    ring = np.empty(capacity, dtype=np.int64)
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
    """Which accesses of dense ``ids`` a FIFO cache of ``capacity`` items hits."""
    hits: np.ndarray = _fifo(np.ascontiguousarray(ids, dtype=np.int64), n_items, capacity)
    return hits


@njit(cache=True)
def _next_uses(ids: np.ndarray, n_items: int) -> np.ndarray:  # pragma: no cover
    """The index of each access's next use of the same item; ``n + i`` when none (unique)."""
    n = len(ids)
    following = np.empty(n, dtype=np.int64)
    seen = np.full(n_items, -1, dtype=np.int64)
    for i in range(n - 1, -1, -1):
        x = ids[i]
        following[i] = seen[x] if seen[x] >= 0 else n + i
        seen[x] = i
    return following


@njit(cache=True)
def _opt(  # pragma: no cover
    ids: np.ndarray, following: np.ndarray, n_items: int, capacity: int
) -> np.ndarray:
    n = len(ids)
    hits = np.zeros(n, dtype=np.bool_)
    cached = np.zeros(n_items, dtype=np.bool_)
    due = np.zeros(n_items, dtype=np.int64)  # next use of each cached item
    heap_due = np.empty(n + 1, dtype=np.int64)  # max-heap of (next use, item), lazily pruned
    heap_item = np.empty(n + 1, dtype=np.int64)
    heap_size = 0
    size = 0
    for i in range(n):
        x = ids[i]
        if cached[x]:
            hits[i] = True
        elif size == capacity:
            while True:  # pop until an entry that still describes a cached item
                top_due, top_item = heap_due[0], heap_item[0]
                heap_size -= 1
                heap_due[0], heap_item[0] = heap_due[heap_size], heap_item[heap_size]
                k = 0
                while True:
                    child = 2 * k + 1
                    if child >= heap_size:
                        break
                    if child + 1 < heap_size and heap_due[child + 1] > heap_due[child]:
                        child += 1
                    if heap_due[child] <= heap_due[k]:
                        break
                    heap_due[k], heap_due[child] = heap_due[child], heap_due[k]
                    heap_item[k], heap_item[child] = heap_item[child], heap_item[k]
                    k = child
                if cached[top_item] and due[top_item] == top_due:
                    cached[top_item] = False
                    break
        else:
            size += 1
        cached[x] = True
        due[x] = following[i]
        k = heap_size  # push (next use, item)
        heap_due[k], heap_item[k] = following[i], x
        heap_size += 1
        while k > 0:
            parent = (k - 1) // 2
            if heap_due[parent] >= heap_due[k]:
                break
            heap_due[k], heap_due[parent] = heap_due[parent], heap_due[k]
            heap_item[k], heap_item[parent] = heap_item[parent], heap_item[k]
            k = parent
    return hits


def opt_hits(ids: np.ndarray, n_items: int, capacity: int) -> np.ndarray:
    """Which accesses of dense ``ids`` Belady's OPT hits with ``capacity`` items."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    hits: np.ndarray = _opt(ids, _next_uses(ids, n_items), n_items, capacity)
    return hits
