"""Cache simulation over streams of dense item ids: LRU stack distances and exclusive
tiers with demotion (FIFO and OPT at one capacity: `kvtrace.kernels.capacity_sim`).

Items are numbered 0, 1, 2, ... (`ItemIds` numbers arbitrary int64 keys in order of first
appearance).  A stream is processed in order; the first access of an item is a cold miss.

- `LruStack` gives every access its LRU stack distance: the number of distinct other
  items touched since the item's last access, or -1 for a first touch.  An LRU cache of
  capacity C hits exactly the accesses with ``0 <= distance < C`` (Mattson et al., 1970),
  so one pass answers every capacity, and an exclusive LRU hierarchy (tier k holding
  stack positions C[k-1] .. C[k] - 1, what demoting an evicted item one tier down and
  promoting a hit to the top builds) serves an access from the tier its distance falls
  in.  It keeps state between calls, so a long stream can be fed in pieces, and
  `LruStack.peek` reads an item's distance without touching it.
- `TierCache` simulates such an exclusive hierarchy live, for FIFO as well as LRU: an
  item evicted from a tier is demoted to the next one, a hit in a lower tier promotes
  the item to the top (demoting in turn), and what falls out of the last bounded tier
  stays in the unbounded one below it.

How the stack distance is computed: a Fenwick tree over time holds a 1 at the time of
each item's most recent access.  The distance of an access whose item was last seen at
time p is the number of 1s after p.  Each access costs one prefix query and two updates,
O(log T).  The loop is inherently sequential (every answer depends on all updates before
it), which NumPy cannot vectorise, so it is compiled with numba.  The tree covers a window
of time slots (32 per distinct item); when the window is used up, the live marks are
renumbered 1..D (D distinct items) and the tree rebuilt, so memory grows with the
distinct items, not the stream.
An item's last access time is an array indexed by its id.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_EMPTY = -1
_MIN_SLOTS = 1 << 16
_WINDOW_PER_ITEM = 32  # time slots per live item: the window is renumbered rarely


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


def _next_power_of_two(n: int) -> int:
    return 1 << max(int(n) - 1, 1).bit_length()


# -- numbering items --------------------------------------------------------------------


_MAX_LOAD = 0.75  # keys per slot of `ItemIds`' table before it doubles


@njit(cache=True)
def _number(  # pragma: no cover
    keys: np.ndarray, slots: np.ndarray, named: np.ndarray, out: np.ndarray, count: np.ndarray
) -> int:
    """Ids of ``keys`` from the open-addressing table of ``slots`` (keys) and ``named``
    (their ids), numbering new keys from ``count[0]``; stops (returning the index
    reached) when the table is three quarters full."""
    mask = len(slots) - 1
    limit = int(len(slots) * _MAX_LOAD)
    for i in range(len(keys)):
        if count[0] >= limit:
            return i
        key = keys[i]
        s = _hash_slot(key, mask)
        while slots[s] != _EMPTY and slots[s] != key:
            s = (s + 1) & mask
        if slots[s] == _EMPTY:
            slots[s] = key
            named[s] = count[0]
            count[0] += 1
        out[i] = named[s]
    return len(keys)


@njit(cache=True)
def _rehash(  # pragma: no cover
    slots: np.ndarray, named: np.ndarray, new_slots: np.ndarray, new_named: np.ndarray
) -> None:
    mask = len(new_slots) - 1
    for s in range(len(slots)):
        key = slots[s]
        if key == _EMPTY:
            continue
        t = _hash_slot(key, mask)
        while new_slots[t] != _EMPTY:
            t = (t + 1) & mask
        new_slots[t] = key
        new_named[t] = named[s]


@njit(cache=True)
def _number_direct(  # pragma: no cover
    keys: np.ndarray, direct: np.ndarray, out: np.ndarray, count: np.ndarray
) -> None:
    """Ids of ``keys`` from ``direct`` (each key's id + 1, 0 for a key not seen),
    numbering new keys from ``count[0]``."""
    for i in range(len(keys)):
        key = keys[i]
        if direct[key] == 0:
            count[0] += 1
            direct[key] = count[0]
        out[i] = direct[key] - 1


@njit(cache=True)
def _table_of(  # pragma: no cover
    direct: np.ndarray, slots: np.ndarray, named: np.ndarray
) -> None:
    """Put every key of ``direct`` and its id into the empty table."""
    mask = len(slots) - 1
    for key in range(len(direct)):
        if direct[key] == 0:
            continue
        s = _hash_slot(key, mask)
        while slots[s] != _EMPTY:
            s = (s + 1) & mask
        slots[s] = key
        named[s] = direct[key] - 1


_SPREAD = 4  # keys below four times the keys seen (plus a million) are looked up directly


class ItemIds:
    """Dense ids 0, 1, 2, ... for non-negative int64 keys, in order of first appearance,
    kept between calls.

    While every key lies below four times the keys seen so far (plus a million), as
    block hashes numbered from 0 do, an int32 array indexed by the key holds its id: 4 to
    16 bytes a key.  The first key beyond moves them into an open-addressing table of a
    key (8 bytes) and an id (4 bytes, 8 past two billion keys) per slot, at most three
    quarters of the slots used: 16 to 32 bytes a key."""

    def __init__(self) -> None:
        self._direct: np.ndarray | None = np.zeros(1 << 12, dtype=np.int32)
        self._slots = np.full(0, _EMPTY, dtype=np.int64)
        self._named: np.ndarray = np.zeros(0, dtype=np.int32)
        self._count = np.zeros(1, dtype=np.int64)

    @property
    def count(self) -> int:
        """Distinct keys numbered so far."""
        return int(self._count[0])

    def ids(self, keys: np.ndarray) -> np.ndarray:
        """The id of each key (new keys get the next ids)."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        out = np.empty(len(keys), dtype=np.int64)
        if self._direct is not None and len(keys) and self._direct_takes(keys):
            _number_direct(keys, self._direct, out, self._count)
            return out
        if self._direct is not None and len(keys):
            self._to_table()
        done = 0
        while done < len(keys):
            done += _number(keys[done:], self._slots, self._named, out[done:], self._count)
            if done < len(keys):
                self._grow_table(2 * len(self._slots))
        return out

    def _direct_takes(self, keys: np.ndarray) -> bool:
        """Whether the direct array can number ``keys`` (grown to hold them if so)."""
        assert self._direct is not None
        most = self.count + len(keys)
        top = int(keys.max())
        if int(keys.min()) < 0 or top >= _SPREAD * most + (1 << 20) or most >= 2**31 - 1:
            return False
        if top >= len(self._direct):
            grown = np.zeros(max(top + 1, len(self._direct) * 3 // 2), dtype=np.int32)
            grown[: len(self._direct)] = self._direct
            self._direct = grown
        return True

    def _to_table(self) -> None:
        """Move the keys numbered so far from the direct array into the table."""
        assert self._direct is not None
        size = 1 << 12
        while self.count >= size * _MAX_LOAD:
            size *= 2
        self._grow_table(size)
        _table_of(self._direct, self._slots, self._named)
        self._direct = None

    def _grow_table(self, size: int) -> None:
        """The table at ``size`` slots, the keys in it put again."""
        slots = np.full(size, _EMPTY, dtype=np.int64)
        named = np.zeros(size, dtype=np.int32 if size * _MAX_LOAD < 2**31 else np.int64)
        _rehash(self._slots, self._named, slots, named)
        self._slots, self._named = slots, named


def dense_ids(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Items numbered 0..D-1 in order of first appearance, and D."""
    numbering = ItemIds()
    ids = numbering.ids(keys)
    return ids, numbering.count


# -- LRU stack distances ------------------------------------------------------------------


@njit(inline="always", cache=True)
def _marks_after(  # pragma: no cover
    p: int, current: int, live: int, bits: np.ndarray, tree: np.ndarray
) -> np.int64:
    """Live marks after time slot ``p`` (whose own mark is set)."""
    word = p >> 6
    after = _popcount(bits[word] & (-1 << (p & 63))) - 1
    if word != current:
        later = live  # minus the marks up to p's word = the marks after it
        j = word + 1
        while j > 0:
            later -= tree[j]
            j -= j & -j
        after += later
    return after


@njit(nogil=True, cache=True)
def _lru_pass(  # pragma: no cover
    ids: np.ndarray,
    start: int,
    out: np.ndarray,
    last: np.ndarray,
    bits: np.ndarray,
    tree: np.ndarray,
    state: np.ndarray,
) -> int:
    """Distances of ``ids[start:]`` until the time window is full.

    ``last`` holds each item's last access slot (-1: never seen); ``bits`` has a bit per
    time slot (set: the last access of a live item) and ``tree`` is a Fenwick tree over
    the set bits of each *completed* 64-slot word (the word being filled is counted from
    its bits alone, and enters the tree when it is complete).  ``state`` holds [now, live];
    returns the index of the first access not processed.
    """
    now, live = state[0], state[1]
    slots = 64 * len(bits)
    words = len(tree) - 1
    i = start
    n = len(ids)
    while i < n and now < slots:
        x = ids[i]
        p = last[x]
        current = now >> 6
        if p < 0:
            live += 1
            out[i] = -1
        else:
            out[i] = _marks_after(p, current, live, bits, tree)
            word = p >> 6
            bits[word] &= ~(1 << (p & 63))
            if word != current:
                j = word + 1
                while j <= words:
                    tree[j] -= 1
                    j += j & -j
        last[x] = now
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
def _lru_peek(  # pragma: no cover
    ids: np.ndarray, last: np.ndarray, bits: np.ndarray, tree: np.ndarray, state: np.ndarray
) -> np.ndarray:
    out = np.full(len(ids), -1, dtype=np.int64)
    now, live = state[0], state[1]
    for i in range(len(ids)):
        x = ids[i]
        if x < len(last) and last[x] >= 0:
            out[i] = _marks_after(last[x], now >> 6, live, bits, tree)
    return out


@njit(cache=True)
def _renumber(last: np.ndarray, bits: np.ndarray, tree: np.ndarray) -> int:  # pragma: no cover
    """Give the live marks times 0..D-1 in their order; rebuild ``bits`` and ``tree``
    (both zeros on entry) with the completed words in the tree.  Returns D."""
    used = np.flatnonzero(last >= 0)
    order = np.argsort(last[used])
    for rank in range(len(order)):
        last[used[order[rank]]] = rank
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


def _grown(array: np.ndarray, size: int, fill: int) -> np.ndarray:
    """``array`` extended with ``fill`` to at least ``size`` (by a quarter at least: an
    array per distinct item is the largest a long stream holds)."""
    if size <= len(array):
        return array
    bigger = np.full(max(size, len(array) * 5 // 4), fill, dtype=array.dtype)
    bigger[: len(array)] = array
    return bigger


class LruStack:
    """LRU stack distances of a stream of item ids fed in pieces (see the module
    docstring)."""

    def __init__(self) -> None:
        self._last = np.full(1 << 12, _EMPTY, dtype=np.int64)
        self._bits = np.zeros(_MIN_SLOTS // 64, dtype=np.int64)
        self._tree = np.zeros(_MIN_SLOTS // 64 + 1, dtype=np.int64)
        self._state = np.zeros(2, dtype=np.int64)  # now, live

    @property
    def distinct(self) -> int:
        """Distinct items seen so far."""
        return int(self._state[1])

    def distances(self, ids: np.ndarray) -> np.ndarray:
        """The stack distance of each access of ``ids`` (-1 for a first touch)."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        out = np.empty(len(ids), dtype=np.int64)
        if len(ids):
            self._last = _grown(self._last, int(ids.max()) + 1, _EMPTY)
        done = 0
        while True:
            done = _lru_pass(ids, done, out, self._last, self._bits, self._tree, self._state)
            if done == len(ids):
                return out
            live = int(self._state[1])
            slots = max(_MIN_SLOTS, _next_power_of_two(_WINDOW_PER_ITEM * (live + 1)))
            self._bits = np.zeros(slots // 64, dtype=np.int64)
            self._tree = np.zeros(slots // 64 + 1, dtype=np.int64)
            self._state[0] = _renumber(self._last, self._bits, self._tree)

    def peek(self, ids: np.ndarray) -> np.ndarray:
        """The distance each item would have if accessed now (-1: never seen); nothing
        changes."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        result: np.ndarray = _lru_peek(ids, self._last, self._bits, self._tree, self._state)
        return result


@njit(nogil=True, cache=True)
def tally_distances(  # pragma: no cover
    distances: np.ndarray,
    first: np.ndarray,
    slots: np.ndarray,
    limits: np.ndarray,
    hist: np.ndarray,
    shared_hist: np.ndarray,
    slot_levels: np.ndarray,
    shared_levels: np.ndarray,
) -> int:
    """Count LRU accesses: per stack distance (``hist``; ``shared_hist`` for a request's
    first touch of an item already cached), and per (slot, tier) of the exclusive
    hierarchy with cumulative capacities ``limits`` (first touches: the last tier).
    ``hist`` must be longer than the largest distance.  Returns the first touches."""
    tiers = len(limits)
    cold = 0
    for i in range(len(distances)):
        d = distances[i]
        level = tiers
        if d < 0:
            cold += 1
        else:
            hist[d] += 1
            level = 0
            while level < tiers and d >= limits[level]:
                level += 1
            if first[i]:
                shared_hist[d] += 1
                shared_levels[level] += 1
        slot_levels[slots[i], level] += 1
    return cold


# -- exclusive tiers, simulated live ----------------------------------------------------------


@njit(nogil=True, cache=True)
def _tiers_pass(  # pragma: no cover
    ids: np.ndarray,
    levels: np.ndarray,
    lru: bool,
    capacity: np.ndarray,
    size: np.ndarray,
    head: np.ndarray,
    tail: np.ndarray,
    tier_of: np.ndarray,
    before: np.ndarray,
    after: np.ndarray,
    seen: np.ndarray,
) -> None:
    """Serve ``ids`` from the bounded tiers 0..T-2 (doubly linked lists, ``head`` the
    next to leave, ``tail`` the newest) and the unbounded tier T-1 (everything else);
    a first touch's level is -1 (it too is read from tier T-1)."""
    bounded = len(capacity)
    for i in range(len(ids)):
        x = ids[i]
        first_touch = 1 if not seen[x] else 0
        seen[x] = True
        if bounded == 0:
            levels[i] = -1 if first_touch else 0
            continue
        t = tier_of[x]
        if t == 0:
            levels[i] = 0
            if lru:  # a hit refreshes the item
                _unlink(x, 0, head, tail, before, after, size)
                _append(x, 0, head, tail, before, after, size, tier_of)
            continue
        levels[i] = t if t > 0 else (bounded if first_touch == 0 else -1)
        if t > 0:  # promoted from a lower tier
            _unlink(x, t, head, tail, before, after, size)
        stop = t if t > 0 else bounded
        _append(x, 0, head, tail, before, after, size, tier_of)
        for k in range(stop):  # each overfull tier demotes its oldest one tier down
            if size[k] <= capacity[k]:
                break
            y = head[k]
            _unlink(y, k, head, tail, before, after, size)
            if k + 1 < bounded:
                _append(y, k + 1, head, tail, before, after, size, tier_of)
            else:
                tier_of[y] = -1


@njit(inline="always", cache=True)
def _unlink(  # pragma: no cover
    x: int,
    t: int,
    head: np.ndarray,
    tail: np.ndarray,
    before: np.ndarray,
    after: np.ndarray,
    size: np.ndarray,
) -> None:
    b, a = before[x], after[x]
    if b >= 0:
        after[b] = a
    else:
        head[t] = a
    if a >= 0:
        before[a] = b
    else:
        tail[t] = b
    size[t] -= 1


@njit(inline="always", cache=True)
def _append(  # pragma: no cover
    x: int,
    t: int,
    head: np.ndarray,
    tail: np.ndarray,
    before: np.ndarray,
    after: np.ndarray,
    size: np.ndarray,
    tier_of: np.ndarray,
) -> None:
    before[x] = tail[t]
    after[x] = -1
    if tail[t] >= 0:
        after[tail[t]] = x
    else:
        head[t] = x
    tail[t] = x
    size[t] += 1
    tier_of[x] = t


class TierCache:
    """An exclusive hierarchy of bounded tiers (capacities in items, fastest first) over
    an unbounded last tier, simulated access by access: LRU with ``lru`` (a hit refreshes
    its item), else FIFO."""

    def __init__(self, capacities: list[int], *, lru: bool) -> None:
        self._lru = lru
        self._capacity = np.asarray(capacities, dtype=np.int64)
        bounded = len(self._capacity)
        self._size = np.zeros(bounded, dtype=np.int64)
        self._head = np.full(bounded, -1, dtype=np.int64)
        self._tail = np.full(bounded, -1, dtype=np.int64)
        self._tier_of = np.full(0, -1, dtype=np.int64)
        self._before = np.full(0, -1, dtype=np.int64)
        self._after = np.full(0, -1, dtype=np.int64)
        self._seen = np.zeros(0, dtype=np.bool_)

    def access(self, ids: np.ndarray) -> np.ndarray:
        """The tier that serves each access (the last tier: a miss of every bounded one),
        -1 for an item's first touch (read from the last tier too)."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if len(ids):
            top = int(ids.max()) + 1
            self._tier_of = _grown(self._tier_of, top, -1)
            self._before = _grown(self._before, top, -1)
            self._after = _grown(self._after, top, -1)
            if top > len(self._seen):
                seen = np.zeros(max(top, 2 * len(self._seen)), dtype=np.bool_)
                seen[: len(self._seen)] = self._seen
                self._seen = seen
        levels = np.empty(len(ids), dtype=np.int64)
        _tiers_pass(
            ids,
            levels,
            self._lru,
            self._capacity,
            self._size,
            self._head,
            self._tail,
            self._tier_of,
            self._before,
            self._after,
            self._seen,
        )
        return levels

    def peek(self, ids: np.ndarray) -> np.ndarray:
        """The tier holding each item now: a bounded one, the last one for an item seen
        before, -1 for one never seen; nothing changes."""
        ids = np.asarray(ids, dtype=np.int64)
        known = ids < len(self._tier_of)
        tier = np.full(len(ids), -1, dtype=np.int64)
        tier[known] = self._tier_of[ids[known]]
        was_seen = np.zeros(len(ids), dtype=bool)
        was_seen[known] = self._seen[ids[known]]
        return np.where(tier >= 0, tier, np.where(was_seen, len(self._capacity), -1))
