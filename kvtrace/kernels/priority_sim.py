"""Priority caches at many capacities at once, over a stream of dense item ids: LFU, the
lowest-score eviction and the sliding window (`kvtrace.analysis.policies` names them).

Each item has a priority that depends on the stream alone, never on a cache's capacity:

- ``MODE_RECENCY``: none (0 for every item), so the order is LRU's;
- ``MODE_FREQUENCY``: its accesses since the start of the stream (whether or not it was
  cached meanwhile);
- ``MODE_SCORE``: the score its latest access carried;
- ``MODE_WINDOW``: 1 while it lies in an active request's window of recent tokens, else 0.

A full cache evicts the item of lowest (priority, time of its latest access): ties go to
the least recently used.  Because the order does not depend on the capacity, a cache of C
items always holds a subset of what a cache of C + 1 holds (Mattson et al.'s inclusion
property: on a miss both evict their lowest item, and when the larger one's lies in the
smaller one, it is the smaller one's too).  So each item keeps one number, the smallest
capacity (an index into the sorted ``capacities``) whose cache holds it, and an access
hits every cache from that one on.

A capacity is simulated from the moment its cache first has to evict; until then it holds
every item seen.  Each simulated capacity has a min-heap of (priority, time, item)
entries with room for twice its items, holding for every item of its cache an entry
whose key is at most the item's current one: an item entering the cache, or whose key
falls (a lower score, leaving a window), gets a new entry; a key that grows (a hit)
keeps its old entry, entered again with the current key when it comes up.  Entries of
items the cache no longer holds are dropped as they come up, and a full heap keeps one
entry per held item.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

__all__ = [
    "MODE_FREQUENCY",
    "MODE_RECENCY",
    "MODE_SCORE",
    "MODE_WINDOW",
    "PriorityCaches",
    "Windows",
    "priority_hits",
]

MODE_RECENCY, MODE_FREQUENCY, MODE_SCORE, MODE_WINDOW = 0, 1, 2, 3
Arrays = tuple[np.ndarray, ...]
_NOW, _DISTINCT, _ACTIVE, _STAMP, _STEP, _RELEASED = range(6)  # slots of ``state``


@njit(inline="always", cache=True)
def _below(p: float, t: int, q: float, u: int) -> bool:  # pragma: no cover
    return p < q or (p == q and t < u)


@njit(inline="always", cache=True)
def _sift_up(  # pragma: no cover
    hp: np.ndarray, ht: np.ndarray, hi: np.ndarray, base: int, at: int, p: float, t: int, x: int
) -> None:
    while at > 0:
        up = (at - 1) >> 1
        if not _below(p, t, hp[base + up], ht[base + up]):
            break
        hp[base + at], ht[base + at], hi[base + at] = hp[base + up], ht[base + up], hi[base + up]
        at = up
    hp[base + at], ht[base + at], hi[base + at] = p, t, x


@njit(inline="always", cache=True)
def _sift_down(  # pragma: no cover
    hp: np.ndarray,
    ht: np.ndarray,
    hi: np.ndarray,
    base: int,
    size: int,
    at: int,
    p: float,
    t: int,
    x: int,
) -> None:
    while True:
        low = 2 * at + 1
        if low >= size:
            break
        right = low + 1
        if right < size and _below(
            hp[base + right], ht[base + right], hp[base + low], ht[base + low]
        ):
            low = right
        if not _below(hp[base + low], ht[base + low], p, t):
            break
        hp[base + at], ht[base + at], hi[base + at] = hp[base + low], ht[base + low], hi[base + low]
        at = low
    hp[base + at], ht[base + at], hi[base + at] = p, t, x


@njit(inline="always", cache=True)
def _held(k: int, x: int, items: Arrays) -> bool:  # pragma: no cover
    """Whether cache k holds item x."""
    return bool(0 <= items[0][x] <= k)


# ``items``: per item (level, last, prio, mark) and the ``state``; ``heaps``: the heaps'
# (priority, time, item) entries, each capacity's area [base[k], base[k + 1]) and size.


@njit(cache=True)
def _compact(k: int, heaps: Arrays, items: Arrays) -> None:  # pragma: no cover
    """One entry per item cache k holds, with its current key, heaped again in place."""
    hp, ht, hi, hbase, hsize = heaps
    mark, state = items[3], items[4]
    base, kept = hbase[k], 0
    state[_STAMP] += 1
    stamp = state[_STAMP]
    for e in range(hsize[k]):
        x = hi[base + e]
        if mark[x] != stamp and _held(k, x, items):
            mark[x] = stamp
            hp[base + kept], ht[base + kept], hi[base + kept] = items[2][x], items[1][x], x
            kept += 1
    for e in range((kept >> 1) - 1, -1, -1):
        _sift_down(hp, ht, hi, base, kept, e, hp[base + e], ht[base + e], hi[base + e])
    hsize[k] = kept


@njit(cache=True)
def _push(k: int, x: int, heaps: Arrays, items: Arrays) -> None:  # pragma: no cover
    """Enter item x's current priority and time into heap k."""
    hp, ht, hi, hbase, hsize = heaps
    if hsize[k] == hbase[k + 1] - hbase[k]:
        _compact(k, heaps, items)
    _sift_up(hp, ht, hi, hbase[k], hsize[k], items[2][x], items[1][x], x)
    hsize[k] += 1


@njit(cache=True)
def _evict(k: int, heaps: Arrays, items: Arrays) -> None:  # pragma: no cover
    """Take cache k's lowest item out of it (it stays in the larger caches that hold it).

    An entry of an item the cache no longer holds is dropped; one whose key has grown
    since is entered again with its current key."""
    hp, ht, hi, hbase, hsize = heaps
    level, last, prio = items[0], items[1], items[2]
    base = hbase[k]
    while True:
        p, t, x = hp[base], ht[base], hi[base]
        hsize[k] -= 1
        end = base + hsize[k]
        _sift_down(hp, ht, hi, base, hsize[k], 0, hp[end], ht[end], hi[end])
        if not _held(k, x, items):
            continue
        if last[x] == t and prio[x] == p:
            level[x] = k + 1
            return
        _sift_up(hp, ht, hi, base, hsize[k], prio[x], last[x], x)
        hsize[k] += 1


@dataclass
class Windows:
    """The sliding window's view of a stream: per step (the ``steps`` an access carries),
    its request and the first and last block of its window (first > last: none); per
    request, where its blocks' items start in ``block_items`` and the slot after which
    its window is released (``release_order``: the requests to release, by that slot);
    ``layers`` items per block (all layers of a window block stay)."""

    step_request: np.ndarray
    step_first: np.ndarray
    step_last: np.ndarray
    offsets: np.ndarray
    block_items: np.ndarray
    layers: int
    end_slot: np.ndarray
    release_order: np.ndarray


@njit(cache=True)
def _reprioritise(y: int, p: float, heaps: Arrays, items: Arrays) -> None:  # pragma: no cover
    """Give item y priority p; a lower one enters the heap of every cache holding y (a
    higher one is found when its old entry comes up)."""
    level, prio, state = items[0], items[2], items[4]
    lower = p < prio[y]
    prio[y] = p
    if level[y] >= 0 and lower:
        for k in range(level[y], state[_ACTIVE]):
            _push(k, y, heaps, items)


@njit(cache=True)
def _protect(  # pragma: no cover
    r: int, first: int, last: int, change: int, win: tuple[Any, ...], heaps: Arrays, items: Arrays
) -> None:
    """Add ``change`` (+1 or -1) windows to every item of request r's blocks
    first..last; an item entering or leaving every window changes priority."""
    offsets, block_items, layers, prot = win[3], win[4], win[10], win[9]
    for j in range(first, last + 1):
        block_item = block_items[offsets[r] + j]
        for layer in range(layers):
            y = block_item * layers + layer
            prot[y] += change
            if prot[y] == (1 if change > 0 else 0):
                _reprioritise(y, 1.0 if change > 0 else 0.0, heaps, items)


@njit(cache=True)
def _move_windows(  # pragma: no cover
    slot: int, step: int, win: tuple[Any, ...], heaps: Arrays, items: Arrays
) -> None:
    """Release the windows of requests whose last step came before ``slot``; move the
    window of ``step``'s request to that step's."""
    request, first, last, end, release, lo, hi = (
        win[0],
        win[1],
        win[2],
        win[5],
        win[6],
        win[7],
        win[8],
    )
    state = items[4]
    while state[_RELEASED] < len(release) and end[release[state[_RELEASED]]] < slot:
        r = release[state[_RELEASED]]
        _protect(r, lo[r], hi[r], -1, win, heaps, items)
        lo[r], hi[r] = 0, -1
        state[_RELEASED] += 1
    if step != state[_STEP]:
        r = request[step]
        _protect(r, first[step], last[step], 1, win, heaps, items)  # before the old leave
        _protect(r, lo[r], hi[r], -1, win, heaps, items)
        lo[r], hi[r] = first[step], last[step]
        state[_STEP] = step


@njit(inline="always", cache=True)
def _priority_now(  # pragma: no cover
    mode: int, before: float, scores: np.ndarray, i: int, prot: np.ndarray, x: int
) -> float:
    """Item x's priority once access i has read it."""
    if mode == MODE_FREQUENCY:
        return before + 1.0
    if mode == MODE_SCORE:
        return float(scores[i])
    if mode == MODE_WINDOW:
        return 1.0 if prot[x] > 0 else 0.0
    return 0.0


@njit(cache=True)
def _serve(  # pragma: no cover
    ids: np.ndarray,
    scores: np.ndarray,
    steps: np.ndarray,
    slots: np.ndarray,
    start: int,
    mode: int,
    out: np.ndarray,
    caps: np.ndarray,
    heaps: Arrays,
    items: Arrays,
    win: tuple[Any, ...],
) -> int:
    """Serve ``ids[start:]``: ``out[i]`` is the smallest capacity index holding the item
    before access i (-1: never seen; ``len(caps)``: none).  Returns the index reached:
    short of the end when the next capacity must start being simulated."""
    level, last, prio, state, prot = items[0], items[1], items[2], items[4], win[9]
    for i in range(start, len(ids)):
        x = ids[i]
        if mode == MODE_WINDOW:
            _move_windows(slots[i], steps[i], win, heaps, items)
        active = state[_ACTIVE]
        seen = level[x]
        if seen < 0 and active < len(caps) and state[_DISTINCT] == caps[active]:
            return i
        out[i] = seen
        for k in range(seen if seen >= 0 else active):
            _evict(k, heaps, items)
        before = prio[x]
        prio[x] = _priority_now(mode, before, scores, i, prot, x)
        if seen < 0:
            state[_DISTINCT] += 1
        level[x] = 0
        last[x] = state[_NOW]
        state[_NOW] += 1
        held = seen if seen >= 0 and prio[x] >= before else active  # their entries stand
        for k in range(min(held, active)):
            _push(k, x, heaps, items)
    return len(ids)


class PriorityCaches:
    """Caches of every capacity in ``capacities`` (positive, ascending) over items
    0 .. ``n_items`` - 1, fed a stream in pieces (see the module docstring)."""

    def __init__(
        self, n_items: int, capacities: np.ndarray, mode: int, windows: Windows | None = None
    ) -> None:
        self.caps = np.ascontiguousarray(capacities, dtype=np.int64)
        assert len(self.caps) == 0 or (self.caps[0] >= 1 and (np.diff(self.caps) > 0).all())
        assert (mode == MODE_WINDOW) == (windows is not None)
        self.mode = mode
        self.last = np.full(n_items, -1, dtype=np.int64)
        self.prio = np.zeros(n_items, dtype=np.float64)
        self.level = np.full(n_items, -1, dtype=np.int32)
        self.mark = np.zeros(n_items, dtype=np.int64)
        self.hp = np.zeros(0, dtype=np.float64)
        self.ht = np.zeros(0, dtype=np.int64)
        self.hi = np.zeros(0, dtype=np.int64)
        self.hbase = np.zeros(1, dtype=np.int64)
        self.hsize = np.zeros(0, dtype=np.int64)
        self.state = np.zeros(6, dtype=np.int64)
        self.state[_STEP] = -1
        none = np.zeros(0, dtype=np.int64)
        self.windows = windows or Windows(none, none, none, none, none, 1, none, none)
        requests = len(self.windows.offsets)
        self.w_lo = np.zeros(requests, dtype=np.int64)
        self.w_hi = np.full(requests, -1, dtype=np.int64)
        self.prot = np.zeros(n_items if windows is not None else 0, dtype=np.int32)

    @property
    def distinct(self) -> int:
        """Items seen so far."""
        return int(self.state[_DISTINCT])

    def access(
        self,
        ids: np.ndarray,
        scores: np.ndarray | None = None,
        steps: np.ndarray | None = None,
        slots: np.ndarray | None = None,
    ) -> np.ndarray:
        """For each access, the smallest capacity index whose cache held its item (-1: a
        first touch; ``len(capacities)``: none held it).  ``scores`` (mode score) are the
        accesses' scores; ``steps`` and ``slots`` (mode window) their steps and slots."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        none = np.zeros(0, dtype=np.int64)
        given = np.zeros(0) if scores is None else np.ascontiguousarray(scores, np.float64)
        steps = none if steps is None else np.ascontiguousarray(steps, dtype=np.int64)
        slots = none if slots is None else np.ascontiguousarray(slots, dtype=np.int64)
        out = np.empty(len(ids), dtype=np.int64)
        w = self.windows
        win = (
            w.step_request,
            w.step_first,
            w.step_last,
            w.offsets,
            w.block_items,
            w.end_slot,
            w.release_order,
            self.w_lo,
            self.w_hi,
            self.prot,
            w.layers,
        )
        done = 0
        while True:
            heaps = (self.hp, self.ht, self.hi, self.hbase, self.hsize)
            items = (self.level, self.last, self.prio, self.mark, self.state)
            done = _serve(
                ids, given, steps, slots, done, self.mode, out, self.caps, heaps, items, win
            )
            if done == len(ids):
                return out
            self._activate()

    def _activate(self) -> None:
        """Start simulating the next capacity: its cache holds every item seen."""
        active = int(self.state[_ACTIVE])
        room = 2 * int(self.caps[active]) + 1
        seen = np.flatnonzero(self.level >= 0)
        order = np.lexsort((self.last[seen], self.prio[seen]))  # sorted: a valid heap
        base = int(self.hbase[-1])
        self.hp = np.concatenate([self.hp, np.zeros(room)])
        self.ht = np.concatenate([self.ht, np.zeros(room, dtype=np.int64)])
        self.hi = np.concatenate([self.hi, np.zeros(room, dtype=np.int64)])
        self.hp[base : base + len(seen)] = self.prio[seen][order]
        self.ht[base : base + len(seen)] = self.last[seen][order]
        self.hi[base : base + len(seen)] = seen[order]
        self.hbase = np.append(self.hbase, base + room)
        self.hsize = np.append(self.hsize, len(seen))
        self.state[_ACTIVE] = active + 1

    def peek(self, ids: np.ndarray) -> np.ndarray:
        """The smallest capacity index holding each item now (-1: never seen)."""
        found: np.ndarray = self.level[np.asarray(ids, dtype=np.int64)].astype(np.int64)
        return found


def priority_hits(
    ids: np.ndarray, n_items: int, capacity: int, mode: int, scores: np.ndarray | None = None
) -> np.ndarray:
    """Which accesses of dense ``ids`` a cache of ``capacity`` items hits under ``mode``
    (recency, frequency or score: the window needs a request's steps)."""
    if capacity < 1:
        return np.zeros(len(ids), dtype=np.bool_)
    caches = PriorityCaches(n_items, np.array([capacity]), mode)
    levels = caches.access(ids, scores)
    hits: np.ndarray = levels == 0
    return hits
