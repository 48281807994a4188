"""SGLang's radix-tree prefix cache, one capacity at a time: per request, the leading run
of its blocks cached when it arrived.

Blocks are nodes of the tree of prefixes (`kvtrace.kernels.prefix_sim.radix_nodes`, or
the block ids themselves when each id always follows the same parent): request r reads
``nodes[starts[r]:starts[r + 1]]``, a path down from the root.  Only the leading hits
are refreshed, a miss is inserted only under a cached parent, and only a leaf outside the
current request's cached path is evicted (LRU: the least recently used; OPT: the one
needed again last), so a child is never cached without its parent.  When nothing can
be evicted the request stops inserting.

Memory per capacity over n nodes: a cached mark, a last (LRU) or next (OPT) use and a
count of cached children per node in the narrowest integers, and an eviction heap of
int64 keys that grows to two to four times the cached leaves; a cache that holds every
node never evicts and needs only the marks.  OPT's next uses, one per read, are shared
by every capacity (`next_uses`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvtrace.kernels.capacity_sim import sift_down, sift_up
from kvtrace.kernels.prefix_sim import leading_run, narrowest

__all__ = ["next_uses", "radix_hits"]

_LOW = (1 << 32) - 1  # a heap key's low half: the node, counted down


@njit(inline="always", cache=True)
def _order(key: int, node: int, optimal: bool) -> int:  # pragma: no cover
    """A leaf's place in the eviction heap (smallest first): LRU by last use, OPT by
    the latest next use; ties go to the node numbered last.  The low 32 bits hold the
    node, so the heap keeps keys alone (`_node_of`)."""
    rank = (np.int64(1) << 31) - key if optimal else np.int64(key)
    return int((rank << 32) | (_LOW - node))


@njit(inline="always", cache=True)
def _node_of(order: int) -> int:  # pragma: no cover
    """The node of a heap key of `_order`."""
    return _LOW - (order & _LOW)


@njit(inline="always", cache=True)
def _push(heap: np.ndarray, size: int, key: int) -> int:  # pragma: no cover
    """Push ``key`` onto the min-heap of ``size`` keys; the new size."""
    sift_up(heap, size, key)
    return size + 1


@njit(inline="always", cache=True)
def _pop(heap: np.ndarray, size: int) -> tuple[int, int]:  # pragma: no cover
    """Pop the smallest key: (key, new size)."""
    top = heap[0]
    size -= 1
    if size > 0:
        sift_down(heap, size, 0, heap[size])
    return top, size


@njit(inline="always", cache=True)
def _current(  # pragma: no cover
    order: int, present: np.ndarray, children: np.ndarray, state: np.ndarray, optimal: bool
) -> bool:
    """Whether a heap key still describes a cached leaf as it is now."""
    node = _node_of(order)
    return bool(
        present[node] and children[node] == 0 and _order(state[node], node, optimal) == order
    )


@njit(nogil=True, cache=True)
def _compact(  # pragma: no cover
    heap: np.ndarray,
    size: int,
    present: np.ndarray,
    children: np.ndarray,
    state: np.ndarray,
    optimal: bool,
    listed: np.ndarray,
) -> int:
    """Keep each cached leaf's current key once, in place, and heap them again; the
    new size.  ``listed`` (one mark per node) comes and goes cleared."""
    kept = 0
    for k in range(size):
        order = heap[k]
        node = _node_of(order)
        if _current(order, present, children, state, optimal) and not listed[node]:
            listed[node] = True
            heap[kept] = order
            kept += 1
    for k in range(kept):
        listed[_node_of(heap[k])] = False
    for k in range((kept >> 1) - 1, -1, -1):
        sift_down(heap, kept, k, heap[k])
    return kept


@njit(nogil=True, cache=True)
def _room(  # pragma: no cover
    heap: np.ndarray,
    heaped: int,
    need: int,
    present: np.ndarray,
    children: np.ndarray,
    state: np.ndarray,
    optimal: bool,
    listed: np.ndarray,
) -> tuple[np.ndarray, int]:
    """The heap and its size, with room for ``need`` more keys: stale keys dropped when
    short of it, and the heap doubled when the current ones fill half of it."""
    if len(heap) - heaped >= need:
        return heap, heaped
    heaped = _compact(heap, heaped, present, children, state, optimal, listed)
    if len(heap) - heaped < need or 2 * heaped > len(heap):
        grown = np.empty(max(2 * len(heap), heaped + need), dtype=heap.dtype)
        grown[:heaped] = heap[:heaped]
        heap = grown
    return heap, heaped


@njit(nogil=True, cache=True)
def _evict(  # pragma: no cover
    heap: np.ndarray,
    heaped: int,
    guard: int,
    limit: int,
    present: np.ndarray,
    children: np.ndarray,
    state: np.ndarray,
    parent: np.ndarray,
    root: int,
    optimal: bool,
) -> tuple[bool, int]:
    """Evict the first leaf in heap order other than ``guard`` (the requesting path's
    cached leaf, as SGLang locks it), unless, with ``optimal``, it is needed again no
    later than ``limit``: (whether one was evicted, the heap's new size)."""
    guarded = -1
    evicted = False
    while heaped > 0:
        order, heaped = _pop(heap, heaped)
        if not _current(order, present, children, state, optimal):
            continue
        victim = _node_of(order)
        if victim == guard:
            guarded = order
            continue
        if optimal and state[victim] <= limit:
            heaped = _push(heap, heaped, order)
            break  # every leaf is needed sooner than this block
        present[victim] = False
        up = parent[victim]
        children[up] -= 1
        if up != root and children[up] == 0:
            heaped = _push(heap, heaped, _order(state[up], up, optimal))
        evicted = True
        break
    if guarded >= 0:
        heaped = _push(heap, heaped, guarded)
    return evicted, heaped


@njit(inline="always", cache=True)
def _use(  # pragma: no cover
    node: int, index: int, clock: int, next_use: np.ndarray, optimal: bool, state: np.ndarray
) -> int:
    """Record a use of ``node`` by read ``index``; the clock after it."""
    clock += 1
    state[node] = next_use[index] if optimal else clock
    return clock


@njit(inline="always", cache=True)
def _touch(  # pragma: no cover
    nodes: np.ndarray,
    start: int,
    run: int,
    clock: int,
    next_use: np.ndarray,
    optimal: bool,
    state: np.ndarray,
    children: np.ndarray,
    heap: np.ndarray,
    heaped: int,
) -> tuple[int, int]:
    """Refresh the leading run's nodes, a leaf's new key heaped: (clock, heap size)."""
    for index in range(start, start + run):
        node = nodes[index]
        clock = _use(node, index, clock, next_use, optimal, state)
        if children[node] == 0:
            heaped = _push(heap, heaped, _order(state[node], node, optimal))
    return clock, heaped


@njit(nogil=True, cache=True)
def _radix(  # pragma: no cover
    nodes: np.ndarray,
    starts: np.ndarray,
    parent: np.ndarray,
    root: int,
    capacity: int,
    next_use: np.ndarray,
    optimal: bool,
    state: np.ndarray,
    children: np.ndarray,
) -> np.ndarray:
    """``state`` (LRU: each node's last use; OPT: the next request using it) and
    ``children`` (its cached children) come zeroed.  A request pushes at most two keys a
    block onto the heap."""
    present = np.zeros(len(parent), dtype=np.bool_)
    present[root] = True
    listed = np.zeros(len(parent), dtype=np.bool_)  # compaction's marks
    heap = np.empty(1 << 12, dtype=np.int64)
    clock = size = heaped = 0
    hits = np.zeros(len(starts) - 1, dtype=np.int64)
    for request in range(len(starts) - 1):
        start, end = starts[request], starts[request + 1]
        need = 2 * (end - start) + 2
        heap, heaped = _room(heap, heaped, need, present, children, state, optimal, listed)
        run = leading_run(nodes, start, end, present)
        hits[request] = run
        clock, heaped = _touch(
            nodes, start, run, clock, next_use, optimal, state, children, heap, heaped
        )
        # the cached nodes of a path are its leading run: only its last can be a leaf
        guard = nodes[start + run - 1] if run > 0 else root
        for index in range(start + run, end):
            node = nodes[index]
            evicted = size < capacity
            if not evicted:
                limit = next_use[index] if optimal else 0
                evicted, heaped = _evict(
                    heap, heaped, guard, limit, present, children, state, parent, root, optimal
                )
                if evicted:
                    size -= 1
            if not evicted or not present[parent[node]]:
                break
            present[node] = True
            size += 1
            children[parent[node]] += 1
            clock = _use(node, index, clock, next_use, optimal, state)
            heaped = _push(heap, heaped, _order(state[node], node, optimal))
    return hits


@njit(nogil=True, cache=True)
def _seen_runs(  # pragma: no cover
    nodes: np.ndarray, starts: np.ndarray, n: int
) -> np.ndarray:
    """Per request, its leading nodes read by an earlier request: the hits of a cache
    that holds every node (nothing is evicted, every miss is inserted)."""
    present = np.zeros(n, dtype=np.bool_)
    hits = np.zeros(len(starts) - 1, dtype=np.int64)
    for request in range(len(starts) - 1):
        start, end = starts[request], starts[request + 1]
        hits[request] = leading_run(nodes, start, end, present)
        for index in range(start, end):
            present[nodes[index]] = True
    return hits


@njit(nogil=True, cache=True)
def _next_uses(  # pragma: no cover
    nodes: np.ndarray, starts: np.ndarray, last: np.ndarray, out: np.ndarray
) -> None:
    """Each read's next request reading its node (``len(starts)``: none); ``last`` (one
    per node) comes filled with that."""
    for request in range(len(starts) - 2, -1, -1):
        for index in range(starts[request], starts[request + 1]):
            out[index] = last[nodes[index]]
        for index in range(starts[request], starts[request + 1]):
            last[nodes[index]] = request


def next_uses(nodes: np.ndarray, starts: np.ndarray, count: int) -> np.ndarray:
    """Per read, the next request that reads its node (one of ``count``), or
    ``len(starts)`` when none does: what OPT evicts by, for every capacity."""
    starts = np.ascontiguousarray(starts, np.int64)
    uses = narrowest(len(starts))
    out = np.empty(len(nodes), uses)
    _next_uses(np.ascontiguousarray(nodes), starts, np.full(count, len(starts), uses), out)
    return out


def radix_hits(
    nodes: np.ndarray,
    starts: np.ndarray,
    parent: np.ndarray,
    root: int,
    capacity: int,
    next_use: np.ndarray | None = None,
) -> np.ndarray:
    """Per request, its leading blocks cached on arrival in a radix tree of ``capacity``
    blocks (``parent`` of every node, ``root`` the tree's root, never read): the least
    recently used leaf is evicted, or, given each read's `next_uses`, the leaf used again
    last, and a block needed later than every cached leaf is not inserted (Belady over
    the tree's leaves)."""
    nodes = np.ascontiguousarray(nodes)
    starts = np.ascontiguousarray(starts, np.int64)
    count = len(parent)
    if capacity >= count - 1:  # room for every node: nothing is evicted
        found: np.ndarray = _seen_runs(nodes, starts, count)
        return found
    optimal = next_use is not None
    uses = np.zeros(0, narrowest(len(starts))) if next_use is None else next_use
    found = _radix(
        nodes,
        starts,
        np.ascontiguousarray(parent),
        root,
        capacity,
        uses,
        optimal,
        np.zeros(count, uses.dtype if optimal else narrowest(2 * len(nodes) + 1)),
        np.zeros(count, narrowest(count)),
    )
    return found
